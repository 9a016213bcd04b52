"""The OpenAI-compatible API as a client sees it, driven by the official ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
import threading

import openai
import pytest

from .serving import session_messages, wait_for


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


def test_streaming_reply_arrives_as_deltas_with_usage(serve, scripted_model):
    srv = serve()
    reply = "Streaming works: here are several words, sent a few at a time."
    scripted_model.reply(reply)

    chunks = list(
        srv.client().chat.completions.create(
            model="hippobot",
            user="s",
            messages=[{"role": "user", "content": "Stream something."}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == reply
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert session_messages(srv.agent, "api:s")[-1] == ("assistant", reply)


def test_tool_steps_run_on_the_server_and_are_not_sent_as_tool_calls(serve, scripted_model):
    srv = serve()
    scripted_model.reply_tool_call("write_file", {"path": "notes/todo.txt", "content": "milk\n"})
    scripted_model.reply("Saved your list.")

    chunks = list(
        srv.client().chat.completions.create(
            model="hippobot",
            messages=[{"role": "user", "content": "Note: buy milk"}],
            stream=True,
        )
    )

    assert all(c.choices[0].delta.tool_calls is None for c in chunks if c.choices)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Saved your list."
    assert (srv.agent.workspace / "notes/todo.txt").read_text() == "milk\n"
    roles = [role for role, _ in session_messages(srv.agent, "api:default")]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_a_retried_model_stream_is_not_shown_twice(serve, make_agent, scripted_model):
    # A remote API's cut stream is sent again (a local one's is not: tests/providers/test_serial.py).
    srv = serve(agent=make_agent(serial_requests="off"))
    reply = "The quick brown fox jumps over the lazy dog."
    scripted_model.cut_stream(12).reply(reply)  # the first attempt dies after 12 characters

    chunks = srv.client().chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": "A pangram?"}], stream=True
    )

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply
    assert len(scripted_model.requests) == 2


def test_two_sessions_do_not_see_each_other(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Hello Ada.").reply("I don't know your name yet.")
    client = srv.client()

    client.chat.completions.create(
        model="hippobot", user="alice", messages=[{"role": "user", "content": "I am Ada."}]
    )
    answer = client.chat.completions.with_raw_response.create(
        model="hippobot",
        messages=[{"role": "user", "content": "Who am I?"}],
        extra_headers={"X-Session-Id": "bob"},
    )

    assert answer.headers["x-session-id"] == "api:bob"
    assert answer.parse().choices[0].message.content == "I don't know your name yet."
    assert "Ada" not in json.dumps(scripted_model.requests[1].messages)
    assert [t for _, t in session_messages(srv.agent, "api:alice")] == ["I am Ada.", "Hello Ada."]
    assert [t for _, t in session_messages(srv.agent, "api:bob")] == [
        "Who am I?",
        "I don't know your name yet.",
    ]


async def test_fifty_concurrent_requests_across_ten_sessions_lose_nothing(serve, scripted_model, aclient):
    srv = serve()
    scripted_model.fallback = lambda req: f"echo: {req.last_user_words()}"
    client = aclient(srv)

    async def ask(session: int, n: int) -> tuple[str, str]:
        text = f"message {n} for session {session}"
        messages = [{"role": "user", "content": text}]
        if n % 2:  # half of them stream
            stream = await client.chat.completions.create(
                model="hippobot", user=f"s{session}", messages=messages, stream=True
            )
            got = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        else:
            done = await client.chat.completions.create(
                model="hippobot", user=f"s{session}", messages=messages
            )
            got = done.choices[0].message.content
        return text, got

    results = await asyncio.gather(*(ask(s, n) for s in range(10) for n in range(5)))

    assert len(results) == 50
    for text, got in results:
        assert got == f"echo: {text}"
    for s in range(10):
        messages = session_messages(srv.agent, f"api:s{s}")
        users = [t for role, t in messages if role == "user"]
        assert sorted(users) == sorted(f"message {n} for session {s}" for n in range(5))
        # Turns of one session were serialised: each question is followed by its own answer.
        assert [(r, t) for r, t in messages] == [
            pair for u in users for pair in (("user", u), ("assistant", f"echo: {u}"))
        ]


async def test_a_slow_model_call_does_not_block_other_sessions(serve, make_agent, scripted_model, aclient):
    # An endpoint that serves many requests at once (a local one takes them in turn).
    srv = serve(agent=make_agent(serial_requests="off"))
    release = threading.Event()

    def answer(req):
        if "slow" in req.last_user_words():
            release.wait(20)
            return "finally"
        return "quick"

    scripted_model.fallback = answer
    client = aclient(srv)
    slow = asyncio.create_task(
        client.chat.completions.create(
            model="hippobot", user="a", messages=[{"role": "user", "content": "slow one"}]
        )
    )
    await asyncio.to_thread(wait_for, lambda: scripted_model.requests, "the model call")

    quick = await client.chat.completions.create(
        model="hippobot", user="b", messages=[{"role": "user", "content": "quick one"}]
    )

    assert quick.choices[0].message.content == "quick"
    assert not slow.done()
    release.set()
    assert (await slow).choices[0].message.content == "finally"


async def test_too_many_waiting_turns_of_one_session_get_429(serve, scripted_model, aclient):
    srv = serve(max_queued_per_session=1)
    release = threading.Event()
    scripted_model.fallback = lambda req: "done" if release.wait(20) else "timeout"
    client = aclient(srv)
    first = asyncio.create_task(
        client.chat.completions.create(
            model="hippobot", user="busy", messages=[{"role": "user", "content": "one"}]
        )
    )
    await asyncio.to_thread(wait_for, lambda: scripted_model.requests, "the model call")

    with pytest.raises(openai.RateLimitError) as err:
        await client.chat.completions.create(
            model="hippobot", user="busy", messages=[{"role": "user", "content": "two"}]
        )

    assert err.value.body["code"] == "session_busy"
    release.set()
    assert (await first).choices[0].message.content == "done"
    assert [t for _, t in session_messages(srv.agent, "api:busy")] == ["one", "done"]


def test_slash_commands_are_answered_without_a_model_call(serve, scripted_model):
    srv = serve()

    done = srv.client().chat.completions.create(
        model="hippobot", user="cmds", messages=[{"role": "user", "content": "/help"}]
    )
    streamed = srv.client().chat.completions.create(
        model="hippobot",
        user="cmds",
        messages=[{"role": "user", "content": "/help"}],
        stream=True,
    )

    text = done.choices[0].message.content
    assert "/dream" in text and "/status" in text
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text
    assert scripted_model.requests == []


async def test_a_client_that_hangs_up_mid_stream_does_not_lose_the_reply(serve, scripted_model, aclient):
    srv = serve()
    release = threading.Event()
    scripted_model.reply_tool_call("list_dir", {"path": "."}, text="Looking around.")
    scripted_model.fallback = lambda req: "Found it." if release.wait(20) else "timeout"
    client = aclient(srv)

    stream = await client.chat.completions.create(
        model="hippobot", user="gone", messages=[{"role": "user", "content": "Find it."}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    await stream.close()  # the client leaves while the turn is still working
    release.set()
    await asyncio.to_thread(
        wait_for, lambda: len(session_messages(srv.agent, "api:gone")) == 4, "the saved reply"
    )

    assert session_messages(srv.agent, "api:gone")[-1] == ("assistant", "Found it.")
