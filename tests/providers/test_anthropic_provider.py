"""The Anthropic adapter, driven through the real ``anthropic`` SDK over HTTP."""

from __future__ import annotations

import pytest

from hippobot.errors import AuthError, ContextTooLongError, RateLimitError, ServerError
from hippobot.providers import (
    AnthropicProvider,
    ChatRequest,
    Finish,
    Restart,
    TextDelta,
    ToolCallEvent,
    Usage,
    collect,
)

EPHEMERAL = {"type": "ephemeral"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
# A turn that used two tools, then the user said more: the shape sessions store.
HISTORY = [
    {"role": "system", "content": "You are hippobot."},
    {"role": "user", "content": "What is in my notes?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.md"}'},
            },
            {
                "id": "toolu_2",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "b.md"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "toolu_1", "content": "# A\nbuy milk"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "# B\ncall mum"},
    {"role": "assistant", "content": "You need to buy milk and call mum."},
    {"role": "user", "content": "Thanks!"},
]


@pytest.fixture
def provider(scripted_server) -> AnthropicProvider:
    return AnthropicProvider(
        api_key="sk-ant-test",
        api_base=scripted_server.anthropic_base_url,
        extra_headers={"anthropic-beta": "test-beta"},
        timeout=5.0,
    )


def request(messages=HISTORY, **kw) -> ChatRequest:
    return ChatRequest(model="claude-test", messages=list(messages), **kw)


async def test_system_prompt_and_last_block_are_marked_for_caching(provider, scripted_model):
    scripted_model.reply("ok")

    await collect(provider.stream(request()))

    raw = scripted_model.requests[0].raw
    assert raw["system"] == [
        {"type": "text", "text": "You are hippobot.", "cache_control": EPHEMERAL}
    ]
    assert raw["messages"][-1]["content"][-1] == {
        "type": "text",
        "text": "Thanks!",
        "cache_control": EPHEMERAL,
    }
    assert sum("cache_control" in b for m in raw["messages"] for b in m["content"]) == 1
    sent = scripted_model.requests[0]
    assert sent.api == "anthropic" and sent.stream is True
    assert "sk-ant-test" in (
        sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    )
    assert sent.headers["anthropic-beta"] == "test-beta"


async def test_tool_calls_and_results_become_tool_use_and_tool_result_blocks(
    provider, scripted_model
):
    scripted_model.reply("ok")

    await collect(provider.stream(request()))

    messages = scripted_model.requests[0].raw["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.md"}},
        {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "b.md"}},
    ]
    assert messages[2]["content"] == [  # both results merged into one user message
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "# A\nbuy milk"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "# B\ncall mum"},
    ]
    # Converted back, the recorded conversation is the one the session holds.
    assert scripted_model.requests[0].messages == HISTORY


async def test_user_text_after_tool_results_joins_their_user_message(provider, scripted_model):
    scripted_model.reply("ok")
    messages = [*HISTORY[:5], {"role": "user", "content": "and the third file?"}]

    await collect(provider.stream(request(messages)))

    last = scripted_model.requests[0].raw["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result", "text"]


async def test_data_url_images_become_base64_image_blocks(provider, scripted_model):
    scripted_model.reply("a cat")
    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]

    await collect(provider.stream(request(messages)))

    block = scripted_model.requests[0].raw["messages"][0]["content"][1]
    assert block["source"] == {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}


