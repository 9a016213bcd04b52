"""The OpenAI-compatible API as a client sees it, driven by the official ``openai`` SDK."""

from __future__ import annotations

import json

from .serving import session_messages


def test_two_turns_are_remembered_by_the_server(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Nice to meet you, Ada.").reply("Your name is Ada.")
    client = srv.client()

    first = client.chat.completions.create(
        model="hippobot", user="ada", messages=[{"role": "user", "content": "My name is Ada."}]
    )
    # A chat front end resends the whole conversation; the server takes only the newest turn.
    second = client.chat.completions.create(
        model="hippobot",
        user="ada",
        messages=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "What is my name?"},
        ],
    )

    assert first.choices[0].message.content == "Nice to meet you, Ada."
    assert second.choices[0].message.content == "Your name is Ada."
    assert second.choices[0].finish_reason == "stop" and second.usage.total_tokens > 0
    sent = [json.dumps(m) for m in scripted_model.requests[1].messages]
    assert sum("My name is Ada." in m for m in sent) == 1
    assert any("Nice to meet you, Ada." in m for m in sent)
    assert session_messages(srv.agent, "api:ada") == [
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]
