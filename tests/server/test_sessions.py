"""Which session a request lands in, for the clients people actually use."""

from __future__ import annotations

import pytest

from hippobot.server.identity import session_key

from .serving import session_messages


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_the_echoed_session_header_sent_back_continues_the_same_session(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Hello, py1.").reply("Still py1.")
    client = srv.client()

    first = client.chat.completions.with_raw_response.create(
        model="hippobot", messages=ask("Hi"), extra_headers={"X-Session-Id": "py1"}
    )
    echoed = first.headers["x-session-id"]
    second = client.chat.completions.with_raw_response.create(
        model="hippobot", messages=ask("Again"), extra_headers={"X-Session-Id": echoed}
    )

    assert echoed == "api:py1" and second.headers["x-session-id"] == "api:py1"
    assert [t for _, t in session_messages(srv.agent, "api:py1")] == [
        "Hi", "Hello, py1.", "Again", "Still py1."
    ]
    assert not (srv.agent.workspace / "sessions" / "api" / "api%3Apy1.jsonl").exists()


def test_session_id_in_the_body_names_the_session(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Got it.")

    srv.client().chat.completions.create(
        model="hippobot", messages=ask("From nanobot's API"), extra_body={"session_id": "nb-7"}
    )

    assert session_messages(srv.agent, "api:nb-7")[0] == ("user", "From nanobot's API")


def test_two_open_webui_chats_are_two_sessions(serve, scripted_model):
    """Open WebUI (ENABLE_FORWARD_USER_INFO_HEADERS=true) sends neither user nor
    X-Session-Id, only its chat id."""
    srv = serve()
    scripted_model.reply("About cats.").reply("About dogs.").reply("Cats again.")
    client = srv.client()

    def chat(chat_id: str, text: str) -> None:
        client.chat.completions.create(
            model="hippobot", messages=ask(text),
            extra_headers={"X-OpenWebUI-Chat-Id": chat_id, "X-OpenWebUI-User-Id": "u-1"},
        )

    chat("c0ffee-1", "Tell me about cats")
    chat("c0ffee-2", "Tell me about dogs")
    chat("c0ffee-1", "More cats")

    assert [t for _, t in session_messages(srv.agent, "api:c0ffee-1")] == [
        "Tell me about cats", "About cats.", "More cats", "Cats again."
    ]
    assert [t for _, t in session_messages(srv.agent, "api:c0ffee-2")] == [
        "Tell me about dogs", "About dogs."
    ]
    assert not (srv.agent.workspace / "sessions" / "api" / "default.jsonl").exists()


@pytest.mark.parametrize(
    ("headers", "body", "key"),
    [
        ({"x-session-id": "h", "x-openwebui-chat-id": "c"}, {"session_id": "b", "user": "u"}, "api:h"),
        ({"x-openwebui-chat-id": "c"}, {"session_id": "b", "user": "u"}, "api:b"),
        ({"x-openwebui-chat-id": "c"}, {"user": "u"}, "api:c"),
        ({}, {"user": "u"}, "api:u"),
        ({}, {}, "api:default"),
        ({"x-session-id": "api:h"}, {}, "api:h"),
    ],
)
def test_session_identity_order(headers, body, key):
    assert session_key(headers, body) == key


def test_a_bad_session_id_is_a_clear_400(serve, scripted_model):
    srv = serve()

    answer = srv.http.post(
        f"{srv.base_url}/chat/completions",
        json={"model": "hippobot", "messages": ask("hi"), "session_id": 5},
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "the 'session_id' field must be a non-empty string"
    assert scripted_model.requests == []
