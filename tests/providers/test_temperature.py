"""The sampling temperature requests carry: the configured one; unset, nanobot's 0.1 for a local
server (whose own default, 0.8 in llama.cpp and Ollama, made a small model's answers a lottery),
and nothing at all for a hosted endpoint (some refuse any but their own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from hippobot.agent.agent import Agent
from hippobot.providers.endpoints import LOCAL_TEMPERATURE
from hippobot.providers.model import ModelClient
from hippobot.testing import ScriptedModel


async def test_a_local_server_is_sent_a_low_temperature_for_turns_and_dream(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel
) -> None:
    agent = make_agent()  # the scripted model listens on this machine: a local server
    scripted_model.reply("Noted.")
    await agent.turn("cli:t", "My cat is called Luna.")
    assert scripted_model.requests[-1].raw["temperature"] == LOCAL_TEMPERATURE == 0.1
    scripted_model.reply("- [durable] User's cat is called Luna")
    await agent.new_session("cli:t")  # the archive step's request
    await agent.jobs.drain()
    assert len(scripted_model.requests) >= 2, "the archive step asked the model"
    assert [r.raw.get("temperature") for r in scripted_model.requests[1:]] == [0.1] * (len(scripted_model.requests) - 1)


async def test_a_configured_temperature_wins(make_agent: Callable[..., Agent], scripted_model: ScriptedModel) -> None:
    agent = make_agent(temperature=0.7)
    scripted_model.reply("Hi.")
    await agent.turn("cli:t", "Hello")
    assert scripted_model.requests[-1].raw["temperature"] == 0.7


@dataclass(frozen=True)
class _Hosted:
    kind: Literal["openai", "anthropic"] = "openai"
    provider: str = "openai"
    model: str = "gpt-5"
    api_key: str = "sk-test"
    api_base: str | None = "https://api.openai.com/v1"
    extra_headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None


def test_a_hosted_endpoint_gets_its_own_default() -> None:
    assert ModelClient(lambda: _Hosted(), max_tokens=100, temperature=None).temperature is None
    assert ModelClient(lambda: _Hosted(), max_tokens=100, temperature=1.0).temperature == 1.0
    local = _Hosted(provider="ollama", api_base=None)
    assert ModelClient(lambda: local, max_tokens=100, temperature=None).temperature == 0.1
