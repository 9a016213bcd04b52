"""``hippobot serve`` in-process: uvicorn in a background thread on 127.0.0.1, an agent that
talks HTTP to the scripted model, and the official ``openai`` SDK as the client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import openai
import pytest

from hippobot.agent.agent import Agent

from .serving import Running, start_server


@pytest.fixture
def serve(make_agent: Callable[..., Agent]) -> Iterator[Callable[..., Running]]:
    """``serve(api_key=..., agent=..., **create_app kwargs)`` starts a server; all stop at
    teardown."""
    running: list[Running] = []

    def start(*, agent: Agent | None = None, **app_kw: Any) -> Running:
        srv = start_server(agent or make_agent(), **app_kw)
        running.append(srv)
        return srv

    yield start
    for srv in running:
        if srv.thread.is_alive():
            srv.stop()




@pytest.fixture
async def aclient() -> AsyncIterator[Callable[[Running], openai.AsyncOpenAI]]:
    """``aclient(srv)``: an async SDK client for ``srv``, closed at teardown."""
    made: list[openai.AsyncOpenAI] = []

    def make(srv: Running) -> openai.AsyncOpenAI:
        made.append(srv.aclient())
        return made[-1]

    yield make
    for client in made:
        await client.close()
