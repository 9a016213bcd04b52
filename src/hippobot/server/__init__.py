"""``hippobot serve``: the memory agent behind an OpenAI-compatible HTTP API.

:func:`create_app` builds the ASGI app around an :class:`~hippobot.agent.agent.Agent` (tests
run it in-process); :func:`run_server` is what the CLI calls. Heavy imports (Starlette,
uvicorn) happen only when this package is imported, never by ``hippobot --help``.
"""

from __future__ import annotations

from hippobot.server.app import ApiError, TurnGate, create_app
from hippobot.server.run import GracefulServer, run_server

__all__ = ["ApiError", "GracefulServer", "TurnGate", "create_app", "run_server"]
