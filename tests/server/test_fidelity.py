"""What an OpenAI client expects of the wire: usage, finish_reason, limits, refusals, paths."""

from __future__ import annotations

import openai
import pytest

from .serving import session_messages

ASK = [{"role": "user", "content": "Write the list to notes.txt, then tell me."}]


def test_usage_is_the_sum_of_every_model_call_of_the_turn(serve, scripted_model):
    srv = serve()
    scripted_model.usage(prompt_tokens=1700, completion_tokens=40, cached_tokens=1024)
    scripted_model.reply_tool_call("write_file", {"path": "notes.txt", "content": "milk\n"})
    scripted_model.usage(prompt_tokens=1774, completion_tokens=24, cached_tokens=1536)
    scripted_model.reply("Written.")
    client = srv.client()

    answer = client.chat.completions.create(model="hippobot", user="u", messages=ASK)
    scripted_model.usage(prompt_tokens=1700, completion_tokens=40)
    scripted_model.reply_tool_call("write_file", {"path": "notes.txt", "content": "eggs\n"})
    scripted_model.usage(prompt_tokens=1800, completion_tokens=10)
    scripted_model.reply("Written again.")
    chunks = list(client.chat.completions.create(
        model="hippobot", user="u", messages=ASK, stream=True,
        stream_options={"include_usage": True},
    ))

    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3474, 64)
    assert answer.usage.total_tokens == 3538
    assert answer.usage.prompt_tokens_details.cached_tokens == 2560
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3500, 50)


def test_finish_reason_is_what_the_model_reported(serve, scripted_model):
    srv = serve()
    scripted_model.reply("This answer was cut sh", finish_reason="length")
    scripted_model.reply("Also cut", finish_reason="length")
    client = srv.client()

    answer = client.chat.completions.create(model="hippobot", user="u", messages=ASK)
    chunks = list(client.chat.completions.create(
        model="hippobot", user="u", messages=[{"role": "user", "content": "again"}], stream=True
    ))

    assert answer.choices[0].finish_reason == "length"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_max_tokens_and_stop_reach_the_model_capped_by_the_config(make_agent, serve, scripted_model):
    srv = serve(agent=make_agent(max_tokens=1000))
    scripted_model.reply("one").reply("two").reply("three")
    client = srv.client()

    client.chat.completions.create(model="hippobot", user="u", messages=ASK, max_tokens=50,
                                   stop=["END", "\n\n"])
    client.chat.completions.create(model="hippobot", user="u", max_completion_tokens=99_999,
                                   messages=[{"role": "user", "content": "longer please"}])
    client.chat.completions.create(model="hippobot", user="u",
                                   messages=[{"role": "user", "content": "as configured"}])

    sent = [r.raw.get("max_tokens", r.raw.get("max_completion_tokens")) for r in scripted_model.requests]
    assert sent == [50, 1000, 1000]
    assert scripted_model.requests[0].raw["stop"] == ["END", "\n\n"]
    assert "stop" not in scripted_model.requests[1].raw


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
          "tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
          "tool_choice": {"type": "function", "function": {"name": "lookup"}}}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [1]}, "stop"),
    ],
)
def test_what_hippobot_cannot_honour_is_a_400_that_says_why(serve, scripted_model, extra, param):
    srv = serve()

    with pytest.raises(openai.BadRequestError) as refused:
        srv.client().chat.completions.create(model="hippobot", messages=ASK, **extra)

    assert refused.value.body["param"] == param
    if param == "tool_choice":
        assert "hippobot runs its own tools" in refused.value.body["message"]
    assert scripted_model.requests == []


def test_a_request_ending_in_a_tool_result_is_refused_not_resubmitted(serve, scripted_model):
    srv = serve()
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]

    with pytest.raises(openai.BadRequestError) as refused:
        srv.client().chat.completions.create(model="hippobot", user="t", messages=messages)

    assert "hippobot runs its own tools" in refused.value.body["message"]
    assert scripted_model.requests == []
    assert not (srv.agent.workspace / "sessions" / "api" / "t.jsonl").exists()


def test_client_tools_with_auto_choice_and_text_format_are_simply_ignored(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Plain answer.")

    answer = srv.client().chat.completions.create(
        model="hippobot", messages=ASK, tool_choice="auto", response_format={"type": "text"},
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
    )

    assert answer.choices[0].message.content == "Plain answer."
    assert "lookup" not in str(scripted_model.requests[0].tools)


def test_stream_null_trailing_slashes_and_request_ids(serve, scripted_model):
    srv = serve()
    scripted_model.reply("ok")

    answer = srv.http.post(
        f"{srv.base_url}/chat/completions/",
        json={"model": "hippobot", "user": "s", "stream": None, "messages": ASK},
        headers={"X-Request-Id": "trace-123"},
    )
    models = srv.http.get(f"{srv.base_url}/models/")
    model = srv.http.get(f"{srv.base_url}/models/hippobot/")
    missing = srv.http.get(f"{srv.base_url}/nowhere")
    bad = srv.http.post(f"{srv.base_url}/chat/completions", json={"messages": []})
    health = srv.http.get(f"{srv.root}/healthz")

    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    assert answer.headers["x-request-id"] == "trace-123"
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "hippobot"
    assert model.status_code == 200 and model.json()["id"] == "hippobot"
    ids = {r.headers["x-request-id"] for r in (models, missing, bad, health)}
    assert len(ids) == 4 and all(i.startswith("req_") for i in ids)
    assert session_messages(srv.agent, "api:s")[-1] == ("assistant", "ok")


def test_a_401_has_a_request_id_too(serve):
    srv = serve(api_key="serve-key-0123456789")

    denied = srv.http.get(f"{srv.base_url}/models")

    assert denied.status_code == 401 and denied.headers["x-request-id"].startswith("req_")
