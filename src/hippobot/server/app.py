"""The OpenAI-compatible HTTP API in front of the agent (``hippobot serve``).

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/chat/completions`` (JSON or
SSE; the API paths also with a trailing slash), ``GET /healthz`` (never needs a key) and
``GET /`` (the read-only memory page, web.py).

Invariants:

* A request is answered by the agent of the person it authenticates as (users.py): one
  workspace each, so one user's request never reads or changes another's files.
* A retry never starts a second turn (dedupe.py): it joins or replays the first attempt,
  and errors of a started turn say ``x-should-retry: false``. Client task prompts are
  answered without a session (tasks.py).

* The server owns the history. Of a request's ``messages`` only the newest user message is a
  turn; everything before it is ignored, because the session file already holds it.
* A turn runs as its own task, not as part of the request. A client that disconnects does not
  cut a turn in half: the reply is still saved. Only shutdown cancels a turn, and by then the
  user's message is already on disk (``Agent.turn`` saves it before calling the model).
  Messages go through the application API (``Api.handle``), which answers slash commands
  itself, exactly as the terminal chat does.
* Turns of one session are serialised by the agent's per-session lock; turns of different
  sessions run concurrently. At most ``max_queued_per_session`` turns of one session may be
  waiting at once; more get a 429.
* Every error is JSON in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``.
  Failures of hippobot's own model provider are 502 (or 429), never 401: a 401 would tell the
  client that *its* key is wrong.

This module holds the routes, admission (:class:`TurnGate`) and the app itself; the wire
format (request parsing, the error shape, completion and SSE framing) is in ``wire.py``; what
keeps web pages out (Host, Origin, content type, body size, key and login cookie) is the
:class:`~hippobot.server.security.WebGuard` middleware in ``security.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hippobot.loop.events import ReplyDelta, ToolStarted
from hippobot.server.dedupe import IdempotencyConflict, TurnLedger
from hippobot.server.identity import Attempt, RequestId
from hippobot.server.security import WebGuard, WebPolicy
from hippobot.server.security import bearer_ok as bearer_ok
from hippobot.server.tasks import answer_task
from hippobot.server.users import Users
from hippobot.server.web import index

# Re-exported (as are the wire names in __all__): they lived here before wire.py.
from hippobot.server.wire import ABANDONED as ABANDONED
from hippobot.server.wire import DEFAULT_SESSION as DEFAULT_SESSION
from hippobot.server.wire import (
    END,
    MODEL_ID,
    ApiError,
    ChatCall,
    Reply,
    ReplyText,
    api_error_for,
    outcome,
    parse_chat_request,
    read_json,
    replayed_stream,
    session_key,
    sse_stream,
)

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent, TurnResult

__all__ = [
    "MODEL_ID",
    "ApiError",
    "ChatCall",
    "ReplyText",
    "TurnGate",
    "create_app",
    "parse_chat_request",
    "session_key",
]

log = logging.getLogger(__name__)



# --- in-flight turns -------------------------------------------------------------------------


@dataclass(slots=True)
class TurnGate:
    """The server's in-flight turns: admission, a bound per session, and graceful drain.

    ``begin_close`` stops admitting turns (503) and gives those in flight ``timeout`` seconds
    to finish before cancelling them. It is idempotent and runs on the server's loop.
    """

    max_queued_per_session: int = 32
    closing: bool = False
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _per_key: Counter[str] = field(default_factory=Counter)
    _drain: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, key: str, turn: Coroutine[Any, Any, TurnResult]) -> asyncio.Task[TurnResult]:
        if self.closing:
            turn.close()
            raise ApiError(503, "the server is shutting down", kind="server_error",
                           code="server_shutting_down")
        if self._per_key[key] >= self.max_queued_per_session:
            turn.close()
            raise ApiError(
                429,
                f"{self._per_key[key]} turns of session {key} are already waiting; "
                "wait for their replies before sending more",
                kind="rate_limit_error",
                code="session_busy",
                headers={"Retry-After": "1"},
            )
        task = asyncio.get_running_loop().create_task(turn, name=f"turn:{key}")
        self._tasks.add(task)
        self._per_key[key] += 1
        task.add_done_callback(lambda t: self._finished(key, t))
        return task

    def _finished(self, key: str, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._per_key[key] -= 1
        if self._per_key[key] <= 0:
            del self._per_key[key]
        if not task.cancelled():
            task.exception()  # retrieved here: the request that awaited it may be gone

    def begin_close(self, timeout: float) -> asyncio.Task[None]:
        self.closing = True
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_task(self._wait_or_cancel(timeout))
        return self._drain

    async def close(self, timeout: float) -> None:
        await asyncio.shield(self.begin_close(timeout))

    async def _wait_or_cancel(self, timeout: float) -> None:
        tasks = set(self._tasks)
        if not tasks:
            return
        log.warning("waiting up to %gs for %d turn(s) in flight", timeout, len(tasks))
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("abandoned %d turn(s); their user messages are saved", len(pending))
            await asyncio.gather(*pending, return_exceptions=True)


# --- routes ----------------------------------------------------------------------------------


def _models() -> dict[str, Any]:
    return {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "hippobot"}


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_models()]})


async def get_model(request: Request) -> Response:
    name = request.path_params["model"].rstrip("/")
    if name != MODEL_ID:
        raise ApiError(404, f"the model {name!r} does not exist; use {MODEL_ID!r}",
                       code="model_not_found", param="model")
    return JSONResponse(_models())


async def healthz(request: Request) -> Response:
    gate: TurnGate = request.app.state.gate
    status = "shutting_down" if gate.closing else "ok"
    return JSONResponse(
        {"status": status, "turns_in_flight": len(gate)}, status_code=503 if gate.closing else 200
    )


def _shows_progress(item: object) -> bool:
    return item is END or isinstance(item, ReplyDelta | ToolStarted)


NO_RETRY = {"x-should-retry": "false"}
"""On errors of a turn that started: the user's message is saved, so a client retry would
only store it again (both official SDKs obey this header)."""


async def chat_completions(request: Request) -> Response:
    call = parse_chat_request(await read_json(request), request.headers)
    users: Users = request.app.state.users
    scope = users.identify(request.headers)
    api = await users.api(scope)
    gate: TurnGate = request.app.state.gate
    if call.stateless:
        task = gate.start(f"{scope}/tasks", answer_task(api.agent, call))
        return await _answer_after(call, task, Reply(call), {"X-Hippobot-Stateless": "true"})
    headers = {"X-Session-Id": call.key}
    ledger: TurnLedger = request.app.state.ledger
    attempt = Attempt.of(request.headers)
    try:
        earlier = ledger.find(scope, call.key, call.text, attempt)
    except IdempotencyConflict as exc:
        raise ApiError(400, str(exc), code="idempotency_key_reused") from None
    if earlier is not None:
        log.info("request repeats a turn of %s; answering from it", call.key)
        return await _answer_after(call, earlier.task, earlier.framing,
                                   headers | {"X-Hippobot-Replay": "true"})
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def turn() -> TurnResult:
        try:
            # a slash command is answered by the API's router, anything else is a model turn
            return await api.handle(call.key, call.text, on_event=queue.put_nowait,
                                    max_tokens=call.max_tokens, stop=call.stop)
        finally:
            queue.put_nowait(END)

    task = gate.start(f"{scope}/{call.key}", turn())
    reply = Reply(call)
    slim = dataclasses.replace(call, text="", messages=())  # the ledger keeps no message text
    ledger.add(scope, call.key, call.text, attempt, task, Reply(slim, reply.id, reply.created))
    if not call.stream:
        return await _answer_after(call, task, reply, headers)
    # Hold the status line until the turn shows a sign of life, so that a failure before any
    # output (bad upstream key, rate limit) is a real HTTP error the SDK can act on.
    first = [await queue.get()]
    while not _shows_progress(first[-1]):
        first.append(await queue.get())
    if first[-1] is END:
        result = await outcome(task)
        if isinstance(result, ApiError):
            return result.response(headers | NO_RETRY)
    headers |= {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        sse_stream(call, task, queue, first, reply), media_type="text/event-stream",
        headers=headers,
    )


async def _answer_after(
    call: ChatCall, task: asyncio.Future[TurnResult], reply: Reply, headers: dict[str, str]
) -> Response:
    """The answer once ``task`` is over: JSON, or the whole reply as one SSE stream."""
    result = await outcome(task)
    if isinstance(result, ApiError):
        return result.response(headers | NO_RETRY)
    if not call.stream:
        return JSONResponse(reply.completion(result), headers=headers)
    headers = headers | {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        replayed_stream(call, task, reply), media_type="text/event-stream", headers=headers
    )


# --- errors, lifespan ------------------------------------------------------------------------


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return ApiError(404, f"no such endpoint: {request.method} {request.url.path}",
                        code="not_found").response()
    kind = "server_error" if exc.status_code >= 500 else "invalid_request_error"
    return ApiError(exc.status_code, str(exc.detail), kind=kind, headers=exc.headers).response()


async def _on_crash(request: Request, exc: Exception) -> Response:
    return api_error_for(exc).response()


def create_app(
    agent: Agent,
    *,
    api_key: str | None,
    shutdown_timeout: float = 30.0,
    max_queued_per_session: int = 32,
    run_schedulers: bool = True,
    users: Users | None = None,
    policy: WebPolicy | None = None,
) -> Starlette:
    """The ASGI app behind :class:`~hippobot.server.security.WebGuard` (``policy``: hosts,
    origins, body limit; with no key at all, ``api_key`` None and no ``serve.users``, only
    the key check is skipped, for in-process use). Its lifespan starts the agents'
    schedulers (Dream, idle compaction) and, at shutdown, drains in-flight turns
    (``shutdown_timeout``), stops the schedulers and closes the agents. ``agent`` is the owner's; ``users`` (default: from
    ``agent.settings.config.serve``) gives each person of ``serve.users`` an agent of their
    own. ``app.state.gate`` is the :class:`TurnGate`, ``app.state.schedulers`` the scheduler
    tasks."""
    gate = TurnGate(max_queued_per_session=max_queued_per_session)
    users = users or Users(agent, owner_key=api_key, serve=agent.settings.config.serve)
    schedulers: list[asyncio.Task[None]] = []

    def start(new: Agent) -> None:
        if run_schedulers:
            schedulers.extend(new.start_schedulers())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        start(agent)
        users.on_new_agent = start
        if users.serves_others:
            await users.user_exec()  # says once, at start, when users get no exec
        for name in users.configured:  # their Dream schedules run from the start
            await users.agent(name)
        app.state.schedulers = schedulers
        try:
            yield
        finally:
            await gate.close(shutdown_timeout)
            for task in schedulers:
                task.cancel()
            await asyncio.gather(*schedulers, return_exceptions=True)
            for each in users.agents():
                await each.aclose(shutdown_timeout)  # also closes the model connections

    app = Starlette(
        routes=[  # the API paths answer with a trailing slash too (clients add one; no 307)
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/chat/completions/", chat_completions, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/", index, methods=["GET"]),
        ],
        exception_handlers={ApiError: _on_api_error, HTTPException: _on_http_error,
                            Exception: _on_crash},
        lifespan=lifespan,
    )
    app.add_middleware(WebGuard, keys=users.keys(), policy=policy or WebPolicy())
    app.add_middleware(RequestId)  # outermost: errors of the middleware above get an id too
    app.state.agent = agent
    app.state.users = users
    app.state.ledger = TurnLedger()
    app.state.gate = gate
    return app
