"""SPEC 5: "A failing model (timeouts, 429 with retry-after, 5xx, malformed tool arguments, a
stream cut mid-way) gets bounded retries with backoff; then a clear error, the user's
message kept."

Every fault is served over HTTP to the real OpenAI SDK client. For each one the same three
promises are checked: the turn ends in a reply or a one-line ProviderError after a bounded
number of calls; the user's message is on disk; the next turn replays a legal conversation
that still contains it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from hippobot.agent.agent import Agent
from hippobot.errors import ProviderError
from hippobot.loop.events import ReplyRestart
from hippobot.providers.openai_compat import OpenAICompatProvider
from hippobot.providers.retry import RetryingProvider, RetryPolicy
from hippobot.session.keys import key_to_relpath
from hippobot.testing.scripted import ScriptedModel

from .harness import ResettingProxy, request_violations

KEY = "cli:faults"
QUESTION = "please keep this question: where did I park the bike?"


@dataclass(frozen=True)
class Case:
    id: str
    script: Callable[[ScriptedModel], object]
    outcome: str  # "reply" | "error"
    expect: str  # a substring of the reply or of the error message
    calls: int  # model calls the turn makes, exactly
    timeout: float = 10.0
    waits: tuple[float, ...] | None = None  # the retry waits, when the server chose them


def _times(n: int, step: Callable[[ScriptedModel], object]) -> Callable[[ScriptedModel], None]:
    def script(model: ScriptedModel) -> None:
        for _ in range(n):
            step(model)

    return script


def _then(*steps: Callable[[ScriptedModel], object]) -> Callable[[ScriptedModel], None]:
    def script(model: ScriptedModel) -> None:
        for step in steps:
            step(model)

    return script


_ok = lambda text: lambda m: m.reply(text)  # noqa: E731

CASES = [
    Case("timeout-then-answer", _then(lambda m: m.hang(1.0), _ok("recovered")), "reply",
         "recovered", 2, timeout=0.3),
    Case("timeout-every-time", _times(4, lambda m: m.hang(1.0)), "error", "within 0.3s", 4,
         timeout=0.3),
    Case("429-retry-after", _then(lambda m: m.fail(429, retry_after=0.25), _ok("after wait")),
         "reply", "after wait", 2, waits=(0.25,)),
    Case("429-retry-after-too-long", lambda m: m.fail(429, retry_after=3600), "error",
         "retry after 3600s", 1),
    Case("500-then-answer", _then(lambda m: m.fail(500), _ok("fine now")), "reply", "fine now", 2),
    Case("502-then-answer", _then(lambda m: m.fail(502), _ok("fine now")), "reply", "fine now", 2),
    Case("503-twice-then-answer", _then(lambda m: m.fail(503), lambda m: m.fail(503),
                                        _ok("third time")), "reply", "third time", 3),
    Case("503-every-time", _times(4, lambda m: m.fail(503)), "error", "after 4 attempts", 4),
    Case("401-not-retried", lambda m: m.fail(401), "error", "HIPPOBOT_API_KEY", 1),
    Case("malformed-json-then-answer", _then(lambda m: m.malformed(), _ok("parsed")), "reply",
         "parsed", 2),
    Case("malformed-json-every-time", _times(4, lambda m: m.malformed()), "error",
         "not valid JSON", 4),
    Case("stream-cut-mid-reply", _then(lambda m: m.cut_stream(9),
                                       _ok("a complete answer, not a partial one")),
         "reply", "a complete answer, not a partial one", 2),
    Case("stream-cut-every-time", _times(4, lambda m: m.cut_stream(5)), "error",
         "stopped before its end", 4),
    Case("tool-arguments-not-json",
         _then(lambda m: m.reply_tool_call("write_file", '{"path": "a.txt", "content": '),
               _ok("sorry about that")), "reply", "sorry about that", 2),
    Case("unknown-tool", _then(lambda m: m.reply_tool_call("launch_rockets", {"now": True}),
                               _ok("no rockets")), "reply", "no rockets", 2),
    Case("endless-tool-loop", _times(3, lambda m: m.reply_tool_call("list_dir", {"path": "."})),
         "reply", "3 tool steps", 3),
    Case("server-dies-after-a-tool-call",
         _then(lambda m: m.reply_tool_call("list_dir", {"path": "."}),
               _times(4, lambda m: m.fail(503))), "error", "server error", 5),
]


@pytest.fixture
def fault_agent(make_settings, scripted_server):
    """``fault_agent(timeout=..., api_base=...)``: an agent whose retries record their waits."""
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    def make(*, timeout: float = 10.0, api_base: str | None = None, **defaults) -> Agent:
        settings = make_settings(**defaults)
        inner = OpenAICompatProvider(
            api_key="sk-fault-test-000000000000", api_base=api_base or scripted_server.base_url,
            timeout=timeout,
        )
        policy = RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=4.0, jitter=0.0)
        agent = Agent(settings, provider=RetryingProvider(inner, policy, sleep=no_sleep))
        agent.waits = waits  # type: ignore[attr-defined]
        return agent

    return make


def _session_records(agent: Agent) -> list[dict]:
    path = agent.workspace / key_to_relpath(KEY)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def _next_turn_is_legal(agent: Agent, model: ScriptedModel) -> None:
    """The user's message survived, and the conversation replays legally next turn."""
    records = _session_records(agent)  # every line parses
    users = [r for r in records if r.get("role") == "user"]
    assert users and QUESTION in users[-1]["content"]
    before = len(model.requests)
    model.reply("next answer")
    assert (await agent.turn(KEY, "and now?")).reply == "next answer"
    request = model.requests[before]
    assert request_violations(request.messages) == []
    assert QUESTION in json.dumps(request.messages, ensure_ascii=False)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_each_model_fault_ends_cleanly_and_keeps_the_message(
    case: Case, fault_agent, scripted_model
):
    agent = fault_agent(timeout=case.timeout, max_tool_iterations=3)
    case.script(scripted_model)
    events: list = []
    if case.outcome == "reply":
        result = await agent.turn(KEY, QUESTION, on_event=events.append)
        assert case.expect in result.reply
    else:
        with pytest.raises(ProviderError) as info:
            await agent.turn(KEY, QUESTION, on_event=events.append)
        message = str(info.value)
        assert case.expect in message and "\n" not in message
    assert len(scripted_model.requests) == case.calls  # bounded, and no call wasted
    assert scripted_model.pending() == 0
    if case.waits is not None:
        assert agent.waits == list(case.waits)  # type: ignore[attr-defined]
    await _next_turn_is_legal(agent, scripted_model)


