"""The scripted model in-process: queueing, recording, fallbacks and loud failures."""

from __future__ import annotations

import asyncio
import threading

import pytest

from hippobot.errors import (
    AuthError,
    ContextTooLongError,
    MalformedResponseError,
    ProviderTimeoutError,
    RateLimitError,
    StreamInterruptedError,
)
from hippobot.providers import ChatRequest, Finish, TextDelta, ToolCallEvent, Usage, collect
from hippobot.testing import RecordedRequest, ScriptedModel, ScriptedProvider, UnscriptedCallError


def ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
        **kw,
    )


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
def provider(model) -> ScriptedProvider:
    return ScriptedProvider(model)


async def test_replies_are_served_in_order_and_requests_recorded(model, provider):
    model.reply("first").reply_tool_call("read_file", {"path": "x"}, id="call_x")
    assert model.pending() == 2

    one = await collect(provider.stream(ask("a")))
    two = await collect(
        provider.stream(ask("b", tools=[{"type": "function", "function": {"name": "read_file"}}]))
    )

    assert one.text == "first"
    assert (
        two.tool_calls[0]["id"] == "call_x"
        and two.tool_calls[0]["function"]["arguments"] == '{"path": "x"}'
    )
    assert model.pending() == 0
    assert [r.last_user_text() for r in model.requests] == ["a", "b"]
    assert model.requests[1].tools[0]["function"]["name"] == "read_file"
    assert model.requests[0].api == "openai" and model.requests[0].stream is True


async def test_several_tool_calls_keep_their_order_and_get_distinct_ids(model, provider):
    model.reply_tool_calls([("a", {}), ("b", "not json")])

    events = [e async for e in provider.stream(ask("go"))]

    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.arguments) for c in calls] == [("a", "{}"), ("b", "not json")]
    assert len({c.id for c in calls}) == 2
    assert events[-1] == Finish("tool_calls")


async def test_recorded_messages_are_a_copy(model, provider):
    request = ask("original")
    model.reply("ok")

    await collect(provider.stream(request))
    request.messages[1]["content"] = "changed later"

    assert model.requests[0].last_user_text() == "original"


async def test_unscripted_call_raises_with_the_last_user_message(model, provider):
    with pytest.raises(UnscriptedCallError, match="remember my cat"):
        await collect(provider.stream(ask("please remember my cat")))

    assert len(model.errors) == 1 and "remember my cat" in model.errors[0]


async def test_fallback_answers_unscripted_calls(model, provider):
    model.fallback = lambda req: f"echo: {req.last_user_text()}"
    model.reply("scripted first")

    first = await collect(provider.stream(ask("one")))
    second = await collect(provider.stream(ask("two")))

    assert (first.text, second.text) == ("scripted first", "echo: two")
    assert model.errors == []


async def test_usage_override_applies_to_the_next_reply_only(model, provider):
    model.reply("a").reply("b")
    model.usage(prompt_tokens=900, completion_tokens=3, cached_tokens=512)

    first = await collect(provider.stream(ask("x")))
    second = await collect(provider.stream(ask("x")))

    assert first.usage == Usage(900, 3, 512)
    assert second.usage != first.usage and second.usage.cached_tokens == 0


async def test_default_usage_is_a_deterministic_estimate(model, provider):
    model.reply("four").reply("four")

    one = await collect(provider.stream(ask("a" * 400)))
    two = await collect(provider.stream(ask("a" * 400)))
    longer = ScriptedModel().reply("four")
    three = await collect(ScriptedProvider(longer).stream(ask("a" * 4000)))

    assert one.usage == two.usage and one.usage.prompt_tokens >= 100
    assert three.usage.prompt_tokens > one.usage.prompt_tokens


async def test_faults_raise_the_typed_errors_an_adapter_would(model, provider):
    model.fail(401).fail(429, retry_after=3).malformed().hang(0)
    model.fail(400, body={"error": {"message": "too long", "code": "context_length_exceeded"}})

    for expected in (
        AuthError,
        RateLimitError,
        MalformedResponseError,
        ProviderTimeoutError,
        ContextTooLongError,
    ):
        with pytest.raises(expected) as info:
            await collect(provider.stream(ask("x")))
        if expected is RateLimitError:
            assert info.value.retry_after == 3.0


async def test_cut_stream_yields_part_of_the_next_reply_and_leaves_it_queued(model, provider):
    model.cut_stream(after_chars=4).reply("abcdefgh")
    seen = []

    with pytest.raises(StreamInterruptedError):
        async for event in provider.stream(ask("x")):
            seen.append(event)

    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "abcd"
    assert model.pending() == 1
    assert (await collect(provider.stream(ask("x")))).text == "abcdefgh"


def test_replies_are_handed_out_exactly_once_across_threads(model):
    for i in range(200):
        model.reply(f"r{i}")
    served: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            plan = model.take(RecordedRequest([], [], "m", None, False, "openai"))
            with lock:
                served.append(plan.reply.text)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(served) == sorted(f"r{i}" for i in range(200))
    assert len(model.requests) == 200 and model.pending() == 0


async def test_concurrent_streams_share_one_queue(model, provider):
    for i in range(5):
        model.reply(f"answer {i}")

    results = await asyncio.gather(*(collect(provider.stream(ask(str(i)))) for i in range(5)))

    assert sorted(r.text for r in results) == [f"answer {i}" for i in range(5)]
