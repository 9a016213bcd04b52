"""A local model as a newcomer meets it, from the command line: a chat and a Dream of the same
home never reach the endpoint at once (the chat goes first), a slow first byte is waited for
or given up once but never sent twice, and the terminal says what hippobot is waiting for
while piped output stays clean. Real `hippobot` processes against the scripted model served
on 127.0.0.1 (a local endpoint), which answers one request at a time like llama.cpp."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.providers.metering import usage_job
from hippobot.testing import ScriptedModel, ScriptedServer
from hippobot.testing.archivist import archivist_and_dreamer, is_dream_request
from hippobot.testing.cli import caller_env
from hippobot.testing.cli import run_cli as run
from hippobot.testing.scripted import FallbackReply, RecordedRequest

CHAT = "hello there, are you awake"


def _is_chat(request: RecordedRequest) -> bool:
    return CHAT in request.last_user_text()


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_chat_and_a_dream_of_one_home_take_turns_and_the_chat_goes_first(hippobot_home):
    assert run(["onboard"], hippobot_home).returncode == 0
    store = MemoryStore(hippobot_home / "workspace")
    for n in range(3):
        store.append_history(f"- [permanent] User's bike number {n} is red", session_key="cli:direct",
                             source=HistorySource("cli:direct", 2 * n, 2 * n + 2))
    model = ScriptedModel(slots=1)  # one request at a time, later ones queue inside the server

    def answer(request: RecordedRequest) -> str | FallbackReply:
        if _is_chat(request):
            return "yes, here"
        reply = archivist_and_dreamer(request)
        reply = reply if isinstance(reply, FallbackReply) else FallbackReply(reply)
        # Dream's first request runs long enough for the chat to arrive meanwhile.
        slow = (2.0 if len(model.requests) == 1 else 0.3) if is_dream_request(request) else 0.0
        return FallbackReply(reply.text, reply.tool_calls, delay=slow)

    model.fallback = answer
    with ScriptedServer(model) as server, ThreadPoolExecutor(1) as pool:
        dream = pool.submit(run, ["dream"], hippobot_home, server)
        _wait_for(lambda: model.requests, "Dream's first request")
        chat = run(["agent", "-m", CHAT], hippobot_home, server)
        dreamed = dream.result(timeout=120)

    assert chat.returncode == 0, chat.stderr
    assert chat.stdout == "yes, here\n"
    assert dreamed.returncode == 0, dreamed.stderr
    kinds = ["chat" if _is_chat(r) else "dream" if is_dream_request(r) else "other" for r in model.requests]
    assert kinds[0] == "dream" and kinds[1] == "chat", kinds  # after the one running, before the rest
    assert kinds.count("dream") >= 2 and kinds.count("chat") == 1
    assert model.peak_in_flight == 1  # the endpoint never had two requests of this home at once
    assert model.errors == []


def test_a_slow_first_byte_is_waited_for_while_the_server_pings_and_given_up_once_otherwise(hippobot_home):
    (hippobot_home / "config.json").write_text(json.dumps({"providers": {"openai": {"timeout": 0.5}}}))
    model = ScriptedModel()
    model.reply("worth the wait", delay=2.0, keepalive=0.2)  # llama-cpp-python pings meanwhile
    model.reply("too late", delay=2.0)  # llama.cpp's server and Ollama send nothing meanwhile
    with ScriptedServer(model) as server:
        waited = run(["agent", "-m", "a long prompt"], hippobot_home, server)
        given_up = run(["agent", "-m", "keep this question"], hippobot_home, server)
        shown = run(["sessions", "show", "cli:direct", "--json"], hippobot_home)

    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == "worth the wait\n"  # 2 s past a 0.5 s timeout: it counts from the last byte
    assert given_up.returncode == 1
    assert given_up.stderr.count("\n") == 1 and "within 0.5s" in given_up.stderr
    assert "not sent again" in given_up.stderr
    assert len(model.requests) == 2  # one each: never sent twice while the server may compute it
    assert "keep this question" in shown.stdout  # the message is kept


def _env(home: Path, server: ScriptedServer) -> dict[str, str]:
    env = caller_env()
    env.update(HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model", HIPPOBOT_API_BASE=server.base_url,
               HIPPOBOT_API_KEY="sk-test-key-000000000000", TERM="xterm", COLUMNS="120")
    return env


def _drain(fd: int, seen: bytearray, until: bytes | None = None, timeout: float = 30.0) -> None:
    import select

    end = time.monotonic() + timeout
    while time.monotonic() < end and (until is None or until not in seen):
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen += chunk


def _hold_endpoint_as_dream(home: Path, base: str):
    """Take the endpoint's slot as a Dream request of this home would."""
    from hippobot.providers.endpoints import endpoint_key
    from hippobot.providers.serial import EndpointGate, background
    from hippobot.workspace import Home

    gate = EndpointGate(Home(home).endpoint(endpoint_key(base)))

    async def take():
        with usage_job("dream"), background():
            slot = await gate.try_slot(chat=False)
            await gate.note_holder()
            return slot

    slot = asyncio.run(take())
    assert slot is not None
    return slot


def test_the_terminal_shows_the_wait_and_pipes_stay_clean(hippobot_home):
    model = ScriptedModel()
    model.fail(503, retry_after=1).reply("Plain answer.", delay=1.5)
    with ScriptedServer(model) as server:
        held = _hold_endpoint_as_dream(hippobot_home, server.base_url)
        leader, follower = pty.openpty()
        seen = bytearray()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hippobot", "agent", "-m", "hello"], env=_env(hippobot_home, server),
                stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL,
            )
            os.close(follower)
            _drain(leader, seen, until=b"queued behind Dream")
            held.release()  # the Dream request is done: the chat goes
            out, _ = proc.communicate(timeout=60)
            _drain(leader, seen, timeout=1)
        finally:
            held.release()
            os.close(leader)

        assert proc.returncode == 0
        assert out == b"Plain answer.\n"  # stdout is the reply, nothing else
        screen = seen.decode("utf-8", "replace")
        assert "queued behind Dream · " in screen
        assert "retrying in 1 s (attempt 2 of 4): the endpoint failed with a server error (503" in screen
        assert re.search(r"waiting for scripted-model · [\d,]+ tokens · 1 s", screen), screen

        model.reply("Quiet answer.", delay=0.3)
        piped = run(["agent", "-m", "again"], hippobot_home, server)
    assert piped.returncode == 0 and piped.stdout == "Quiet answer.\n"
    assert piped.stderr == ""  # no progress, no escape codes, when stderr is not a terminal
