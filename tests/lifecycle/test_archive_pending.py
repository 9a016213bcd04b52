"""Nothing stranded: an archive that fails or is cut off stays pending, visible and retried.

A consolidation (from ``/new``, token pressure or idle compaction) whose request fails leaves
its messages where they were, says so in ``status`` and ``memory history --pending``, and a
later run archives them; a kill right after ``/new``'s reply gives the same. Also: a summary
that leaves out what the user stated still gets it into history, a message re-sent after a
failed turn is stored once, and ``sessions list`` adds up to ``sessions show``. Real HTTP to
the scripted model; the CLI cases run ``hippobot`` processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta

import pytest

from hippobot.agent.agent import Agent
from hippobot.agent.api import Api
from hippobot.errors import ProviderError
from hippobot.lifecycle.archive_retry import RETRY_AFTER_S
from hippobot.providers.retry import RetryPolicy
from hippobot.testing.archivist import archivist, archivist_and_dreamer, is_archive_request
from hippobot.testing.cli import caller_env
from hippobot.testing.cli import run_cli as run

SMALL = {"context_window_tokens": 6000, "max_tokens": 500}
NO_FORMAT = "I am sorry, I cannot summarise this conversation."


def history(workspace) -> list[dict]:
    path = workspace / "memory" / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def failing_archivist(request):
    """Turns are answered; every archive request gets an answer in no known format."""
    return NO_FORMAT if is_archive_request(request) else archivist(request)


class Clock:
    """The agent's clock, moved by the test (retries wait a minute after a failure)."""

    def __init__(self) -> None:
        self.now = datetime.now().astimezone()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def agent_with_clock(make_settings, clock: Clock, **defaults) -> Agent:
    agent = Agent(make_settings(**defaults), now=clock)
    agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
    return agent


# --- /new ------------------------------------------------------------------------------


def test_a_failed_new_archive_stays_pending_and_visible_until_dream_archives_it(
        hippobot_home, scripted_server, scripted_model):
    scripted_model.fallback = failing_archivist
    assert run(["agent", "-m", "My locker code at work is 4417."], hippobot_home, scripted_server).returncode == 0
    new = run(["agent", "-m", "/new"], hippobot_home, scripted_server)
    assert new.returncode == 0 and "being archived" in new.stdout
    workspace = hippobot_home / "workspace"
    # no archive (the "remember that" itself was kept at once, an entry with no source range)
    assert [e for e in history(workspace) if e.get("source")] == []  # no summary and no [RAW] dump: the messages wait

    status = run(["status"], hippobot_home).stdout
    assert "2 messages, 2 not yet archived" in status
    assert "Archive:    2 messages waiting to be archived: the model's answer followed no known format" in status
    pending = run(["memory", "history", "--pending"], hippobot_home).stdout
    assert "2 messages of session cli:direct waiting to be archived: the model's answer" in pending
    as_json = json.loads(run(["status", "--json"], hippobot_home).stdout)
    assert as_json["archive_waiting"] == 2 and as_json["unconsolidated"] == 2

    # `dream` tries the archive first; while the model still fails it, dream says so and exits 1
    still = run(["dream"], hippobot_home, scripted_server)
    assert still.returncode == 1, (still.stdout, still.stderr)
    assert "waiting to be archived" in still.stdout + still.stderr
    assert "2 not yet archived" in run(["status"], hippobot_home).stdout  # still pending, nothing lost

    scripted_model.fallback = archivist_and_dreamer  # the model works again
    dream = run(["dream"], hippobot_home, scripted_server)
    assert dream.returncode == 0, dream.stderr
    archived = "\n".join(e["content"] for e in history(workspace) + _archive(workspace))
    assert "User's locker code at work is 4417" in archived
    assert "waiting to be archived" not in run(["status"], hippobot_home).stdout