async def test_backoff_grows_between_retries(fault_agent, scripted_model):
    agent = fault_agent()
    _times(4, lambda m: m.fail(503))(scripted_model)
    with pytest.raises(ProviderError):
        await agent.turn(KEY, QUESTION)
    assert agent.waits == [0.5, 1.0, 2.0]  # type: ignore[attr-defined]


async def test_a_cut_stream_is_shown_restarted_and_stored_once(fault_agent, scripted_model):
    agent = fault_agent()
    scripted_model.cut_stream(9).reply("a complete answer, not a partial one")
    events: list = []
    await agent.turn(KEY, QUESTION, on_event=events.append)
    assert any(isinstance(e, ReplyRestart) for e in events)
    replies = [r["content"] for r in _session_records(agent) if r.get("role") == "assistant"]
    assert replies == ["a complete answer, not a partial one"]


async def test_a_tool_call_cut_mid_arguments_runs_once(fault_agent, scripted_model):
    agent = fault_agent()
    scripted_model.cut_stream(12)
    scripted_model.reply_tool_call("exec", {"command": "echo ran >> ran.log"})
    scripted_model.reply("logged it")
    assert (await agent.turn(KEY, QUESTION)).reply == "logged it"
    assert (agent.workspace / "ran.log").read_text() == "ran\n"
    calls = [r for r in _session_records(agent) if r.get("tool_calls")]
    assert len(calls) == 1 and json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])


@pytest.mark.parametrize("resets", [1, 3])
async def test_connection_resets_are_retried(fault_agent, scripted_server, scripted_model, resets):
    with ResettingProxy(scripted_server.port, resets=resets) as proxy:
        agent = fault_agent(api_base=proxy.base_url)
        scripted_model.reply("through at last")
        assert (await agent.turn(KEY, QUESTION)).reply == "through at last"
        assert proxy.connections == resets + 1
        await _next_turn_is_legal(agent, scripted_model)


async def test_connection_reset_every_time_is_a_clear_error(fault_agent, scripted_server,
                                                            scripted_model):
    with ResettingProxy(scripted_server.port, resets=100) as proxy:
        agent = fault_agent(api_base=proxy.base_url)
        with pytest.raises(ProviderError) as info:
            await agent.turn(KEY, QUESTION)
        assert "connection reset" in str(info.value) and "after 4 attempts" in str(info.value)
        assert proxy.connections == 4
    records = _session_records(agent)
    assert QUESTION in records[-1]["content"]
