"""Client retries never store a turn twice, driven by the official ``openai`` SDK's own retries."""

from __future__ import annotations

import openai
import pytest

from .serving import session_messages, wait_for

ASK = [{"role": "user", "content": "Please remember: the boat is called Wren."}]


def sdk(srv, **kw) -> openai.OpenAI:
    """A client that retries the way the SDK does by default (twice, with back-off)."""
    return srv.client(max_retries=2, **kw)


def users_of(srv, key: str) -> list[str]:
    return [text for role, text in session_messages(srv.agent, key) if role == "user"]


def test_an_upstream_500_is_not_retried_by_the_sdk_and_stores_one_copy(serve, scripted_model):
    srv = serve()
    for _ in range(4):  # hippobot's own retry policy makes four attempts upstream
        scripted_model.fail(500)

    with pytest.raises(openai.APIStatusError) as failed:
        sdk(srv).chat.completions.create(model="hippobot", user="boat", messages=ASK)

    assert failed.value.status_code == 502
    assert failed.value.response.headers["x-should-retry"] == "false"
    assert len(scripted_model.requests) == 4  # not 12: the SDK did not try again
    assert users_of(srv, "api:boat") == [ASK[0]["content"]]


def test_a_retry_that_arrives_anyway_gets_the_same_error_without_a_new_turn(serve, scripted_model):
    srv = serve()
    for _ in range(4):
        scripted_model.fail(503)
    body = {"model": "hippobot", "user": "boat", "messages": ASK}
    first = srv.http.post(f"{srv.base_url}/chat/completions", json=body,
                       headers={"x-stainless-retry-count": "0"})

    again = srv.http.post(f"{srv.base_url}/chat/completions", json=body,
                       headers={"x-stainless-retry-count": "1"})

    assert first.status_code == again.status_code == 502
    assert again.json() == first.json() and again.headers["x-should-retry"] == "false"
    assert len(scripted_model.requests) == 4
    assert users_of(srv, "api:boat") == [ASK[0]["content"]]


def test_sdk_retries_of_a_slow_turn_join_it_and_a_late_retry_gets_the_same_reply(
    serve, make_agent, scripted_model
):
    # The first upstream call hangs (then a gateway's 504, and hippobot's provider tries again:
    # a remote API's; a local endpoint's request is never sent twice).
    srv = serve(agent=make_agent(serial_requests="off"))
    scripted_model.hang(2.5).reply("Noted: your boat is Wren.")

    impatient = sdk(srv, timeout=0.3)
    try:
        quick = impatient.chat.completions.create(model="hippobot", user="boat", messages=ASK)
    except openai.APITimeoutError:
        quick = None  # every attempt gave up before the turn was over
    wait_for(lambda: len(session_messages(srv.agent, "api:boat")) == 2, "the turn to finish")
    late = srv.http.post(
        f"{srv.base_url}/chat/completions",
        json={"model": "hippobot", "user": "boat", "messages": ASK},
        headers={"x-stainless-retry-count": "2"},
    )

    assert late.status_code == 200 and late.headers["x-hippobot-replay"] == "true"
    assert late.json()["choices"][0]["message"]["content"] == "Noted: your boat is Wren."
    if quick is not None:
        assert quick.choices[0].message.content == "Noted: your boat is Wren."
        assert quick.id == late.json()["id"]
    assert len(scripted_model.requests) == 2  # the hang and its one retry upstream
    assert session_messages(srv.agent, "api:boat") == [
        ("user", ASK[0]["content"]),
        ("assistant", "Noted: your boat is Wren."),
    ]


def test_an_idempotency_key_replays_the_finished_turn_streamed_or_not(serve, scripted_model):
    srv = serve()
    scripted_model.reply("First and only answer.")
    client = srv.client()
    key = {"Idempotency-Key": "turn-7f3a"}

    first = client.chat.completions.create(
        model="hippobot", user="k", messages=ASK, extra_headers=key
    )
    again = client.chat.completions.with_raw_response.create(
        model="hippobot", user="k", messages=ASK, extra_headers=key
    )
    streamed = client.chat.completions.create(
        model="hippobot", user="k", messages=ASK, extra_headers=key, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)

    assert again.headers["x-hippobot-replay"] == "true"
    assert again.parse().id == first.id
    assert again.parse().choices[0].message.content == "First and only answer." == text
    assert len(scripted_model.requests) == 1
    assert users_of(srv, "api:k") == [ASK[0]["content"]]


def test_an_idempotency_key_reused_for_another_message_is_refused(serve, scripted_model):
    srv = serve()
    scripted_model.reply("ok")
    client = srv.client()
    key = {"Idempotency-Key": "same-key"}
    client.chat.completions.create(model="hippobot", user="k", messages=ASK, extra_headers=key)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="hippobot", user="k", extra_headers=key,
            messages=[{"role": "user", "content": "something else"}],
        )

    assert refused.value.body["code"] == "idempotency_key_reused"
    assert len(scripted_model.requests) == 1


def test_the_same_words_sent_again_on_purpose_are_a_new_turn(serve, scripted_model):
    """The SDK marks a first attempt with ``x-stainless-retry-count: 0``: saying "yes"
    twice is two turns."""
    srv = serve()
    scripted_model.reply("Shall I go on?").reply("Going on.")
    client = srv.client()
    yes = [{"role": "user", "content": "yes"}]

    client.chat.completions.create(model="hippobot", user="y", messages=yes)
    client.chat.completions.create(model="hippobot", user="y", messages=yes)

    assert users_of(srv, "api:y") == ["yes", "yes"]
    assert len(scripted_model.requests) == 2


def test_a_client_that_says_nothing_about_retries_is_deduplicated_within_seconds(
    serve, scripted_model
):
    srv = serve()
    scripted_model.reply("Stored once.")
    body = {"model": "hippobot", "user": "plain", "messages": ASK}

    first = srv.http.post(f"{srv.base_url}/chat/completions", json=body)
    second = srv.http.post(f"{srv.base_url}/chat/completions", json=body)

    assert first.json()["choices"][0]["message"]["content"] == "Stored once."
    assert second.json() == first.json()
    assert users_of(srv, "api:plain") == [ASK[0]["content"]]


def test_once_the_conversation_moved_on_a_retry_of_old_words_is_a_new_turn(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Shall I?").reply("Fine, I won't.").reply("Then I will.")
    client = srv.client()
    client.chat.completions.create(model="hippobot", user="m", messages=[{"role": "user", "content": "yes"}])
    client.chat.completions.create(model="hippobot", user="m", messages=[{"role": "user", "content": "no"}])

    late = srv.http.post(
        f"{srv.base_url}/chat/completions",
        json={"model": "hippobot", "user": "m", "messages": [{"role": "user", "content": "yes"}]},
        headers={"x-stainless-retry-count": "1"},
    )

    assert late.json()["choices"][0]["message"]["content"] == "Then I will."
    assert "x-hippobot-replay" not in late.headers
    assert users_of(srv, "api:m") == ["yes", "no", "yes"]


def test_a_streamed_turn_that_fails_before_any_text_is_not_retried_either(serve, scripted_model):
    srv = serve()
    for _ in range(4):
        scripted_model.fail(429)

    with pytest.raises(openai.RateLimitError) as failed:
        sdk(srv).chat.completions.create(model="hippobot", user="s", messages=ASK, stream=True)

    assert failed.value.response.headers["x-should-retry"] == "false"
    assert len(scripted_model.requests) == 4
    assert users_of(srv, "api:s") == [ASK[0]["content"]]