def _archive(workspace) -> list[dict]:
    path = workspace / "memory" / "history.archive.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_new_replies_at_once_and_a_kill_after_the_reply_leaves_the_archive_to_the_next_command(
        hippobot_home, scripted_server, scripted_model):
    scripted_model.fallback = archivist
    assert run(["agent", "-m", "Remember that my bike lock code is 2468."], hippobot_home,
               scripted_server).returncode == 0
    asked, release = threading.Event(), threading.Event()

    def slow_archive(request):  # the archive's first byte comes only when the test says so
        if is_archive_request(request):
            asked.set()
            release.wait(30)
        return archivist(request)

    scripted_model.fallback = slow_archive
    env = {**caller_env(), "HIPPOBOT_HOME": str(hippobot_home), "HIPPOBOT_MODEL": "scripted-model",
           "HIPPOBOT_API_BASE": scripted_server.base_url, "HIPPOBOT_API_KEY": "sk-test-key-000000000000"}
    proc = subprocess.Popen([sys.executable, "-m", "hippobot", "agent", "-m", "/new"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        reply = proc.stdout.readline()  # printed while the archive request waits for its answer
        assert reply.startswith("New session started. The previous 2 message(s)"), reply
        assert asked.wait(30), "the archive request was never sent"
        assert not release.is_set() and proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        release.set()
        proc.kill()
        proc.communicate()
    workspace = hippobot_home / "workspace"
    # no archive (the "remember that" itself was kept at once, an entry with no source range)
    assert [e for e in history(workspace) if e.get("source")] == []
    assert "2 messages of session cli:direct waiting to be archived: the archive after /new has not finished" \
        in run(["memory", "history", "--pending"], hippobot_home).stdout

    scripted_model.fallback = archivist
    # The next command, in another session, finishes it after its own reply.
    other = run(["agent", "-s", "cli:other", "-m", "hello"], hippobot_home, scripted_server)
    assert other.returncode == 0 and other.stdout.startswith("ok")
    (entry,) = [e for e in history(workspace) if e.get("source")]
    assert entry["source"] == {"session": "cli:direct", "from": 0, "to": 2}
    assert "- [permanent] User's bike lock code is 2468" in entry["content"].splitlines()
    assert "waiting to be archived" not in run(["status"], hippobot_home).stdout


def test_sessions_list_adds_up_to_sessions_show_after_new(hippobot_home, scripted_server, scripted_model):
    scripted_model.fallback = archivist
    run(["agent", "-m", "first talk about boats"], hippobot_home, scripted_server)
    run(["agent", "-m", "/new"], hippobot_home, scripted_server)
    run(["agent", "-m", "now about kites"], hippobot_home, scripted_server)
    row = run(["sessions", "list"], hippobot_home).stdout.splitlines()[0]
    assert row.startswith("cli:direct") and "2 msgs (+2 before /new)" in row
    shown = run(["sessions", "show", "cli:direct"], hippobot_home).stdout.splitlines()
    assert sum(line.startswith("[") for line in shown) == 4
    assert shown[2] == "--- /new: the 2 messages above are archived to memory ---"


# --- token pressure and idle compaction ----------------------------------------------


async def test_a_failed_pressure_consolidation_stays_in_the_prompt_pending_and_the_next_turn_retries(
        make_settings, scripted_model):
    clock = Clock()
    agent = agent_with_clock(make_settings, clock, **SMALL)
    scripted_model.fallback = failing_archivist
    filler = "let us talk about gardening, compost, tomatoes and rain barrels. " * 6
    await agent.turn("cli:direct", "FACT: User's cat is named Luna\n" + filler)
    session = agent.sessions.get("cli:direct")
    for i in range(30):
        await agent.turn("cli:direct", f"Turn {i}: {filler}")
        await agent.jobs.drain()
        if session.archive_failure is not None:
            break
    assert session.archive_failure is not None, "consolidation never became due: the test did not test"
    assert history(agent.workspace) == [] and session.last_consolidated == 0
    status = Api.for_agent(agent).status("cli:direct")
    assert status.archive_waiting > 0 and "no known format" in (status.archive_problem or "")
    view = Api.for_agent(agent).history(pending=True)
    assert [w.session for w in view.archives] == ["cli:direct"]
    last_turn = [r for r in scripted_model.requests if not is_archive_request(r)][-1]
    assert "cat is named Luna" in json.dumps(last_turn.messages)  # still in the prompt

    asked = len([r for r in scripted_model.requests if is_archive_request(r)])
    await agent.turn("cli:direct", "and another thing")  # within the pause: no new attempt
    await agent.jobs.drain()
    assert len([r for r in scripted_model.requests if is_archive_request(r)]) == asked
    scripted_model.fallback = archivist
    clock.advance(RETRY_AFTER_S + 1)
    await agent.turn("cli:direct", "one more")
    await agent.jobs.drain()
    entries = history(agent.workspace)
    assert any("- [permanent] User's cat is named Luna" in e["content"] for e in entries)
    assert not any(e["content"].startswith("[RAW]") for e in entries)
    assert session.archive_wait() is None


async def test_a_failed_idle_compaction_stays_pending_and_is_retried(make_settings, scripted_model):
    clock = Clock()
    agent = agent_with_clock(make_settings, clock, idle_compact_after_minutes=1)
    scripted_model.fallback = failing_archivist
    await agent.turn("cli:direct", "My flight to Lisbon leaves on Friday at 9.")
    session = agent.sessions.get("cli:direct")
    clock.advance(120)
    session.updated_at = (clock.now - timedelta(minutes=5)).isoformat()
    await agent.consolidator.compact_idle(session)  # what the idle schedule runs
    assert history(agent.workspace) == [] and session.summary is None
    failure = session.archive_failure
    assert failure is not None and failure.kind == "idle"
    assert "2 messages of session cli:direct waiting to be archived" in \
        Api.for_agent(agent).history(pending=True).archives[0].describe()

    clock.advance(RETRY_AFTER_S + 1)
    assert await agent.consolidator.resume_pending(wait=True) == 1  # the schedule's retry fails
    assert session.archive_failure is not None and session.archive_failure.attempts == 2
    clock.advance(RETRY_AFTER_S + 1)  # after a second failure the pause doubles
    assert await agent.consolidator.resume_pending(wait=True) == 0
    scripted_model.fallback = archivist
    clock.advance(RETRY_AFTER_S)
    assert await agent.consolidator.resume_pending(wait=True) == 1
    (entry,) = history(agent.workspace)
    assert "User's flight to Lisbon leaves on Friday at 9" in entry["content"]
    assert session.summary is not None and session.archive_wait() is None


# --- what the summary leaves out ---------------------------------------------------------


async def test_a_summary_that_omits_stated_facts_still_archives_them(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("Nice to meet you, Maya!")
    await agent.turn("cli:direct", "Hi! I'm Maya. Remember this: my locker code at work is 4417.")
    scripted_model.reply("Luna is a lovely name.")
    await agent.turn("cli:direct", "My cat is called Luna. What is a good name for a sourdough starter?")
    session = agent.sessions.get("cli:direct")
    # A weak summary: the name and the code left out, the cat tagged ephemeral.
    scripted_model.reply("- [ephemeral] User has a cat called Luna\n- [durable] User bakes sourdough")
    outcome = await agent.consolidator.archive_until(session, len(session.messages))
    assert outcome is not None and outcome.entry is not None
    lines = outcome.entry.content.splitlines()
    assert lines[:2] == ["- [ephemeral] User has a cat called Luna", "- [durable] User bakes sourdough"]
    assert "- [durable] User's name is Maya" in lines
    assert "- [permanent] User's locker code at work is 4417" in lines
    assert "- [durable] User's cat is called Luna" in lines
    assert not any("sourdough starter" in line for line in lines)  # a question is no fact
    # What a durable line (here a correction) already says is not added again.
    scripted_model.reply("Noted.")
    await agent.turn("cli:other", "By the way, I live in Osaka now, not in Tokyo.")
    other = agent.sessions.get("cli:other")
    scripted_model.reply("- [correction] User moved to Osaka, not Tokyo")
    outcome = await agent.consolidator.archive_until(other, len(other.messages))
    assert outcome is not None and outcome.entry is not None
    assert outcome.entry.content == "- [correction] User moved to Osaka, not Tokyo"




# --- a failed turn --------------------------------------------------------------------


async def test_a_message_resent_after_a_failed_turn_is_stored_once(make_agent, scripted_model):
    agent = make_agent()
    for _ in range(4):
        scripted_model.fail(503)  # every attempt of the turn fails
    with pytest.raises(ProviderError):
        await agent.turn("cli:direct", "What is the capital of Portugal?")
    session = agent.sessions.get("cli:direct")
    assert [m["role"] for m in session.messages] == ["user"]  # the message is kept
    scripted_model.reply("Lisbon.")
    assert (await agent.turn("cli:direct", "What is the capital of Portugal?")).reply == "Lisbon."
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    sent = scripted_model.requests[-1].messages
    assert sum("capital of Portugal" in json.dumps(m) for m in sent) == 1
    scripted_model.reply("Still Lisbon.")
    await agent.turn("cli:direct", "What is the capital of Portugal?")  # answered: a new turn
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
