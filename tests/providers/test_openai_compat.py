"""The OpenAI-compatible adapter, driven through the real ``openai`` SDK over HTTP."""

from __future__ import annotations

import pytest

from hippobot.errors import (
    AuthError,
    BadRequestError,
    ContextTooLongError,
    EndpointUnreachableError,
    MalformedResponseError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from hippobot.providers import (
    ChatRequest,
    Finish,
    OpenAICompatProvider,
    Restart,
    TextDelta,
    ToolCallEvent,
    Usage,
    collect,
)

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


def user_request(text: str = "hello", **kw) -> ChatRequest:
    return ChatRequest(
        model="test-model",
        messages=[
            {"role": "system", "content": "You are hippobot."},
            {"role": "user", "content": text},
        ],
        **kw,
    )


@pytest.fixture
def provider(scripted_server) -> OpenAICompatProvider:
    return OpenAICompatProvider(
        api_key="sk-test",
        api_base=scripted_server.base_url,
        extra_headers={"X-Title": "hippobot-tests"},
        timeout=5.0,
    )


async def events_of(provider, request) -> list:
    return [event async for event in provider.stream(request)]


# --- happy paths ----------------------------------------------------------------------


async def test_text_streams_as_several_deltas_then_usage_then_finish(provider, scripted_model):
    scripted_model.reply("The cat is called Luna and she likes the sun.")
    scripted_model.usage(prompt_tokens=1200, completion_tokens=12, cached_tokens=1024)

    events = await events_of(provider, user_request("what is my cat called?"))

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "The cat is called Luna and she likes the sun."
    assert events[-2:] == [Usage(1200, 12, 1024), Finish("stop")]


async def test_request_carries_messages_key_headers_and_stream_options(provider, scripted_model):
    scripted_model.reply("ok")
    request = user_request("hi", tools=TOOLS, temperature=0.2, max_tokens=300)

    await collect(provider.stream(request))

    sent = scripted_model.requests[0]
    assert sent.api == "openai" and sent.stream is True
    assert sent.messages == request.messages
    assert sent.tools == TOOLS and sent.tool_choice == "auto"
    assert sent.raw["stream_options"] == {"include_usage": True}
    assert sent.raw["temperature"] == 0.2
    # Named "openai" but served elsewhere: the key every compatible server knows.
    assert sent.raw["max_tokens"] == 300 and "max_completion_tokens" not in sent.raw
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["x-title"] == "hippobot-tests"


async def test_compatible_servers_get_max_tokens_and_no_tools_when_none(
    scripted_server, scripted_model
):
    ollama = OpenAICompatProvider(api_key="", api_base=scripted_server.base_url, name="ollama")
    scripted_model.reply("ok")

    await collect(ollama.stream(user_request(max_tokens=99)))

    raw = scripted_model.requests[0].raw
    assert raw["max_tokens"] == 99 and "max_completion_tokens" not in raw
    assert "tools" not in raw and "tool_choice" not in raw


def test_only_openais_own_api_gets_max_completion_tokens():
    # OpenAI's reasoning models refuse max_tokens; llama.cpp, Ollama and vLLM ignore the new
    # key and would generate until the context is full (seen: a 30-minute Dream request).
    request = user_request(max_tokens=300)
    for base, key in [
        (None, "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_completion_tokens"),
        ("http://127.0.0.1:8081/v1", "max_tokens"),
        ("http://localhost:11434/v1", "max_tokens"),
    ]:
        params = OpenAICompatProvider(api_key="sk-x", api_base=base, name="openai")._params(request)
        assert params[key] == 300 and len({"max_tokens", "max_completion_tokens"} & set(params)) == 1


async def test_tool_call_arguments_arriving_in_fragments_are_joined(provider, scripted_model):
    scripted_model.reply_tool_calls(
        [("read_file", {"path": "notes/todo.md"}), ("list_dir", {"path": "."})],
        text="Let me look.",
    )

    events = await events_of(provider, user_request(tools=TOOLS))

    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", '{"path": "notes/todo.md"}'),
        ("list_dir", '{"path": "."}'),
    ]
    assert calls[0].id != calls[1].id
    assert events[-1] == Finish("tool_calls")
    response = await collect(_replay(events))
    assert response.text == "Let me look." and len(response.tool_calls) == 2


async def test_invalid_json_arguments_are_passed_through_verbatim(provider, scripted_model):
    scripted_model.reply_tool_call("read_file", '{"path": "a.txt", ', id="call_bad")

    response = await collect(provider.stream(user_request(tools=TOOLS)))

    assert response.tool_calls == [
        {
            "id": "call_bad",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.txt", '},
        }
    ]


async def _replay(events):
    for event in events:
        yield event


# --- errors and retries ---------------------------------------------------------------


async def test_rejected_key_is_an_auth_error_and_not_retried(
    provider, scripted_model, retrying, fake_sleep
):
    scripted_model.fail(401)
    scripted_model.reply("never sent")

    with pytest.raises(AuthError) as info:
        await collect(retrying(provider).stream(user_request()))

    assert info.value.status == 401
    assert "HIPPOBOT_API_KEY" in str(info.value) and "providers.openai.apiKey" in str(info.value)
    assert "\n" not in str(info.value)
    assert len(scripted_model.requests) == 1 and fake_sleep.waits == []