async def test_tools_are_sent_as_input_schemas_and_tool_choice_none_is_honoured(
    provider, scripted_model
):
    scripted_model.reply("no tools needed").reply("ok")

    await collect(provider.stream(request(tools=TOOLS, tool_choice="none")))
    await collect(provider.stream(request(tools=TOOLS)))

    raw = scripted_model.requests[0].raw
    assert raw["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]
    assert raw["tool_choice"] == {"type": "none"}
    assert scripted_model.requests[1].raw["tool_choice"] == {"type": "auto"}
    assert scripted_model.requests[0].tools == TOOLS


async def test_streamed_text_and_cached_usage(provider, scripted_model):
    scripted_model.reply("Luna sleeps on the keyboard again.")
    scripted_model.usage(prompt_tokens=5000, completion_tokens=9, cached_tokens=4096)

    events = [e async for e in provider.stream(request())]

    assert len([e for e in events if isinstance(e, TextDelta)]) > 1
    assert (
        "".join(e.text for e in events if isinstance(e, TextDelta))
        == "Luna sleeps on the keyboard again."
    )
    # prompt tokens = input + cache read + cache creation, as OpenAI counts them
    assert events[-2:] == [Usage(5000, 9, 4096), Finish("stop")]


async def test_streamed_tool_calls_with_fragmented_and_invalid_arguments(provider, scripted_model):
    scripted_model.reply_tool_calls(
        [("read_file", {"path": "notes/todo.md"}), ("read_file", '{"path": "unterminated')],
        text="Reading both.",
    )

    events = [e async for e in provider.stream(request(tools=TOOLS))]

    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [c.arguments for c in calls] == ['{"path": "notes/todo.md"}', '{"path": "unterminated']
    assert calls[0].id == "call_1" and calls[1].id == "call_2"
    assert events[-1] == Finish("tool_calls")


async def test_rejected_key_is_an_auth_error(provider, scripted_model, retrying):
    scripted_model.fail(401)

    with pytest.raises(AuthError, match=r"providers\.anthropic\.apiKey"):
        await collect(retrying(provider).stream(request()))

    assert len(scripted_model.requests) == 1


async def test_rate_limit_and_overload_are_retried(provider, scripted_model, retrying, fake_sleep):
    scripted_model.fail(429, retry_after=3).fail(529).reply("finally")

    response = await collect(retrying(provider, jitter=0.0).stream(request()))

    assert response.text == "finally"
    assert fake_sleep.waits == [3.0, 1.0]


async def test_rate_limit_error_is_typed(provider, scripted_model):
    scripted_model.fail(429, retry_after=1)

    with pytest.raises(RateLimitError) as info:
        await collect(provider.stream(request()))

    assert info.value.retry_after == 1.0


async def test_overload_after_all_attempts_says_how_many(provider, scripted_model, retrying):
    for _ in range(2):
        scripted_model.fail(529)

    with pytest.raises(ServerError, match=r"\(after 2 attempts\)$"):
        await collect(retrying(provider, max_attempts=2).stream(request()))


async def test_prompt_too_long_is_a_context_error(provider, scripted_model):
    scripted_model.fail(
        400,
        body={
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 250000 tokens > 200000 maximum",
            },
        },
    )

    with pytest.raises(ContextTooLongError):
        await collect(provider.stream(request()))


async def test_cut_stream_restarts_then_succeeds(provider, scripted_model, retrying):
    scripted_model.cut_stream(after_chars=8).reply("Complete reply.")

    events = [e async for e in retrying(provider).stream(request())]

    assert any(isinstance(e, Restart) for e in events)
    assert (await collect(_replay(events))).text == "Complete reply."


async def test_base_url_ending_in_v1_is_accepted(scripted_server, scripted_model):
    pasted = AnthropicProvider(api_key="k", api_base=scripted_server.anthropic_base_url + "/v1/")
    scripted_model.reply("reached")

    assert (await collect(pasted.stream(request()))).text == "reached"


async def _replay(events):
    for event in events:
        yield event


async def test_stop_sequences_and_a_cut_reply_map_to_anthropic_and_back(provider, scripted_model):
    scripted_model.reply("cut he", finish_reason="length")

    response = await collect(provider.stream(ChatRequest(
        model="claude-test", messages=HISTORY, max_tokens=7, stop=("END",)
    )))

    (sent,) = scripted_model.requests
    assert sent.raw["stop_sequences"] == ["END"] and sent.raw["max_tokens"] == 7
    assert response.finish_reason == "length" and response.text == "cut he"
