"""The terminal tells the truth: Markdown is rendered in chat, a live line shows what the
model is doing (on stderr, only on a terminal), slash commands ignore case, /status and /context
agree, and listings describe what the user just did. Real `hippobot` processes, some of
them on a pseudo-terminal, against the scripted model over HTTP."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing.cli import run_cli as run


def _env(home: Path, server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env.update(
        HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model", HIPPOBOT_API_BASE=server.base_url,
        HIPPOBOT_API_KEY="sk-test-key-000000000000", TERM="xterm", COLUMNS="100",
    )
    return env


CURSOR_POSITION_REQUEST = b"\x1b[6n"


PROMPT = "›".encode()


def _read_until(fd: int, needle: bytes, seen: bytearray, timeout: float = 30.0, *, after: int = 0) -> None:
    """Read the terminal's output until ``needle`` shows (at or past offset ``after``),
    answering cursor-position requests as a terminal does."""
    end = time.monotonic() + timeout
    while seen.find(needle, after) < 0 and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            asked = seen.count(CURSOR_POSITION_REQUEST)
            try:
                seen += os.read(fd, 65536)
            except OSError:
                return
            for _ in range(seen.count(CURSOR_POSITION_REQUEST) - asked):
                os.write(fd, b"\x1b[1;1R")


def _reap(pid: int, timeout: float = 15.0) -> int | None:
    """Wait for the child and return its exit code; one that does not leave is killed
    (``None``), so a failure never hangs."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_interactive_chat_renders_markdown_and_shows_it_is_thinking(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("This is **bold** and `code`.", delay=0.5)
    pid, fd = pty.fork()
    if pid == 0:  # the child: hippobot on a terminal (never returns into pytest)
        try:
            os.execve(sys.executable, [sys.executable, "-m", "hippobot", "agent"], _env(hippobot_home, scripted_server))
        finally:
            os._exit(127)
    seen = bytearray()
    try:
        _read_until(fd, b"/help for commands", seen)
        os.write(fd, b"hi\r")
        _read_until(fd, b"code\x1b[0m.", seen)
        os.write(fd, b"/HELP\r")
        _read_until(fd, b"dream-restore", seen)
        # Ctrl-D typed before the next prompt is up would reach a terminal still in line
        # mode, which takes it as end-of-line, not as a key; a user sees the prompt first.
        _read_until(fd, PROMPT, seen, after=seen.find(b"dream-restore"))
        os.write(fd, b"\x04")  # Ctrl-D leaves
        _read_until(fd, b"\x00never", seen, timeout=5)
    finally:
        exit_code = _reap(pid)
        os.close(fd)
    assert exit_code == 0, "Ctrl-D at the prompt ends the chat"
    out = seen.decode("utf-8", "replace")
    assert "thinking…" in out
    assert re.search(r"waiting for scripted-model · [\d,]+ tokens · 0 s", out)  # what it waits on
    assert "\x1b[1mbold\x1b[0m" in out  # rendered bold, not asterisks
    assert "Commands:" in out  # /HELP is /help, not a message for the model
    assert len(scripted_model.requests) == 1


def test_one_shot_stdout_is_only_the_reply_even_with_a_terminal_on_stderr(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("Plain **answer**.")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hippobot", "agent", "-m", "hello"], env=_env(hippobot_home, scripted_server),
            stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL, timeout=120,
        )
        os.close(follower)
        seen = bytearray()
        _read_until(leader, b"\x00never", seen, timeout=1)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    assert proc.stdout == b"Plain **answer**.\n"  # scripts get exactly what the model wrote
    assert "thinking…" in seen.decode("utf-8", "replace")


