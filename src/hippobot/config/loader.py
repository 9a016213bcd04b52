"""Load settings once, at the edge: defaults < config file < environment < flags (SPEC 2).

Core code receives a :class:`Settings` object and never reads ``os.environ`` itself.
``config.json`` may carry ``//`` line comments (the starter file written by ``onboard`` is
commented); everything else is strict JSON, and a mistake is reported as one line naming the
file, the line and the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ValidationError

from hippobot.atomic import atomic_write_text
from hippobot.config.keys import KeyReport, brief_paths, drop_nulls, walk_keys
from hippobot.config.providers import find_entry, find_spec, match_provider, wire_model
from hippobot.config.schema import AgentDefaults, Config, ProviderConfig, reply_tokens
from hippobot.errors import ConfigError, NoModelConfiguredError, StorageError, UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.workspace import SESSION_SUFFIX, Home, NanobotFiles

__all__ = [
    "KNOWN_ENDPOINTS",
    "ModelTarget",
    "Settings",
    "is_nanobot_workspace",
    "load_config",
    "load_settings",
    "strip_json_comments",
]

log = logging.getLogger(__name__)

# Default base URLs by provider name: vendors differ by data, not by code.
KNOWN_ENDPOINTS: dict[str, str | None] = {
    "openai": None,  # the SDK's default
    "anthropic": None,
    "openrouter": "https://openrouter.ai/api/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "llamacpp": "http://localhost:8080/v1",
}
_LOCAL_PROVIDERS = {"ollama", "vllm", "llamacpp"}
NANOBOT_NOTE = "nanobot settings not used by hippobot"
"""How the warning about a copied nanobot file's unused settings starts (shown once per
version of the file: :func:`_show_once`)."""
_LOCAL_HOST = lazy_compile(r"^https?://(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?(/|$)")


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """Which endpoint and model a command talks to."""

    kind: Literal["openai", "anthropic"]
    provider: str
    model: str
    api_key: str
    api_base: str | None
    extra_headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None  # providers.<name>.timeout; None: the provider's default


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a command runs with, resolved once by :func:`load_settings` and frozen:
    the configuration models are frozen too, and ``env`` and ``flags`` are read-only views.
    A variant for one run (another workspace, other defaults) is a new object:
    ``dataclasses.replace(settings, workspace=...)`` or :meth:`with_defaults`."""

    home: Path
    workspace: Path
    config: Config
    config_path: Path
    env: Mapping[str, str]
    flags: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    nanobot_workspace: Path | None = None
    """The nanobot workspace the configuration named, when it named one: hippobot reads it
    in and never writes there (``workspace`` is then hippobot's own, ``<home>/workspace``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "flags", MappingProxyType(dict(self.flags)))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    @property
    def defaults(self) -> AgentDefaults:
        return self.config.agents.defaults

    def with_defaults(self, **changes: Any) -> Settings:
        """A copy whose ``agents.defaults`` fields (snake_case names) are replaced."""
        return replace(self, config=_with_defaults(self.config, changes))

    def secrets(self) -> list[str]:
        """Every configured API key, so writers can redact them from memory and logs."""
        keys = [p.api_key for p in self.config.providers.values() if p.api_key]
        for name in ("HIPPOBOT_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HIPPOBOT_SERVE_KEY"):
            if self.env.get(name):
                keys.append(self.env[name])
        if self.config.serve.api_key:
            keys.append(self.config.serve.api_key)
        keys += [u.api_key for u in self.config.serve.users.values() if u.api_key]
        keys.extend(_serve_token(self.home))
        return [k for k in keys if len(k) >= 8]

    def model_configured(self) -> bool:
        try:
            self.model_target()
        except UserError:
            return False
        return True

    def model_target(self, *, model: str | None = None) -> ModelTarget:
        """Resolve the endpoint; raises :class:`NoModelConfiguredError` when there is none."""
        return _resolve_target(self, model_override=model)


def _serve_token(home: Path) -> list[str]:
    """The token ``hippobot serve`` made for this install (``<home>/serve-token``), if any."""
    path = Home(home).serve_token
    try:
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_size < 1024:
            return [path.read_text(encoding="utf-8").strip()]
    except (OSError, UnicodeDecodeError):
        pass
    return []


# --- config file ------------------------------------------------------------------


def strip_json_comments(text: str) -> str:
    """Remove ``//`` comments outside strings, keeping line numbers intact."""
    out: list[str] = []
    in_str = esc = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _line_of_key(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort line number of the last string key in a pydantic error location."""
    for part in reversed(loc):
        if isinstance(part, str):
            m = re.search(rf'"{re.escape(part)}"\s*:', text)
            if m:
                return text.count("\n", 0, m.start()) + 1
    return None


def load_config(path: Path) -> tuple[Config, list[str]]:
    """Parse ``config.json``; returns the config and warnings about unknown keys."""
    if not path.exists():
        return Config(), []
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the config file ({exc})", path=str(path)) from exc
    return parse_config(raw, path)


def parse_config(raw: str, path: Path) -> tuple[Config, list[str]]:
    """:func:`load_config` of the text ``raw``, as if read from ``path`` (the path names the
    file in messages and places a preset's relative paths)."""
    text = strip_json_comments(raw)
    if not text.strip():
        return Config(), []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"invalid JSON: {exc.msg} (column {exc.colno}); fix the file or delete it and run "
            "`hippobot onboard`",
            path=str(path),
            line=exc.lineno,
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a JSON object", path=str(path), line=1)
    data = drop_nulls(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(
            f"key {key}: {err['msg']}", path=str(path), line=_line_of_key(text, err["loc"])
        ) from exc
    config = _apply_preset(config, path, text)
    _check_values(config, path, text)
    return config, key_warnings(path, walk_keys(data, Config))


def _apply_preset(config: Config, path: Path, text: str) -> Config:
    """``modelPreset`` names an entry of ``modelPresets`` whose fields replace the defaults'
    (as in nanobot, where ``"default"`` means the fields of ``agents.defaults`` themselves).
    A Dream ``modelOverride`` naming a preset becomes that preset's model. Returns the
    resolved copy (the configuration is frozen)."""
    defaults = config.agents.defaults
    presets = config.model_presets
    name = defaults.model_preset
    changes: dict[str, Any] = {}
    if name and name != "default":
        preset = presets.get(name)
        if preset is None:
            known = ", ".join(sorted(presets)) or "none defined"
            raise ConfigError(
                f"key agents.defaults.modelPreset: no preset {name!r} under modelPresets "
                f"({known})",
                path=str(path), line=_line_of_key(text, ("modelPreset",)),
            )
        changes.update(
            model=preset.model,
            provider=preset.provider,
            max_tokens=preset.max_tokens,
            context_window_tokens=preset.context_window_tokens,
            temperature=preset.temperature,
        )
    dream = defaults.dream
    if dream.model_override and dream.model_override in presets:
        changes["dream"] = dream.model_copy(
            update={"model_override": presets[dream.model_override].model}
        )
    elif dream.model_override == "default":
        changes["dream"] = dream.model_copy(update={"model_override": None})
    if not changes:
        return config
    return _with_defaults(config, changes)


def _with_defaults(config: Config, changes: Mapping[str, Any]) -> Config:
    """A copy of ``config`` with fields of ``agents.defaults`` replaced (snake_case names)."""
    agents = config.agents
    defaults = agents.defaults.model_copy(update=dict(changes))
    return config.model_copy(
        update={"agents": agents.model_copy(update={"defaults": defaults})}
    )


def _check_values(config: Config, path: Path, text: str) -> None:
    """Values each valid alone that cannot work together (one line naming the key)."""
    defaults = config.agents.defaults
    window = defaults.context_window_tokens
    preset = defaults.model_preset
    where = f"modelPresets.{preset}" if preset and preset != "default" else "agents.defaults"
    if window and defaults.max_tokens is not None and defaults.max_tokens >= window:
        raise ConfigError(
            f"key {where}.maxTokens: {defaults.max_tokens} leaves no room for the prompt in "
            f"contextWindowTokens {window}; {_working_reply(window)}",
            path=str(path), line=_line_of_key(text, ("maxTokens",)),
        )
    for name, entry in config.model_presets.items():
        entry_window = entry.context_window_tokens
        if entry_window and entry.max_tokens is not None and entry.max_tokens >= entry_window:
            raise ConfigError(
                f"key modelPresets.{name}.maxTokens: {entry.max_tokens} leaves no room for the "
                f"prompt in its contextWindowTokens {entry_window}; {_working_reply(entry_window)}",
                path=str(path), line=_line_of_key(text, (name,)),
            )
    cron = defaults.dream.cron
    if cron:
        from croniter import croniter

        if not croniter.is_valid(cron):
            raise ConfigError(
                f"key agents.defaults.dream.cron: {cron!r} is not a cron expression "
                "(five fields, e.g. \"0 */2 * * *\")",
                path=str(path), line=_line_of_key(text, ("cron",)),
            )
    if defaults.timezone:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(defaults.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"key agents.defaults.timezone: unknown time zone {defaults.timezone!r} "
                "(use an IANA name such as Europe/Paris)",
                path=str(path), line=_line_of_key(text, ("timezone",)),
            ) from None


def _working_reply(window: int) -> str:
    """The fix for a reply reserve that does not fit: the value an unset key would take."""
    return (
        f"set maxTokens to {reply_tokens(None, window)} (a quarter of the window) or less, "
        "or remove it (null) to follow the window"
    )


def key_warnings(path: Path, report: KeyReport) -> list[str]:
    """One line per unknown key, and one line for all nanobot-only settings."""
    lines = []
    for key, closest in report.unknown:
        hint = f"; did you mean {closest}?" if closest else " (check its spelling)"
        lines.append(f"{path}: unknown key {key} ignored{hint}")
    if report.nanobot_only:
        lines.append(
            f"{path}: {NANOBOT_NOTE} (ignored): " + brief_paths(report.nanobot_only)
        )
    return lines


# --- settings -----------------------------------------------------------------------


def load_settings(
    env: Mapping[str, str] | None = None,
    *,
    workspace: str | Path | None = None,
    model: str | None = None,
    provider: str | None = None,
) -> Settings:
    """Resolve home, workspace and config with the SPEC 2 precedence."""
    env = dict(os.environ if env is None else env)
    home = Path(env.get("HIPPOBOT_HOME") or Home.default()).expanduser()
    config_path = Home(home).config
    config, warnings = load_config(config_path)
    for w in warnings:
        if NANOBOT_NOTE not in w:
            log.warning(w)
        elif _show_once(home, config_path):
            log.warning("%s; shown once until the file changes", w)

    ws = (
        workspace
        or env.get("HIPPOBOT_WORKSPACE")
        or config.agents.defaults.workspace
        or Home(home).default_workspace
    )
    ws_path = Path(ws).expanduser()
    nanobot: Path | None = None
    if is_nanobot_workspace(ws_path):  # read in, never written: hippobot works in its own
        nanobot, ws_path = ws_path.resolve(), Home(home).default_workspace
    if ws_path.exists() and not ws_path.is_dir():
        raise UserError(f"workspace {ws_path} is not a directory: pass --workspace DIR")
    flags = {k: v for k, v in {"model": model, "provider": provider}.items() if v}
    return Settings(
        home=home,
        workspace=ws_path.resolve(),
        config=config,
        config_path=config_path,
        env=env,
        flags=flags,
        warnings=tuple(warnings),
        nanobot_workspace=nanobot,
    )


def is_nanobot_workspace(path: Path) -> bool:
    """Whether ``path`` is a workspace nanobot made (and keeps using): a folder under
    ``.nanobot``, or one holding nanobot's marks (``.nanobot/``, ``HEARTBEAT.md``, or a
    session file directly in ``sessions/``, where hippobot never puts one). A few ``stat``
    calls and one directory listing."""
    if NanobotFiles.DIR in path.parts:
        return True
    folder, heartbeat = NanobotFiles.workspace_marks(path)
    try:
        if folder.is_dir() or heartbeat.is_file():
            return True
        sessions = NanobotFiles.legacy_sessions(path)
        return sessions.is_dir() and any(p.is_file() for p in sessions.glob(f"*{SESSION_SUFFIX}"))
    except OSError:
        return False


def _show_once(home: Path, config_path: Path) -> bool:
    """True the first time this version of the config file is seen (its SHA-256 is kept in
    ``<home>/.hippobot/config-noted``); also when that cannot be recorded, so a note is never
    lost on a read-only home."""
    try:
        digest = hashlib.sha256(config_path.read_bytes()).hexdigest()
    except OSError:
        return True
    noted = Home(home).config_noted
    try:
        if noted.read_text(encoding="ascii").strip() == digest:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    try:
        noted.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(noted, digest + "\n")
    except (OSError, StorageError):
        pass
    return True


def _infer_provider(settings: Settings, model: str) -> str | None:
    env, providers = settings.env, settings.config.providers
    if settings.flags.get("provider"):
        return settings.flags["provider"]
    if env.get("HIPPOBOT_PROVIDER"):
        return env["HIPPOBOT_PROVIDER"]
    configured_name = settings.config.agents.defaults.provider
    if configured_name and configured_name != "auto":
        found = find_entry(providers, configured_name)
        return found[0] if found else configured_name
    looks_claude = model.startswith(("claude", "anthropic/"))
    if looks_claude and not model.startswith("anthropic/") and (
        env.get("ANTHROPIC_API_KEY") or "anthropic" in providers
    ):
        return "anthropic"
    matched = match_provider(model, providers)
    if matched:
        return matched
    if env.get("HIPPOBOT_API_BASE") or env.get("HIPPOBOT_API_KEY"):
        return "openai"
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        return "openai"
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    return None


def _resolve_target(settings: Settings, *, model_override: str | None) -> ModelTarget:
    env = settings.env
    model = (
        model_override
        or settings.flags.get("model")
        or env.get("HIPPOBOT_MODEL")
        or settings.config.agents.defaults.model
    )
    name = _infer_provider(settings, model or "")
    if not model or not name:
        raise NoModelConfiguredError(str(settings.config_path))
    spec = find_spec(name)
    if spec is not None and spec.backend == "unsupported":
        raise UserError(
            f"provider {name!r} needs an API hippobot does not speak: use an OpenAI-compatible "
            f"or Anthropic endpoint (set agents.defaults.provider in {settings.config_path})"
        )
    kind: Literal["openai", "anthropic"] = (
        "anthropic" if spec is not None and spec.backend == "anthropic" else "openai"
    )
    found = find_entry(settings.config.providers, name)
    pconf = found[1] if found else ProviderConfig()
    api_base = env.get("HIPPOBOT_API_BASE") or (
        env.get("OPENAI_BASE_URL") if name == "openai" else None
    ) or pconf.api_base or KNOWN_ENDPOINTS.get(name) or (spec.api_base if spec else None)
    if name not in KNOWN_ENDPOINTS and not api_base:
        raise UserError(
            f"provider {name!r} has no apiBase: set providers.{name}.apiBase in "
            f"{settings.config_path} or HIPPOBOT_API_BASE"
        )
    vendor_key_var = "ANTHROPIC_API_KEY" if kind == "anthropic" else "OPENAI_API_KEY"
    api_key = env.get("HIPPOBOT_API_KEY") or pconf.api_key or env.get(vendor_key_var)
    if not api_key:
        local = name in _LOCAL_PROVIDERS or (spec is not None and (spec.local or spec.direct))
        if local or (api_base and _LOCAL_HOST.match(api_base)):
            api_key = "not-needed"  # local servers ignore the key but the SDKs require one
        else:
            raise UserError(
                f"no API key for provider {name!r}: set HIPPOBOT_API_KEY (or {vendor_key_var}) "
                f"or providers.{name}.apiKey in {settings.config_path}"
            )
    return ModelTarget(
        kind=kind,
        provider=name,
        model=wire_model(name, model),
        api_key=api_key,
        api_base=api_base,
        extra_headers=dict(pconf.extra_headers),
        timeout=pconf.timeout,
    )