async def test_rate_limit_waits_as_long_as_retry_after_says(
    provider, scripted_model, retrying, fake_sleep
):
    scripted_model.fail(429, retry_after=7)
    scripted_model.reply("finally")

    response = await collect(retrying(provider).stream(user_request()))

    assert response.text == "finally"
    assert fake_sleep.waits == [7.0]


async def test_rate_limit_error_carries_retry_after(provider, scripted_model):
    scripted_model.fail(429, retry_after=2.5)

    with pytest.raises(RateLimitError) as info:
        await collect(provider.stream(user_request()))

    assert info.value.retry_after == 2.5 and info.value.retryable


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retried_then_raised_with_attempt_count(
    provider, scripted_model, retrying, fake_sleep, status
):
    for _ in range(4):
        scripted_model.fail(status)

    with pytest.raises(ServerError) as info:
        await collect(retrying(provider, jitter=0.0).stream(user_request()))

    assert info.value.status == status
    assert str(info.value).endswith("(after 4 attempts)")
    assert fake_sleep.waits == [0.5, 1.0, 2.0]
    assert len(scripted_model.requests) == 4


async def test_server_error_then_success_returns_the_reply(provider, scripted_model, retrying):
    scripted_model.fail(502).reply("recovered")

    response = await collect(retrying(provider).stream(user_request()))

    assert response.text == "recovered"


async def test_bad_request_is_not_retried(provider, scripted_model, retrying, fake_sleep):
    scripted_model.fail(400)

    with pytest.raises(BadRequestError) as info:
        await collect(retrying(provider).stream(user_request()))

    assert not isinstance(info.value, ContextTooLongError)
    assert len(scripted_model.requests) == 1 and fake_sleep.waits == []


async def test_unknown_model_404_points_at_model_and_base(provider, scripted_model):
    scripted_model.fail(404)

    with pytest.raises(BadRequestError, match="check the model name") as info:
        await collect(provider.stream(user_request()))

    assert info.value.status == 404 and "providers.openai.apiBase" in str(info.value)


async def test_context_length_exceeded_code_is_typed(provider, scripted_model, retrying):
    scripted_model.fail(
        400,
        body={
            "error": {
                "message": "Input is over the limit.",  # no hint in the prose: the code decides
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    )

    with pytest.raises(ContextTooLongError, match="/new"):
        await collect(retrying(provider).stream(user_request()))

    assert len(scripted_model.requests) == 1


async def test_malformed_body_is_typed_and_retried(provider, scripted_model, retrying, fake_sleep):
    scripted_model.malformed()

    with pytest.raises(MalformedResponseError, match="not valid JSON"):
        await collect(provider.stream(user_request()))

    scripted_model.malformed().reply("clean")
    response = await collect(retrying(provider).stream(user_request()))
    assert response.text == "clean" and len(fake_sleep.waits) == 1


async def test_cut_stream_restarts_and_keeps_only_the_retried_reply(
    provider, scripted_model, retrying
):
    scripted_model.cut_stream(after_chars=12)
    scripted_model.reply("A complete answer, sent twice.")

    events = [e async for e in retrying(provider).stream(user_request())]

    restart = next(i for i, e in enumerate(events) if isinstance(e, Restart))
    partial = "".join(e.text for e in events[:restart] if isinstance(e, TextDelta))
    assert partial == "A complete a"
    assert events[restart].attempt == 2 and "stopped before its end" in events[restart].error
    response = await collect(_replay(events))
    assert response.text == "A complete answer, sent twice."


async def test_hang_longer_than_the_timeout_is_a_timeout_error(
    scripted_server, scripted_model, retrying
):
    impatient = OpenAICompatProvider(api_key="k", api_base=scripted_server.base_url, timeout=0.3)
    scripted_model.hang(30)

    with pytest.raises(ProviderTimeoutError, match=r"within 0\.3s"):
        await collect(impatient.stream(user_request()))

    seen = []
    scripted_model.hang(30).reply("in time")
    wrapped = retrying(impatient)
    wrapped._on_retry = lambda attempt, err, wait: seen.append((attempt, type(err)))
    response = await collect(wrapped.stream(user_request()))
    assert response.text == "in time"
    assert seen == [(1, ProviderTimeoutError)]


async def test_connection_refused_names_the_url_and_what_to_check(
    closed_port, retrying, fake_sleep
):
    base = f"http://127.0.0.1:{closed_port}/v1"
    dead = OpenAICompatProvider(api_key="k", api_base=base, timeout=2.0)

    with pytest.raises(EndpointUnreachableError) as info:
        await collect(retrying(dead, max_attempts=2).stream(user_request()))

    message = str(info.value)
    assert message.startswith(f"cannot reach {base} (connection refused): is the server running?")
    assert "HIPPOBOT_API_BASE" in message and message.endswith("(after 2 attempts)")
    assert len(fake_sleep.waits) == 1


async def test_stop_reaches_the_endpoint_and_length_comes_back(provider, scripted_model):
    scripted_model.reply("cut he", finish_reason="length")

    response = await collect(provider.stream(ChatRequest(
        model="scripted-model", messages=[{"role": "user", "content": "hi"}], stop=("END", "##")
    )))

    assert scripted_model.requests[0].raw["stop"] == ["END", "##"]
    assert response.finish_reason == "length"
