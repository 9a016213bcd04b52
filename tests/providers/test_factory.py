"""Building providers from configuration, and keeping start-up free of SDK imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hippobot.errors import EndpointUnreachableError
from hippobot.providers import (
    KNOWN_ENDPOINTS,
    AnthropicProvider,
    ChatRequest,
    RetryingProvider,
    RetryPolicy,
    collect,
    make_provider,
)

REQUEST = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def test_importing_providers_and_testing_kit_does_not_import_vendor_sdks():
    code = (
        "import sys\n"
        "import hippobot.providers.factory, hippobot.providers, hippobot.testing\n"
        "loaded = [m for m in ('openai', 'anthropic') if m in sys.modules]\n"
        "print(','.join(loaded) or 'none')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert out.stdout.strip() == "none"


def test_known_endpoints_are_data():
    assert KNOWN_ENDPOINTS["openrouter"] == "https://openrouter.ai/api/v1"
    assert KNOWN_ENDPOINTS["deepseek"] == "https://api.deepseek.com/v1"
    assert KNOWN_ENDPOINTS["ollama"] == "http://localhost:11434/v1"
    assert KNOWN_ENDPOINTS["vllm"] == "http://localhost:8000/v1"
    assert KNOWN_ENDPOINTS["llamacpp"] == "http://localhost:8080/v1"
    assert KNOWN_ENDPOINTS["anthropic"] is None


def chain(provider) -> list[str]:
    """The wrappers from the outside in, ending with the endpoint adapter."""
    names = []
    while provider is not None:
        names.append(type(provider).__name__)
        provider = getattr(provider, "inner", None)
    return names


def adapter(provider):
    while getattr(provider, "inner", None) is not None:
        provider = provider.inner
    return provider


def test_make_provider_wraps_the_adapter_in_the_retry_policy():
    policy = RetryPolicy(max_attempts=2)
    openai = make_provider(
        "openai", api_key="k", api_base="http://127.0.0.1:1/v1", retry=policy, text_tool_calls="off"
    )
    claude = make_provider("anthropic", api_key="k", api_base=None)

    assert isinstance(openai, RetryingProvider) and openai.policy is policy
    # every reply is cleaned of a copied runtime-context block (providers/echo.py)
    assert chain(openai) == ["RetryingProvider", "RuntimeEchoFilter", "OpenAICompatProvider"]
    assert chain(claude) == ["RetryingProvider", "RuntimeEchoFilter", "AnthropicProvider"]
    assert claude.policy == RetryPolicy()


def test_a_known_name_supplies_the_base_url():
    local = make_provider("openai", api_key="", api_base=None, name="ollama")

    assert local.name == "ollama"
    assert "TextToolCallProvider" in chain(local)  # local servers: written calls recovered
    assert adapter(local).api_base == "http://localhost:11434/v1"


def test_text_tool_calls_follow_the_setting_and_usage_is_metered(tmp_path):
    from hippobot.usage_ledger import UsageLedger

    remote = make_provider("openai", api_key="k", api_base=None)
    assert "TextToolCallProvider" not in chain(remote)
    forced = make_provider("openai", api_key="k", api_base=None, text_tool_calls="on")
    assert "TextToolCallProvider" in chain(forced)
    metered = make_provider("anthropic", api_key="k", api_base=None, usage=UsageLedger(tmp_path / "u.jsonl"))
    assert chain(metered) == ["RetryingProvider", "MeteredProvider", "RuntimeEchoFilter", "AnthropicProvider"]
    assert isinstance(adapter(metered), AnthropicProvider)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown provider kind"):
        make_provider("gemini", api_key="k", api_base=None)  # type: ignore[arg-type]


async def test_made_provider_talks_to_the_scripted_server(scripted_server, scripted_model):
    provider = make_provider("openai", api_key="k", api_base=scripted_server.base_url, name="vllm")
    scripted_model.reply("served")

    assert (await collect(provider.stream(REQUEST))).text == "served"


async def test_errors_name_the_configured_provider(closed_port):
    provider = make_provider(
        "openai",
        api_key="k",
        api_base=f"http://127.0.0.1:{closed_port}/v1",
        name="llamacpp",
        retry=RetryPolicy(max_attempts=1),
    )

    with pytest.raises(EndpointUnreachableError, match=r"providers\.llamacpp\.apiBase"):
        await collect(provider.stream(REQUEST))
