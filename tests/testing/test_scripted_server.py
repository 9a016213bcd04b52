"""The scripted server on the wire: what a raw HTTP client sees, byte by byte."""

from __future__ import annotations

import itertools
import json
import threading
import time

import httpx
import pytest

from hippobot.testing import ScriptedModel, ScriptedServer


def sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def sse_events(text: str) -> list[str]:
    return [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]


def chat(server, *, stream: bool, usage: bool = False, **extra) -> httpx.Response:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        **extra,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    return httpx.post(
        f"{server.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer t"}
    )


def messages(server, *, stream: bool) -> httpx.Response:
    body = {
        "model": "claude",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    return httpx.post(f"{server.anthropic_base_url}/v1/messages", json=body)


def test_models_endpoint_lists_the_scripted_model(scripted_server):
    listing = httpx.get(f"{scripted_server.base_url}/models").json()

    assert listing["data"][0]["id"] == "scripted-model"


def test_openai_stream_chunks_look_like_openai(scripted_server, scripted_model):
    scripted_model.reply_tool_call("read_file", {"path": "some/long/path.txt"}, text="Looking.")
    scripted_model.usage(prompt_tokens=50, completion_tokens=7, cached_tokens=32)

    response = chat(scripted_server, stream=True, usage=True)

    assert response.headers["content-type"] == "text/event-stream"
    data = sse_data(response.text)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == "Looking."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": ""},
    }
    fragments = [tc["function"]["arguments"] for tc in calls[1:]]
    assert len(fragments) >= 2 and "".join(fragments) == '{"path": "some/long/path.txt"}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 32
    }


def test_openai_stream_has_no_usage_chunk_unless_asked(scripted_server, scripted_model):
    scripted_model.reply("hi")

    chunks = [json.loads(d) for d in sse_data(chat(scripted_server, stream=True).text)[:-1]]

    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_openai_non_stream_answer(scripted_server, scripted_model):
    scripted_model.reply("plain")

    body = chat(scripted_server, stream=False).json()

    assert body["choices"][0]["message"] == {"role": "assistant", "content": "plain"}
    assert (
        body["usage"]["total_tokens"]
        == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )


def test_anthropic_stream_events_come_in_the_documented_order(scripted_server, scripted_model):
    scripted_model.reply_tool_call("list_dir", {"path": "."}, text="Sure.")

    response = messages(scripted_server, stream=True)

    names = sse_events(response.text)
    collapsed = [name for name, _ in itertools.groupby(names)]  # deltas repeat
    assert collapsed == [
        "message_start",
        *("content_block_start", "content_block_delta", "content_block_stop"),  # text
        *("content_block_start", "content_block_delta", "content_block_stop"),  # tool_use
        "message_delta",
        "message_stop",
    ]
    assert names.count("content_block_delta") > 2
    payloads = [json.loads(d) for d in sse_data(response.text)]
    assert payloads[-2]["delta"]["stop_reason"] == "tool_use"
    json_parts = [
        p["delta"]["partial_json"]
        for p in payloads
        if p.get("delta", {}).get("type") == "input_json_delta"
    ]
    assert "".join(json_parts) == '{"path": "."}'


def test_anthropic_non_stream_answer(scripted_server, scripted_model):
    scripted_model.reply_tool_call("list_dir", {"path": "."}, text="Sure.")

    body = messages(scripted_server, stream=False).json()

    assert [b["type"] for b in body["content"]] == ["text", "tool_use"]
    assert body["content"][1]["input"] == {"path": "."} and body["stop_reason"] == "tool_use"


def test_failures_have_status_retry_after_and_vendor_error_json(scripted_server, scripted_model):
    scripted_model.fail(429, retry_after=2).fail(529)

    openai_style = chat(scripted_server, stream=True)
    anthropic_style = messages(scripted_server, stream=True)

    assert openai_style.status_code == 429 and openai_style.headers["retry-after"] == "2"
    assert openai_style.json()["error"]["type"] == "rate_limit_exceeded"
    assert anthropic_style.status_code == 529
    assert anthropic_style.json() == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "scripted failure (HTTP 529)"},
    }


def test_custom_error_body_is_sent_as_given(scripted_server, scripted_model):
    scripted_model.fail(
        400, body={"error": {"code": "context_length_exceeded", "message": "too long"}}
    )

    assert chat(scripted_server, stream=False).json() == {
        "error": {"code": "context_length_exceeded", "message": "too long"}
    }


def test_malformed_answer_is_a_200_that_is_not_json(scripted_server, scripted_model):
    scripted_model.malformed()

    response = chat(scripted_server, stream=False)

    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()


