"""A live ``hippobot serve`` (uvicorn in a thread, port 0) for the core invariant tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from hippobot.agent.agent import Agent
from hippobot.server.app import create_app
from hippobot.server.run import GracefulServer, bind_socket


@dataclass
class Served:
    agent: Agent
    server: GracefulServer
    thread: threading.Thread
    port: int

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve() -> Iterator[Callable[[Agent], Served]]:
    running: list[Served] = []

    def start(agent: Agent) -> Served:
        app = create_app(agent, api_key=None, shutdown_timeout=5.0)
        sock = bind_socket("127.0.0.1", 0)
        config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False)
        server = GracefulServer(config, app, 5.0)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        running.append(Served(agent, server, thread, sock.getsockname()[1]))
        return running[-1]

    yield start
    for srv in running:
        srv.server.should_exit = True
        srv.thread.join(20)
