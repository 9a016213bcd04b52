"""Helpers for the ``hippobot serve`` tests: a live in-process server and session readers."""

from __future__ import annotations

import functools
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import uvicorn
from starlette.applications import Starlette

from hippobot.agent.agent import Agent
from hippobot.messages import public_text
from hippobot.server.app import create_app
from hippobot.server.run import GracefulServer, bind_socket
from hippobot.session.keys import key_to_relpath

# httpx and the SDK read the certificate store for every client they build (~50 ms of CPU),
# though these servers speak plain HTTP: the tests' clients share one context.
TLS = ssl.create_default_context()


@dataclass
class Running:
    """One live server; ``stop()`` is what SIGTERM does to the real process."""

    agent: Agent
    app: Starlette
    server: GracefulServer
    thread: threading.Thread
    port: int
    clients: list[openai.OpenAI | httpx.Client] = field(default_factory=list)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    @functools.cached_property
    def http(self) -> httpx.Client:
        """A plain HTTP client (``srv.http.post(...)``), closed when the server stops."""
        client = httpx.Client(verify=TLS)
        self.clients.append(client)
        return client

    def browser(self) -> httpx.Client:
        """A new client with its own cookies, as a browser keeps them."""
        client = httpx.Client(base_url=self.root, verify=TLS)
        self.clients.append(client)
        return client

    def client(self, api_key: str = "unused", **kw: Any) -> openai.OpenAI:
        """The OpenAI SDK pointed at this server; no retries unless ``max_retries`` says so."""
        kw.setdefault("max_retries", 0)
        kw.setdefault("http_client", openai.DefaultHttpxClient(verify=TLS))
        client = openai.OpenAI(base_url=self.base_url, api_key=api_key, **kw)
        self.clients.append(client)
        return client

    def aclient(self, api_key: str = "unused", **kw: Any) -> openai.AsyncOpenAI:
        kw.setdefault("http_client", openai.DefaultAsyncHttpxClient(verify=TLS))
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **kw)

    def stop(self, timeout: float = 20.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        for client in self.clients:
            client.close()
        assert not self.thread.is_alive(), "the server did not shut down"


def start_server(agent: Agent, **app_kw: Any) -> Running:
    app_kw.setdefault("api_key", None)
    shutdown_timeout = app_kw.setdefault("shutdown_timeout", 5.0)
    app = create_app(agent, **app_kw)
    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False)
    server = GracefulServer(config, app, shutdown_timeout)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="hippobot-serve", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    return Running(agent, app, server, thread, sock.getsockname()[1])



def session_records(agent: Agent, key: str) -> list[dict[str, Any]]:
    """Every line of a session file, parsed (fails if any line is not JSON)."""
    path = agent.workspace / key_to_relpath(key)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def session_messages(agent: Agent, key: str) -> list[tuple[str, str]]:
    """(role, text a person would read) of a session's messages."""
    return [(r["role"], public_text(r)) for r in session_records(agent, key) if "role" in r]


def session_path(agent: Agent, key: str) -> Path:
    return agent.workspace / key_to_relpath(key)


def wait_for(condition: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    """Poll ``condition`` (a torn line read mid-write counts as not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except ValueError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
