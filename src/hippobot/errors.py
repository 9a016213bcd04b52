"""One exception tree, organised by who must act.

* :class:`UserError` – the user must fix something (configuration, bad input). The
  message is one line that says what to do; the CLI prints it and exits non-zero.
* :class:`ProviderError` – the model endpoint failed. Subclasses carry the fields a
  retry policy reads (``status``, ``retry_after``, ``retryable``, ``in_flight``); nothing in
  hippobot decides a retry by matching substrings of a message.
* :class:`ToolError` – a tool could not do what the model asked. The agent loop turns
  it into a tool result the model can read; it never ends a turn.
* :class:`StorageError` – the disk refused a write (full, read-only); the message
  names the file and the fact that nothing was truncated.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "BadRequestError",
    "ConfigError",
    "ContextTooLongError",
    "EndpointUnreachableError",
    "HippobotError",
    "MalformedResponseError",
    "NoModelConfiguredError",
    "ProviderError",
    "ProviderTimeoutError",
    "RateLimitError",
    "ServerError",
    "StorageError",
    "StreamInterruptedError",
    "ToolError",
    "UserError",
]


class HippobotError(Exception):
    """Base of every error hippobot raises on purpose."""


# --- the user must act -------------------------------------------------------------


class UserError(HippobotError):
    """Bad configuration or input; ``str(err)`` is a one-line instruction."""


class ConfigError(UserError):
    """``config.json`` (or an override) is malformed or inconsistent."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None
    ) -> None:
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class NoModelConfiguredError(UserError):
    """No provider/model is configured but the command needs one."""

    def __init__(self, config_path: str = "~/.hippobot/config.json") -> None:
        super().__init__(
            "no model configured: set HIPPOBOT_MODEL and HIPPOBOT_API_KEY (or OPENAI_API_KEY / "
            f"ANTHROPIC_API_KEY), or add a provider to {config_path} "
            "(see `hippobot onboard`)"
        )


# --- the provider failed -----------------------------------------------------------


class ProviderError(HippobotError):
    """The model endpoint failed. ``retryable`` is what the retry policy reads.

    ``in_flight``: the endpoint may still be working on the request (it was sent, and no
    answer says it stopped: a timeout waiting for the reply, a stream cut part-way). A
    connection that failed, or an error status, means no work is going on any more. Each
    class has its usual value; the code raising it may say otherwise."""

    retryable: bool = False
    in_flight: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        in_flight: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.provider = provider
        if in_flight is not None:
            self.in_flight = in_flight


class AuthError(ProviderError):
    """401/403: the API key is wrong or lacks access. Never retried."""


class BadRequestError(ProviderError):
    """400/404/422: the request itself is wrong (unknown model, bad schema). Never retried."""


class ContextTooLongError(BadRequestError):
    """The prompt exceeds the model's context window."""


class RateLimitError(ProviderError):
    """429: retried after ``retry_after`` seconds when the server says so."""

    retryable = True


class ServerError(ProviderError):
    """5xx from the endpoint."""

    retryable = True


class ProviderTimeoutError(ProviderError):
    """The endpoint did not answer in time."""

    retryable = True
    in_flight = True


class EndpointUnreachableError(ProviderError):
    """Connection refused, reset or DNS failure."""

    retryable = True


class MalformedResponseError(ProviderError):
    """The endpoint answered something that is not a valid response body."""

    retryable = True
    in_flight = True


class StreamInterruptedError(ProviderError):
    """A streamed reply stopped before its end."""

    retryable = True
    in_flight = True


# --- a tool failed ----------------------------------------------------------------


class ToolError(HippobotError):
    """A tool refused or failed; the message is returned to the model as the result."""


# --- the disk failed --------------------------------------------------------------


class StorageError(HippobotError):
    """A write to the workspace failed (disk full, read-only); nothing was truncated."""
