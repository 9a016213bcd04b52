"""Stalled connections cannot wedge the real ``hippobot serve`` process.

The repro of the first bug: the server's descriptor limit lowered to 256, then more
connections than that, each sending only ``GET / HTTP/1.1\\r\\nHost: x\\r\\n`` and held open.
The second: 300 connections sending full POST headers with ``Content-Length: 1000000``, then
one byte every few seconds; headers were timed, bodies were not, and every ``/healthz``
probe got a 503 for as long as they trickled.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import time

import httpx
import openai

from hippobot.testing.process import spawn_serve

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
        if req.last_user_words() == "slow":
            time.sleep(2.5)  # longer than the header timeout: a turn is never cut by it
        return f"still here: {req.last_user_words()}"

    scripted_model.fallback = answer
    served = spawn_serve(agent.settings.home, scripted_server.base_url, preexec_fn=low_fd_limit)
    proc, seen = served.proc, served.seen
    held: list[socket.socket] = []
    try:
        url = served.wait_line(r"listening on (http://127\.0\.0\.1:(\d+)/v1)")
        token = served.wait_line(r"\?token=(\S+)").group(1)
        root, port = url.group(1).removesuffix("/v1"), int(url.group(2))

        held = stall(port, CLIENTS)
        while_held = [healthy(root) for _ in range(5)]  # the stalest stalled ones make room
        answers = [answer_of(s) for s in held]  # the server closes every one of them
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

    assert all(while_held), while_held
    assert all(a == b"" for a in answers)  # closed: made room for others, or timed out
    assert text == "still here: ping"
    assert streamed == "still here: slow"
    assert not any("out of system resource" in line for line in seen), "".join(seen)


SLOW_BODY = (
    b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000000\r\n\r\n"
)


def test_slow_bodies_are_timed_out_and_healthz_answers_while_they_trickle(
    make_agent, scripted_server
):
    agent = make_agent()
    path = agent.settings.config_path
    path.write_text(path.read_text().replace('"serve": {', '"serve": {"bodyTimeout": 2,', 1))
    served = spawn_serve(agent.settings.home, scripted_server.base_url)
    held: list[socket.socket] = []
    try:
        url = served.wait_line(r"listening on (http://127\.0\.0\.1:(\d+)/v1)")
        root, port = url.group(1).removesuffix("/v1"), int(url.group(2))
        started = time.monotonic()
        for _ in range(CLIENTS):  # more than serve.maxConnections (256)
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(SLOW_BODY)
            held.append(sock)
        probes = []
        for _ in range(6):  # one byte from every client, then a probe, for about 1.5 s
            for sock in held:
                with contextlib.suppress(OSError):
                    sock.send(b" ")
            probes.append(healthy(root))
            time.sleep(0.25)
        assert all(probes), probes  # was: 503 for every probe while the bodies trickled
        deadline = started + 15  # every one must be closed after about serve.bodyTimeout
        answers = []
        for sock in held:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            answers.append(answer_of(sock))
        elapsed = time.monotonic() - started
    finally:
        for sock in held:
            sock.close()
        served.stop()
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
    assert len(timed_out) + answers.count(b"") == CLIENTS
    assert len(timed_out) >= CLIENTS - 100 and b"request_timeout" in timed_out[0]
    assert elapsed < 15
    assert not any("Traceback" in line for line in served.seen), "".join(served.seen)


async def test_a_full_server_refuses_a_newcomer_only_when_every_request_is_complete():
    """The 503 ``server_busy`` is for when no connection is merely stalling."""
    import asyncio

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from hippobot.server.connections import guarded_protocol

    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return PlainTextResponse("done")

    app = Starlette(routes=[Route("/", slow)])
    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", lifespan="off",
                                           http=guarded_protocol(2, 5, 5)))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    busy = []
    for _ in range(2):  # two complete requests, both waiting for their answer
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        busy.append((reader, writer))
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    refused = await asyncio.wait_for(reader.read(), 5)
    release.set()
    answered = [await asyncio.wait_for(r.readuntil(b"done"), 5) for r, _ in busy]
    for _, w in [*busy, (reader, writer)]:
        w.close()
    server.should_exit = True
    await task
    assert refused.startswith(b"HTTP/1.1 503") and b"server_busy" in refused
    assert all(a.startswith(b"HTTP/1.1 200") for a in answered)
