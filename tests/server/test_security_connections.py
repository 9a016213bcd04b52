"""Stalled connections cannot wedge the real ``hippobot serve`` process.

The repro of the bug: the server's descriptor limit lowered to 256, then more connections
than that, each sending only ``GET / HTTP/1.1\\r\\nHost: x\\r\\n`` and held open.
"""

from __future__ import annotations

import resource
import signal
import socket
import time

import httpx
import openai

from hippobot.testing.process import spawn_serve

from .serving import user_words

STALLED = b"GET / HTTP/1.1\r\nHost: x\r\n"
FD_LIMIT = 256
CLIENTS = 300  # more than the server has descriptors


def stall(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(STALLED)
        socks.append(sock)
    return socks


def answer_of(sock: socket.socket) -> bytes:
    """What the server sent before closing (b'' if it closed without a word)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def healthy(root: str) -> bool:
    try:
        return httpx.get(f"{root}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_stalled_connections_are_bounded_timed_out_and_do_not_block_sigterm(
    make_agent, scripted_server, scripted_model
):
    agent = make_agent()
    path = agent.settings.config_path
    path.write_text(path.read_text().replace('"serve": {', '"serve": {"headerTimeout": 1,', 1))
    def answer(req):
        if user_words(req) == "slow":
            time.sleep(2.5)  # longer than the header timeout: a turn is never cut by it
        return f"still here: {user_words(req)}"

    scripted_model.fallback = answer
    served = spawn_serve(agent.settings.home, scripted_server.base_url, preexec_fn=low_fd_limit)
    proc, seen = served.proc, served.seen
    held: list[socket.socket] = []
    try:
        url = served.wait_line(r"listening on (http://127\.0\.0\.1:(\d+)/v1)")
        token = served.wait_line(r"\?token=(\S+)").group(1)
        root, port = url.group(1).removesuffix("/v1"), int(url.group(2))

        held = stall(port, CLIENTS)
        answers = [answer_of(s) for s in held]  # the server closes every one of them
        busy = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        for sock in held:
            sock.close()
        held = []
        deadline = time.monotonic() + 30
        while not healthy(root):
            assert time.monotonic() < deadline and proc.poll() is None, "serve is wedged"
            time.sleep(0.2)
        reply = openai.OpenAI(base_url=url.group(1), api_key=token, max_retries=0)
        text = reply.chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "ping"}]
        ).choices[0].message.content
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in reply.chat.completions.create(
                model="hippobot", stream=True, messages=[{"role": "user", "content": "slow"}]
            )
            if chunk.choices
        )

        held = stall(port, CLIENTS // 3)  # still open when the signal comes
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)  # the old server ignored SIGTERM for a minute here
    finally:
        for sock in held:
            sock.close()
        served.stop()

    assert busy, "connections beyond the limit were not refused"
    assert b"server_busy" in busy[0]
    assert all(a == b"" or a.startswith(b"HTTP/1.1 503") for a in answers)
    assert len(busy) < CLIENTS  # the first ones were admitted, then timed out
    assert text == "still here: ping"
    assert streamed == "still here: slow"
    assert not any("out of system resource" in line for line in seen), "".join(seen)