@pytest.mark.parametrize("stream", [True, False])
def test_cut_leaves_the_body_incomplete(scripted_server, scripted_model, stream):
    scripted_model.cut_stream(after_chars=3).reply("a reply long enough to cut")

    with pytest.raises(httpx.RemoteProtocolError):
        chat(scripted_server, stream=stream)

    assert scripted_model.pending() == 1
    scripted_model.reply("drain")  # leave the fixture a clean queue state
    assert (
        chat(scripted_server, stream=False).json()["choices"][0]["message"]["content"]
        == "a reply long enough to cut"
    )


def test_requests_are_recorded_with_headers_and_raw_body(scripted_server, scripted_model):
    scripted_model.reply("ok")

    chat(scripted_server, stream=False, temperature=0.5)

    sent = scripted_model.requests[0]
    assert sent.headers["authorization"] == "Bearer t"
    assert sent.raw["temperature"] == 0.5 and sent.stream is False and sent.model == "m"


def test_unscripted_http_call_answers_500_and_is_remembered():
    model = ScriptedModel()
    with ScriptedServer(model) as server:
        response = chat(server, stream=True)

    assert response.status_code == 500
    assert "unscripted model call" in response.json()["error"]["message"]
    assert len(model.errors) == 1 and "'hi'" in model.errors[0]


def test_stop_wakes_a_pending_hang_and_shuts_down():
    model = ScriptedModel().hang(600)
    server = ScriptedServer(model).start()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(chat(server, stream=False).status_code)
        except httpx.HTTPError as exc:
            outcome.append(type(exc).__name__)

    client = threading.Thread(target=call)
    client.start()
    while not model.requests:  # the server has the request and is hanging on it
        threading.Event().wait(0.01)
    server.stop()
    client.join(timeout=10)

    assert not client.is_alive() and len(outcome) == 1
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url


def test_a_slow_reply_is_slow_on_the_wire_the_way_local_servers_are():
    model = ScriptedModel()
    model.reply("pinged", delay=0.6, keepalive=0.2).reply("silent", delay=0.3).reply("Hello, world", pause=(5, 0.3))
    arrivals: list[tuple[float, str]] = []
    with ScriptedServer(model) as server:
        for _ in range(3):
            start = time.monotonic()
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
                arrivals.append((time.monotonic() - start, "headers"))
                for line in response.iter_lines():
                    if line:
                        arrivals.append((time.monotonic() - start, line))
            arrivals.append((0.0, "end"))
    pinged, silent, paused = _split(arrivals)

    first_token = min(t for t, line in pinged if line.startswith("data"))
    assert first_token >= 0.55 and [line for _, line in pinged].count(": ping") == 2  # at 0.2 and 0.4 s
    # the headers come at once, long before the first token (no bound in seconds: a busy
    # machine delays both)
    assert pinged[0][1] == "headers" and pinged[0][0] <= first_token - 0.3
    assert silent[0][0] >= 0.25  # nothing at all, headers included, before the first token
    texts = [(t, json.loads(line[6:])["choices"][0]["delta"].get("content")) for t, line in paused
             if line.startswith("data: {") and '"content"' in line]
    shown = ""
    for t, text in texts:
        if len(shown) < 5 <= len(shown + (text or "")):
            at_pause = t
        shown += text or ""
        if len(shown) > 5:
            assert t - at_pause >= 0.25  # silence after the first five characters
            break
    assert shown.startswith("Hello, w")


def _split(arrivals: list[tuple[float, str]]) -> list[list[tuple[float, str]]]:
    runs: list[list[tuple[float, str]]] = [[]]
    for item in arrivals:
        if item[1] == "end":
            runs.append([])
        else:
            runs[-1].append(item)
    return runs[:-1]


def test_a_single_slot_model_answers_in_turn_and_counts_what_it_held_at_once():
    model = ScriptedModel(slots=1)
    model.reply("first", delay=0.4).reply("second")
    with ScriptedServer(model) as server:
        first = threading.Thread(target=chat, args=(server,), kwargs={"stream": False})
        first.start()
        while not model.requests:
            time.sleep(0.01)
        started = time.monotonic()
        second = chat(server, stream=False)
        waited = time.monotonic() - started
        first.join(10)

    assert second.json()["choices"][0]["message"]["content"] == "second"
    assert waited >= 0.3  # it waited in the server for the first to finish
    # a handler leaves the count just after its last byte reaches the client: allow it that
    deadline = time.monotonic() + 2.0
    while model.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert model.peak_in_flight == 2 and model.in_flight == 0
