"""Several people on one server, each with memory of their own (``serve.users``).

Every request is answered by exactly one agent, and an agent is exactly one workspace:
sessions, history, SOUL/USER/MEMORY, memory versions, the Dream schedule and the recall
index all live under it. Who a request is:

* a bearer token equal to a user's ``apiKey``: that user;
* ``serve.apiKey`` (or no key configured at all): the owner, i.e. the server's own workspace;
  with ``serve.trustUserHeader`` set and that header present, the user it names instead.
  The header is trusted only with ``serve.apiKey``: the key of the proxy in front (Open
  WebUI), never with a user's key, so nobody can claim to be someone else.

A header value is a user's name or one of their ``aliases``; any other value that is a
plain name (letters, digits, ``._@+-``) gets a workspace of its own under
``<home>/users/<value>``, so a proxy's users need not be listed one by one. Agents are
created on first use; workspaces are initialised like ``hippobot onboard`` does.

What each agent's tools can reach: its own workspace only. The other configured workspaces
(and the owner's) are hidden from its file tools and from its ``exec`` sandbox, like
hippobot's home (which holds the keys and the ``users/`` workspaces); the owner's agent
does not see the users' workspaces either. Where no sandbox works, the users' agents get no
``exec`` at all (their commands would run as the server's user, able to read every
workspace and ``config.json``), and the start-up log says so once, unless
``serve.allowUnsandboxedExec`` is true.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.errors import UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.server.wire import ApiError
from hippobot.workspace import Home

if TYPE_CHECKING:
    from starlette.requests import Request

    from hippobot.agent.agent import Agent
    from hippobot.agent.api import Api
    from hippobot.config.schema import ServeConfig

__all__ = ["OWNER", "UNAUTHORIZED", "Users", "bearer_token", "request_agent"]

log = logging.getLogger(__name__)

OWNER = ""  # the scope name of the server's own workspace
_NAME = lazy_compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


def bearer_token(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _nested(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


UNAUTHORIZED = ApiError(
    401,
    "missing or wrong API key: send 'Authorization: Bearer <key>' with the key configured "
    "as serve.apiKey or HIPPOBOT_SERVE_KEY on the server, or your own from serve.users",
    code="invalid_api_key",
    headers={"WWW-Authenticate": "Bearer"},
)


class Users:
    """Who a request is, and the agent that holds their memory (see the module docstring).

    ``make_agent(workspace)`` builds a user's agent; by default an :class:`Agent` on the
    owner's settings with only the workspace changed. ``on_new_agent`` is called for each
    agent created (the app starts its schedulers).
    """

    def __init__(
        self,
        owner: Agent,
        *,
        owner_key: str | None,
        serve: ServeConfig,
        make_agent: Callable[[Path], Agent] | None = None,
    ) -> None:
        self.owner = owner
        self.owner_key = owner_key or None
        self.trust_header = (serve.trust_user_header or "").strip().lower() or None
        self._make = make_agent or self._default_agent
        self._workspaces: dict[str, Path] = {}
        self._keys: list[tuple[str, str]] = []  # (api key, name)
        self._aliases: dict[str, str] = {}
        home = owner.settings.home
        for name, spec in serve.users.items():
            if not _NAME.fullmatch(name):
                raise UserError(
                    f"serve.users: {name!r} cannot be a user name; use letters, digits "
                    "and ._@+- (starting with a letter or digit)"
                )
            ws = Path(spec.workspace).expanduser() if spec.workspace else Home(home).user_workspace(name)
            self._workspaces[name] = ws.resolve()
            if spec.api_key:
                if spec.api_key == self.owner_key or any(spec.api_key == k for k, _ in self._keys):
                    raise UserError(f"serve.users.{name}.apiKey is also used by someone else; "
                                    "give every user a key of their own")
                self._keys.append((spec.api_key, name))
            for alias in spec.aliases:
                self._aliases[alias.strip().lower()] = name
        spaces = [("the server", owner.workspace.resolve()), *list(self._workspaces.items())]
        for i, (a, one) in enumerate(spaces):
            for b, other in spaces[i + 1 :]:
                if _nested(one, other):
                    raise UserError(
                        f"serve.users: the workspaces of {a} and {b} overlap ({one}, {other}); "
                        "give each user a separate folder, so nobody's tools reach another's files"
                    )
        self._agents: dict[str, Agent] = {OWNER: owner}
        self._apis: dict[str, Api] = {}
        self._creating: dict[str, asyncio.Task[Agent]] = {}
        self.on_new_agent: Callable[[Agent], None] | None = None
        self._allow_unsandboxed = serve.allow_unsandboxed_exec
        self._user_exec: bool | None = None
        owner.private_paths = tuple(self._workspaces.values())

    @property
    def serves_others(self) -> bool:
        """True when people other than the owner can have agents here."""
        return bool(self._workspaces) or bool(self.trust_header and self.owner_key)

    async def user_exec(self) -> bool:
        """Whether the users' agents get ``exec`` (decided once; the first call logs why not)."""
        if self._user_exec is None:
            reason = await self.owner.sandbox_problem()
            self._user_exec = reason is None or self._allow_unsandboxed
            if reason is not None and self._allow_unsandboxed:
                log.warning("exec runs WITHOUT a sandbox for the users of serve.users (%s); "
                            "serve.allowUnsandboxedExec is true, so their commands can read "
                            "every workspace and config.json", reason)
            elif reason is not None:
                log.warning("exec is off for the users of serve.users: %s, and without a "
                            "sandbox their commands could read every workspace and "
                            "config.json (set serve.allowUnsandboxedExec to true to allow "
                            "it anyway)", reason)
        return self._user_exec

    def _private_for(self, workspace: Path) -> tuple[Path, ...]:
        """Every other workspace the server knows of (the owner's and the configured ones)."""
        spaces = [self.owner.workspace.resolve(), *self._workspaces.values()]
        return tuple(ws for ws in spaces if ws != workspace.resolve())

    # --- who is asking ----------------------------------------------------------------

    @property
    def configured(self) -> list[str]:
        return list(self._workspaces)

    @property
    def auth_required(self) -> bool:
        return bool(self.owner_key or self._keys)

    def keys(self) -> list[str]:
        """Every bearer token the server accepts."""
        return [k for k in (self.owner_key, *(k for k, _ in self._keys)) if k]

    def identify(self, headers: Mapping[str, str]) -> str:
        """The scope (user name, or :data:`OWNER`) a request acts for; 401/400 if none."""
        token = bearer_token(headers.get("authorization"))
        if self.auth_required:
            if token is None:
                raise UNAUTHORIZED
            found = [name for key, name in self._keys if _same(token, key)]
            if found:
                return found[0]
            if self.owner_key is None or not _same(token, self.owner_key):
                raise UNAUTHORIZED
        if self.trust_header is None or not self.owner_key:
            return OWNER
        value = (headers.get(self.trust_header) or "").strip()
        if not value:
            return OWNER
        name = self._aliases.get(value.lower())
        if name is None:
            name = value if value in self._workspaces else value.lower()
        if not _NAME.fullmatch(name):
            raise ApiError(
                400,
                f"the {self.trust_header} header ({value[:60]!r}) cannot name a user; "
                "it must be letters, digits and ._@+-",
            )
        return name

    # --- their agent ------------------------------------------------------------------

    def workspace(self, name: str) -> Path:
        if name == OWNER:
            return self.owner.workspace
        return self._workspaces.get(name) or Home(self.owner.settings.home).user_workspace(name).resolve()

    def _check_separate(self, name: str, workspace: Path) -> None:
        """A user named only by the proxy header must not land inside someone's workspace."""
        if name in self._workspaces:
            return  # checked at start-up
        for other, ws in [("the server", self.owner.workspace.resolve()), *self._workspaces.items()]:
            if _nested(workspace, ws):
                raise ApiError(
                    500,
                    f"the workspace for user {name!r} ({workspace}) would overlap that of "
                    f"{other}; move the server's workspace out of {workspace.parent}",
                    kind="server_error",
                )

    async def agent(self, name: str) -> Agent:
        """The agent of ``name``, created (and its workspace initialised) on first use."""
        agent = self._agents.get(name)
        if agent is not None:
            return agent
        creating = self._creating.get(name)
        if creating is None:
            creating = asyncio.get_running_loop().create_task(self._create(name))
            self._creating[name] = creating
        try:
            return await asyncio.shield(creating)
        finally:
            if creating.done():
                self._creating.pop(name, None)

    async def _create(self, name: str) -> Agent:
        workspace = self.workspace(name)
        self._check_separate(name, workspace)
        await asyncio.to_thread(_initialise, workspace)
        agent = self._make(workspace)
        agent.private_paths = self._private_for(workspace)
        agent.exec_enabled = await self.user_exec()
        self._agents[name] = agent
        log.info("serving user %s from %s", name, workspace)
        if self.on_new_agent is not None:
            self.on_new_agent(agent)
        return agent

    async def api(self, name: str) -> Api:
        """The application API on the agent of ``name`` (what the chat endpoint calls)."""
        from hippobot.agent.api import Api

        agent = await self.agent(name)
        api = self._apis.get(name)
        if api is None or api.agent is not agent:
            api = self._apis[name] = Api.for_agent(agent)
        return api

    def agents(self) -> list[Agent]:
        return list(self._agents.values())

    def _default_agent(self, workspace: Path) -> Agent:
        from hippobot.agent.agent import Agent

        settings = dataclasses.replace(self.owner.settings, workspace=workspace)
        agent = Agent(settings)
        agent.retry_policy = self.owner.retry_policy
        return agent


async def request_agent(request: Request) -> Agent:
    """The agent whose workspace ``request`` may see (the memory page uses it too)."""
    users: Users = request.app.state.users
    return await users.agent(users.identify(request.headers))


def _initialise(workspace: Path) -> None:
    """Folders, template files and the versions repository, as ``hippobot onboard``
    (a history that cannot be started is logged there; the chat still works)."""
    from hippobot.agent.onboarding import ensure_workspace

    workspace.mkdir(parents=True, exist_ok=True)
    ensure_workspace(workspace)