def test_the_waiting_line_counts_the_prompt_as_the_provider_last_reported_it(hippobot_home, scripted_server, scripted_model):
    # The provider said the last request was 41,000 tokens: the next one is that plus the
    # new message, not what the offline estimator makes of the replayed messages.
    scripted_model.usage(prompt_tokens=41_000, completion_tokens=5).reply("First.")
    assert run(["agent", "-m", "hello"], hippobot_home, scripted_server).returncode == 0
    scripted_model.reply("Second.", delay=0.5)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hippobot", "agent", "-m", "and now?"], env=_env(hippobot_home, scripted_server),
            stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL, timeout=120,
        )
        os.close(follower)
        seen = bytearray()
        _read_until(leader, b"\x00never", seen, timeout=1)
    finally:
        os.close(leader)
    assert proc.returncode == 0 and proc.stdout == b"Second.\n"
    assert re.search(r"waiting for scripted-model · 41,\d{3} tokens", seen.decode("utf-8", "replace"))


def test_status_and_context_report_the_same_prompt_size(hippobot_home, scripted_server, scripted_model):
    run(["onboard"], hippobot_home)
    workspace = hippobot_home / "workspace"
    (workspace / "USER.md").write_text("# User\n- Name: Ada\n- Likes: tea\n")
    skill = workspace / "skills" / "kites"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: kites\ndescription: Fly kites safely\n---\nCheck the wind.\n")
    MemoryStore(workspace).append_history("- [permanent] User flies kites", session_key="cli:direct",
                                          source=HistorySource("cli:direct", 0, 2))
    scripted_model.reply("Hello Ada.")
    assert run(["agent", "-m", "hi"], hippobot_home, scripted_server).returncode == 0

    status = json.loads(run(["status", "--json"], hippobot_home, scripted_server).stdout)
    context = json.loads(run(["context", "--json"], hippobot_home, scripted_server).stdout)
    assert status["estimate_tokens"] == context["total_tokens"]
    chat_status = run(["agent", "-m", "/status"], hippobot_home, scripted_server).stdout
    assert f"~{context['total_tokens']} tokens" in chat_status
    as_json = json.loads(run(["agent", "-m", "/status", "--json"], hippobot_home, scripted_server).stdout)
    assert as_json["command"] is True and f"~{context['total_tokens']} tokens" in as_json["reply"]

    rows = {r["name"]: r for r in context["sources"]}
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md", "skill kites", "Recent History"):
        assert name in rows, list(rows)
    assert rows["USER.md"]["tokens"] > 0 and rows["Recent History"]["tokens"] > 0
    assert rows["SOUL.md"]["note"].startswith("not sent")  # the untouched template
    text = run(["agent", "-m", "/CONTEXT"], hippobot_home, scripted_server).stdout
    assert "  USER.md" in text and "  skill kites" in text and "bootstrap" not in text


def test_after_new_sessions_list_shows_the_fresh_conversation(hippobot_home, scripted_server, scripted_model):
    scripted_model.fallback = lambda request: "ok"
    run(["agent", "-m", "first talk about boats"], hippobot_home, scripted_server)
    before = json.loads(run(["sessions", "list", "--json"], hippobot_home).stdout)[0]
    assert before["message_count"] == 2 and before["preview"] == "first talk about boats"
    assert run(["agent", "-m", "/new"], hippobot_home, scripted_server).returncode == 0
    after = json.loads(run(["sessions", "list", "--json"], hippobot_home).stdout)[0]
    assert after["message_count"] == 0 and after["preview"] == ""
    run(["agent", "-m", "now about kites"], hippobot_home, scripted_server)
    latest = json.loads(run(["sessions", "list", "--json"], hippobot_home).stdout)[0]
    assert latest["message_count"] == 2 and latest["preview"] == "now about kites"


def test_memory_history_names_the_session_once(hippobot_home):
    run(["onboard"], hippobot_home)
    MemoryStore(hippobot_home / "workspace").append_history(
        "- [permanent] User flies kites", session_key="cli:direct", source=HistorySource("cli:direct", 0, 4)
    )
    out = run(["memory", "history"], hippobot_home).stdout
    assert "(cli:direct#0-3)" in out and out.count("cli:direct") == 1
