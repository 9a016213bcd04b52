"""Graceful shutdown: in-flight turns finish, or are abandoned with nothing lost."""

from __future__ import annotations

import threading

import openai
import pytest

from hippobot.agent.agent import Agent

from .serving import session_messages, session_records, wait_for


def ask_in_background(client: openai.OpenAI, text: str, outcome: dict) -> threading.Thread:
    def run() -> None:
        try:
            outcome["reply"] = client.chat.completions.create(
                model="hippobot", user="long", messages=[{"role": "user", "content": text}]
            ).choices[0].message.content
        except openai.APIError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_shutdown_abandons_a_hanging_turn_and_keeps_the_message(serve, scripted_model, make_agent):
    srv = serve(shutdown_timeout=0.3)
    scripted_model.hang(60)
    outcome: dict = {}
    asker = ask_in_background(srv.client(), "Remember the milk.", outcome)
    wait_for(lambda: scripted_model.requests, "the model call")

    srv.stop()  # what SIGTERM does
    asker.join(10)

    error = outcome["error"]
    assert isinstance(error, openai.APIStatusError) and error.status_code == 503
    assert "your message was saved" in error.message
    records = session_records(srv.agent, "api:long")  # every line still parses
    assert records[0]["_type"] == "session"
    assert session_messages(srv.agent, "api:long") == [("user", "Remember the milk.")]

    # After a restart the conversation continues from the saved message.
    scripted_model.fallback = lambda req: f"seen: {req.last_user_words()}"
    restarted = serve(agent=Agent(srv.agent.settings))
    again = restarted.client().chat.completions.create(
        model="hippobot", user="long", messages=[{"role": "user", "content": "Did you get it?"}]
    )
    assert again.choices[0].message.content == "seen: Did you get it?"
    assert "Remember the milk." in str(scripted_model.requests[-1].messages)


def test_shutdown_lets_an_in_flight_turn_finish(serve, scripted_model):
    srv = serve(shutdown_timeout=20)
    release = threading.Event()
    scripted_model.fallback = lambda req: "all done" if release.wait(20) else "timed out"
    outcome: dict = {}
    asker = ask_in_background(srv.client(), "Do the long thing.", outcome)
    wait_for(lambda: scripted_model.requests, "the model call")

    stopper = threading.Thread(target=srv.stop, daemon=True)
    stopper.start()
    wait_for(lambda: srv.app.state.gate.closing, "shutdown to begin")
    refused = (openai.APIConnectionError, openai.APIStatusError)
    with pytest.raises(refused):  # no new turns once shutdown began
        srv.client().chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "too late"}]
        )
    release.set()
    asker.join(10)
    stopper.join(20)

    assert outcome == {"reply": "all done"}
    assert session_messages(srv.agent, "api:long") == [
        ("user", "Do the long thing."),
        ("assistant", "all done"),
    ]
    assert not srv.thread.is_alive()


def test_the_server_runs_the_memory_schedules_and_stops_them(serve, make_agent):
    srv = serve(agent=make_agent(idle_compact_after_minutes=30))
    tasks = srv.app.state.schedulers

    names = sorted(t.get_name() for t in tasks)
    assert names == ["dream-auto", "dream-schedule", "idle-compaction", "resume-archives"]
    loops = [t for t in tasks if t.get_name() != "resume-archives"]
    assert not any(t.done() for t in loops)
    srv.stop()
    assert all(t.done() for t in tasks) and all(t.cancelled() for t in loops)
