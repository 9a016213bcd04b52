"""Build the provider for a configuration: an adapter wrapped in the retry policy.

Vendors differ by data (:data:`KNOWN_ENDPOINTS`), not by subclass. Importing this module
does not import any vendor SDK; the adapters do that on their first request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from hippobot.providers.anthropic import AnthropicProvider
from hippobot.providers.base import ChatRequest, Provider
from hippobot.providers.echo import RuntimeEchoFilter
from hippobot.providers.metering import MeteredProvider, UsageSink
from hippobot.providers.openai_compat import OpenAICompatProvider
from hippobot.providers.retry import RetryingProvider, RetryPolicy
from hippobot.providers.text_tools import TextToolCallProvider, text_tools_enabled

__all__ = ["KNOWN_ENDPOINTS", "ProviderKind", "make_provider"]

ProviderKind = Literal["openai", "anthropic"]

# Default base URL by provider name (the ``providers.<name>`` key in config.json).
# ``None``: the vendor SDK's own default.
KNOWN_ENDPOINTS: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "llamacpp": "http://localhost:8080/v1",
    "anthropic": None,
}


def make_provider(
    kind: ProviderKind,
    *,
    api_key: str,
    api_base: str | None,
    extra_headers: dict[str, str] | None = None,
    timeout: float = 120.0,
    retry: RetryPolicy | None = None,
    name: str | None = None,
    text_tool_calls: str = "auto",
    usage: UsageSink | None = None,
    estimate: Callable[[ChatRequest], int] | None = None,
) -> Provider:
    """A ready provider: the ``kind`` adapter inside a :class:`RetryingProvider`.

    Between them: :class:`RuntimeEchoFilter` (a copy of the runtime-context block is taken out
    of the reply), and optionally :class:`TextToolCallProvider` (tool calls written as text become
    real calls; ``text_tool_calls`` is ``auto`` (local endpoints only), ``on`` or ``off``) and
    :class:`MeteredProvider` (every attempt recorded to ``usage``; ``estimate`` counts the
    prompt of a request whose endpoint reported no usage).

    ``name`` is the config key the user knows the endpoint by (``openrouter``, ``ollama``,
    ...); error messages point at ``providers.<name>``. It defaults to ``kind``, and when
    ``api_base`` is None a known name supplies its base URL.
    """
    label = name or kind
    base = api_base if api_base is not None else KNOWN_ENDPOINTS.get(label)
    adapter: Provider
    if kind == "anthropic":
        adapter = AnthropicProvider(
            api_key=api_key, api_base=base, extra_headers=extra_headers, timeout=timeout, name=label
        )
    elif kind == "openai":
        adapter = OpenAICompatProvider(
            api_key=api_key, api_base=base, extra_headers=extra_headers, timeout=timeout, name=label
        )
    else:
        raise ValueError(f"unknown provider kind {kind!r}: expected 'openai' or 'anthropic'")
    adapter = RuntimeEchoFilter(adapter)
    if text_tools_enabled(text_tool_calls, provider=label if kind == "openai" else kind, api_base=base):
        adapter = TextToolCallProvider(adapter)
    if usage is not None:
        adapter = MeteredProvider(adapter, usage, estimate)
    return RetryingProvider(adapter, retry or RetryPolicy())
