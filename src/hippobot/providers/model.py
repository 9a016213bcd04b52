"""The model a workspace talks to, as one collaborator: endpoint, name and call settings.

Services that call the model (a chat turn, consolidation, Dream) get a :class:`ModelClient`
instead of the whole agent. The endpoint is resolved once, on first use, and the provider
created then (so start-up stays fast and a command that never calls the model never needs
one configured).

When the endpoint works on one request at a time (``agents.defaults.serialRequests``: local
endpoints by default), the provider queues its requests with every other process and
workspace of the hippobot home (:mod:`hippobot.providers.serial`); :meth:`ModelClient.chat_turn`
keeps a chat turn ahead of background work for as long as it runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Literal, Protocol

from hippobot.providers.base import ChatRequest, Provider
from hippobot.providers.metering import UsageSink
from hippobot.providers.retry import RetryPolicy
from hippobot.providers.serial import EndpointGate

__all__ = ["ModelClient", "Target"]

log = logging.getLogger(__name__)


class Target(Protocol):
    """A resolved endpoint (``hippobot.config.ModelTarget``)."""

    @property
    def kind(self) -> Literal["openai", "anthropic"]: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key(self) -> str: ...
    @property
    def api_base(self) -> str | None: ...
    @property
    def extra_headers(self) -> dict[str, str]: ...
    @property
    def timeout(self) -> float | None: ...


class ModelClient:
    """``resolve`` gives the endpoint (raising a UserError when none is configured);
    ``fallback_name`` is shown where a model name is displayed but none is configured.

    The provider it creates recovers tool calls written as text (``text_tool_calls``: ``auto``,
    ``on``, ``off``) and, given a ``usage`` sink, records every request there (``estimate``
    counts the prompt when the endpoint reports no usage). ``serial_requests`` (``auto``,
    ``on``, ``off``) says whether requests go one at a time, queued under ``home`` (the
    hippobot home; without one they are not queued). A provider passed in is used as is."""

    def __init__(
        self,
        resolve: Callable[[], Target],
        *,
        max_tokens: int,
        temperature: float | None,
        fallback_name: str = "",
        provider: Provider | None = None,
        text_tool_calls: str = "auto",
        usage: UsageSink | None = None,
        estimate: Callable[[ChatRequest], int] | None = None,
        home: Path | None = None,
        serial_requests: str = "auto",
    ) -> None:
        self._resolve = resolve
        self._target: Target | None = None
        self._provider = provider
        self.max_tokens = max_tokens
        self.configured_temperature = temperature
        self.fallback_name = fallback_name
        self.retry: RetryPolicy | None = None  # None: the provider's default policy
        self.text_tool_calls = text_tool_calls
        self.usage = usage
        self.estimate = estimate
        self.home = home
        self.serial_requests = serial_requests
        self._gate: EndpointGate | None = None

    @property
    def target(self) -> Target:
        """The endpoint, resolved once (an unconfigured model raises every time it is asked)."""
        if self._target is None:
            self._target = self._resolve()
        return self._target

    @property
    def name(self) -> str:
        return self.target.model

    @property
    def temperature(self) -> float | None:
        """The temperature every request of this client sends: the configured one; unset,
        :data:`~hippobot.providers.endpoints.LOCAL_TEMPERATURE` for a local server and none
        (the endpoint's own default) elsewhere."""
        if self.configured_temperature is not None:
            return self.configured_temperature
        from hippobot.errors import UserError
        from hippobot.providers.endpoints import LOCAL_TEMPERATURE, is_local
        from hippobot.providers.factory import KNOWN_ENDPOINTS

        try:
            target = self.target
        except UserError:
            return None
        base = target.api_base if target.api_base is not None else KNOWN_ENDPOINTS.get(target.provider)
        return LOCAL_TEMPERATURE if target.kind == "openai" and is_local(target.provider, base) else None

    def label(self) -> str:
        """The model name for display: configured or not, never an error."""
        from hippobot.errors import UserError

        try:
            return self.name
        except UserError:
            return self.fallback_name

    def check(self) -> None:
        """Raise the UserError saying how to configure a model, when none is."""
        _ = self.target

    def configured(self) -> bool:
        from hippobot.errors import UserError

        try:
            _ = self.target
        except UserError:
            return False
        return True

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            from hippobot.providers.factory import make_provider

            target = self.target
            self._gate = self._make_gate(target)
            self._provider = make_provider(
                target.kind,
                api_key=target.api_key,
                api_base=target.api_base,
                extra_headers=target.extra_headers,
                timeout=target.timeout,
                retry=self.retry,
                name=target.provider,
                text_tool_calls=self.text_tool_calls,
                usage=self.usage,
                estimate=self.estimate,
                gate=self._gate,
            )
        return self._provider

    def _make_gate(self, target: Target) -> EndpointGate | None:
        from hippobot.providers.endpoints import endpoint_key
        from hippobot.providers.factory import KNOWN_ENDPOINTS
        from hippobot.providers.serial import serial_enabled
        from hippobot.workspace import Home

        base = target.api_base if target.api_base is not None else KNOWN_ENDPOINTS.get(target.provider)
        if self.home is None or not base:
            return None
        if not serial_enabled(self.serial_requests, provider=target.provider, api_base=base):
            return None
        return EndpointGate(Home(self.home).endpoint(endpoint_key(base)))

    def chat_turn(self) -> AbstractAsyncContextManager[None]:
        """Hold a chat turn's claim on a one-at-a-time endpoint: background requests of the
        home wait until the block ends (nothing happens for other endpoints)."""
        _ = self.provider
        if self._gate is None:
            return contextlib.nullcontext()
        return self._gate.chat_turn()

    def use(self, provider: Provider) -> None:
        """Talk through ``provider`` from now on (tests: a client with its own timeout)."""
        self._provider = provider

    async def aclose(self) -> None:
        close = getattr(self._provider, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception as exc:  # closing idle connections must not fail a shutdown
                log.debug("closing the provider failed: %s", exc)
