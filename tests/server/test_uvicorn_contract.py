"""What ``server/connections.py`` relies on inside uvicorn is still there.

The guard extends uvicorn's ``H11Protocol`` (no public hook times a request's headers and
body), so ``pyproject.toml`` pins uvicorn to the releases this file passed on. Before
raising that bound, run this file and ``test_security_connections.py`` on the new release:
a failure here names the internal that moved.
"""

from __future__ import annotations

import asyncio

import h11
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from hippobot.errors import HippobotError
from hippobot.server.connections import (
    OVERRIDDEN,
    PROTOCOL_ATTRIBUTES,
    check_uvicorn,
    guarded_protocol,
)


async def _until(condition, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_the_guard_runs_on_uvicorns_h11_protocol_at_every_step():
    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"got {len(await request.body())}")

    app = Starlette(routes=[Route("/", echo, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", lifespan="off",
                                           http=guarded_protocol(4, 5, 5)))
    task = asyncio.create_task(server.serve())
    await _until(lambda: server.started)
    port = server.servers[0].sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await _until(lambda: len(server.server_state.connections) == 1)
        (proto,) = server.server_state.connections
        assert type(proto).__mro__[1] is H11Protocol
        missing = [a for a in PROTOCOL_ATTRIBUTES if not hasattr(proto, a)]
        assert missing == [], f"uvicorn {uvicorn.__version__}: H11Protocol lost {missing}"
        assert isinstance(proto.conn, h11.Connection)
        assert proto.connections is server.server_state.connections
        assert proto.loop is asyncio.get_running_loop()
        assert proto._header_timer is not None  # connection_made ran the guard's
        assert proto._waiting_since is not None

        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        await _until(lambda: proto.conn.their_state is h11.SEND_BODY and proto.cycle is not None)
        assert proto._body_timer is not None and proto._header_timer is None  # handle_events
        assert proto.cycle.response_started is False

        writer.write(b"cd")
        answer = await asyncio.wait_for(reader.readuntil(b"got 4"), 5)
        assert answer.startswith(b"HTTP/1.1 200")
        # on_response_complete: the connection waits for its next request's headers
        await _until(lambda: proto._header_timer is not None)
        assert proto._body_timer is None and proto.conn.their_state is h11.IDLE
    finally:
        writer.close()
        server.should_exit = True
        await task


def test_a_uvicorn_without_an_overridden_method_is_refused_in_one_line(monkeypatch):
    check_uvicorn()  # the installed release has them all
    assert "handle_events" in OVERRIDDEN
    monkeypatch.delattr(H11Protocol, "handle_events")
    with pytest.raises(HippobotError) as caught:
        guarded_protocol(4, 5, 5)
    message = str(caught.value)
    assert "H11Protocol.handle_events" in message and "pip install 'uvicorn" in message
    assert "\n" not in message
