"""``hippobot serve`` as a real process: address rules, start-up line, SIGTERM."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import openai
import pytest

from hippobot.errors import UserError
from hippobot.server.run import bind_socket, resolve_bind

from .serving import session_messages, user_words


@pytest.mark.parametrize(
    ("host", "key", "bound", "warned"),
    [
        ("0.0.0.0", None, "127.0.0.1", True),
        ("192.168.1.20", None, "127.0.0.1", True),
        ("0.0.0.0", "a-key-long-enough", "0.0.0.0", False),
        ("127.0.0.1", None, "127.0.0.1", False),
        ("::1", None, "::1", False),
        ("localhost", None, "localhost", False),
    ],
)
def test_without_a_key_only_loopback_is_bound(host, key, bound, warned):
    address, warning = resolve_bind(host, key)

    assert address == bound
    assert (warning is not None) == warned
    if warning:
        assert host in warning and "HIPPOBOT_SERVE_KEY" in warning


def test_a_port_in_use_is_a_clear_error():
    taken = bind_socket("127.0.0.1", 0)
    try:
        with pytest.raises(UserError, match=r"cannot listen on 127\.0\.0\.1:\d+.*--port"):
            bind_socket("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def read_lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def wait_line(lines: queue.Queue, pattern: str, seen: list[str], timeout: float = 30.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, "hippobot serve exited early:\n" + "".join(seen)
        seen.append(line)
        if match := re.search(pattern, line):
            return match


def test_the_real_process_serves_and_stops_on_sigterm(make_agent, scripted_server, scripted_model):
    agent = make_agent()  # an onboarded workspace in this test's HIPPOBOT_HOME
    scripted_model.fallback = lambda req: f"heard: {user_words(req)}"
    env = dict(
        os.environ,
        HIPPOBOT_HOME=str(agent.settings.home),
        HIPPOBOT_MODEL="scripted-model",
        HIPPOBOT_API_BASE=scripted_server.base_url,
        HIPPOBOT_API_KEY="sk-test-key-000000000000",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hippobot", "serve", "--host", "0.0.0.0", "--port", "0"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=read_lines, args=(proc.stderr, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        url = wait_line(lines, r"listening on (http://127\.0\.0\.1:\d+/v1)", seen).group(1)
        token = wait_line(lines, r"memory page: http://127\.0\.0\.1:\d+/\?token=(\S+)", seen).group(1)
        with pytest.raises(openai.AuthenticationError):  # loopback alone is no key
            openai.OpenAI(base_url=url, api_key="none", max_retries=0).models.list()
        client = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
        reply = client.chat.completions.create(
            model="hippobot", user="proc", messages=[{"role": "user", "content": "ping"}]
        )
        proc.send_signal(signal.SIGTERM)
        wait_line(lines, r"hippobot serve: stopped", seen)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
        proc.stderr.close()

    assert any("will not listen on 0.0.0.0" in line for line in seen)
    token_file = agent.settings.home / "serve-token"
    assert token_file.read_text().strip() == token and token_file.stat().st_mode & 0o777 == 0o600
    assert reply.choices[0].message.content == "heard: ping"
    assert session_messages(agent, "api:proc") == [("user", "ping"), ("assistant", "heard: ping")]
