"""Errors a client can act on: auth, bad requests, unknown paths, upstream failures.

Every error body has the OpenAI shape, so the SDK raises its typed exceptions.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from .serving import session_messages, session_path

KEY = "serve-key-0123456789"


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert {"message", "type", "param", "code"} <= set(body["error"])
    return body["error"]


def test_a_configured_key_is_required_everywhere_but_healthz(serve, scripted_model):
    srv = serve(api_key=KEY)
    scripted_model.reply("hello")
    ask = {"model": "hippobot", "messages": [{"role": "user", "content": "hi"}]}

    with pytest.raises(openai.AuthenticationError) as wrong:
        srv.client(api_key="not-the-key").chat.completions.create(**ask)
    missing = srv.http.post(f"{srv.base_url}/chat/completions", json=ask)
    page = srv.http.get(f"{srv.root}/")
    health = srv.http.get(f"{srv.root}/healthz")
    ok = srv.client(api_key=KEY).chat.completions.create(**ask)

    assert wrong.value.status_code == 401 and wrong.value.body["code"] == "invalid_api_key"
    assert missing.status_code == 401 and "HIPPOBOT_SERVE_KEY" in error_of(missing)["message"]
    assert page.status_code == 401
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ok.choices[0].message.content == "hello"
    assert len(scripted_model.requests) == 1  # rejected requests never reached the model
    assert [r for r, _ in session_messages(srv.agent, "api:default")] == ["user", "assistant"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "hippobot"}, "'messages' must be a non-empty list"),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": [{"role": "system", "content": "be nice"}]}, "no message with role 'user'"),
        ({"messages": [{"role": "user", "content": "   "}]}, "newest user message is empty"),
        ({"messages": [{"role": "user", "content": 42}]}, "must be a string or a list"),
        (
            {"messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]}]},
            "messages[0].content[1] is a 'image_url' part",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 3}, "'n' must be 1"),
        ({"messages": [{"role": "user", "content": "hi"}], "user": ""}, "'user' field"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_malformed_requests_get_a_400_saying_what_is_wrong(serve, body, says):
    srv = serve()

    response = srv.http.post(f"{srv.base_url}/chat/completions", json=body)

    assert response.status_code == 400
    error = error_of(response)
    assert says in error["message"] and error["type"] == "invalid_request_error"
    assert not (srv.agent.workspace / "sessions" / "api").exists()


def test_text_parts_are_accepted_and_a_body_that_is_not_json_is_refused(serve, scripted_model):
    srv = serve()
    scripted_model.reply("parts ok")

    parts = srv.client().chat.completions.create(
        model="hippobot",
        messages=[{"role": "user", "content": [{"type": "text", "text": "first"},
                                               {"type": "text", "text": "second"}]}],
    )
    garbage = srv.http.post(
        f"{srv.base_url}/chat/completions",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )

    assert parts.choices[0].message.content == "parts ok"
    assert session_messages(srv.agent, "api:default")[0] == ("user", "first\nsecond")
    assert garbage.status_code == 400 and "not valid JSON" in error_of(garbage)["message"]


def test_models_are_listed_and_unknown_things_are_404(serve):
    srv = serve()
    client = srv.client()

    listed = [m.id for m in client.models.list()]
    with pytest.raises(openai.NotFoundError) as unknown_model:
        client.models.retrieve("gpt-4o")
    unknown_path = srv.http.get(f"{srv.base_url}/embeddings")

    assert listed == ["hippobot"] and client.models.retrieve("hippobot").id == "hippobot"
    assert unknown_model.value.body["code"] == "model_not_found"
    assert unknown_path.status_code == 404 and "/v1/embeddings" in error_of(unknown_path)["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_rate_limit_is_a_429_with_retry_after(serve, scripted_model, stream):
    srv = serve()
    scripted_model.fail(429, retry_after=120)  # too long for hippobot to wait it out itself

    with pytest.raises(openai.RateLimitError) as err:
        srv.client().chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "are you there?"}],
            stream=stream,
        )

    assert err.value.response.headers["retry-after"] == "120"
    assert "rate limiting" in err.value.message
    # The user's message was saved before the model call failed.
    assert session_messages(srv.agent, "api:default") == [("user", "are you there?")]


@pytest.mark.parametrize("stream", [False, True])
def test_a_bad_upstream_key_is_a_502_not_a_401(serve, scripted_model, stream):
    srv = serve()
    scripted_model.fail(401)

    with pytest.raises(openai.APIStatusError) as err:
        srv.client().chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "hello"}], stream=stream
        )

    assert err.value.status_code == 502
    assert err.value.body["code"] == "upstream_auth_failed"
    assert "HIPPOBOT_API_KEY" in err.value.message


def test_an_upstream_failure_mid_stream_ends_the_stream_with_an_error(serve, scripted_model):
    srv = serve()
    # Four cut streams exhaust the retries after some text was already sent.
    for _ in range(4):
        scripted_model.cut_stream(8)
    scripted_model.reply("this reply is never reached in time")

    got = []
    with pytest.raises(openai.APIError) as err:
        for chunk in srv.client().chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "tell me"}], stream=True
        ):
            got.append(chunk.choices[0].delta.content or "" if chunk.choices else "")

    assert "".join(got) == "this rep"
    assert "model provider failed" in str(err.value)
    assert session_path(srv.agent, "api:default").exists()


def test_a_bug_in_the_agent_is_a_clean_500(serve, make_agent):
    agent = make_agent()

    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    agent.turn = broken  # simulates a defect; the server must still answer in OpenAI shape
    srv = serve(agent=agent)

    response = srv.http.post(
        f"{srv.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
    )

    assert response.status_code == 500
    error = error_of(response)
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]


DEEP = b'{"model": "hippobot", "messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
LONE = '"x \\ud800 y"'  # valid JSON: the escape of half a surrogate pair


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (DEEP, "nested too deeply"),
        (b"[" * 200_000, "JSON"),
        (f'{{"messages": [{{"role": "user", "content": {LONE}}}]}}'.encode(), "lone surrogate (U+D800"),
        (f'{{"messages": [{{"role": "user", "content": [{{"type": "text", "text": {LONE}}}]}}]}}'.encode(),
         "messages[0].content cannot be used"),
        (f'{{"session_id": {LONE}, "messages": [{{"role": "user", "content": "hi"}}]}}'.encode(),
         "'session_id' cannot be used"),
        (f'{{"stop": [{LONE}], "messages": [{{"role": "user", "content": "hi"}}]}}'.encode(), "'stop'"),
    ],
    ids=["nested-200000-deep", "unclosed-200000-deep", "lone-surrogate", "in-a-text-part",
         "in-session-id", "in-stop"],
)
def test_absurd_json_and_text_that_cannot_be_encoded_are_a_400(serve, scripted_model, raw, says):
    srv = serve()
    response = srv.http.post(f"{srv.base_url}/chat/completions", content=raw,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert says in error_of(response)["message"]
    assert scripted_model.requests == []
    assert not (srv.agent.workspace / "sessions" / "api").exists()


def test_a_session_that_already_holds_a_lone_surrogate_still_chats(serve, scripted_model):
    """Written by an older version, which stored the request as sent."""
    srv = serve()
    path = session_path(srv.agent, "api:old")
    path.parent.mkdir(parents=True)
    path.write_text(
        '{"_type":"session","format":1,"key":"api:old","created_at":"2026-01-01T00:00:00+00:00"}\n'
        '{"role":"user","content":"x \\ud800 y"}\n{"role":"assistant","content":"noted"}\n'
    )
    scripted_model.reply("still here")
    reply = srv.client().chat.completions.create(
        model="hippobot", extra_headers={"X-Session-Id": "old"},
        messages=[{"role": "user", "content": "and now?"}],
    )
    assert reply.choices[0].message.content == "still here"
    assert scripted_model.requests[-1].messages[1]["content"] == "x \ufffd y"
