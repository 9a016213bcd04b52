"""``hippobot import nanobot``: bring a nanobot home (0.2.x or 0.3.x layout) into hippobot's.

nanobot's files are only ever read (``open(..., "rb")``, directory listings, file copies);
nothing there is written, renamed or locked, so nanobot keeps working on them. They are read
through :mod:`hippobot.safeio`: a symbolic link that leads out of nanobot's home (or its
workspace) is skipped and reported, so a link planted there cannot pull hippobot's own
config or keys, or anyone else's files, into the workspace.

What is brought, and how a second run adds only what is new:

* ``config.json``: the keys hippobot reads, secrets included (never printed), written when
  hippobot has no config yet or only the untouched starter file from ``onboard``.
* Workspace files (AGENTS/SOUL/USER.md, ``memory/MEMORY.md``, ``skills/``,
  ``prompts/dream.md``, ``memory/HISTORY.md``): copied when missing here or still hippobot's
  template; a file both sides changed is kept as it is here and reported.
* ``memory/history.jsonl``: copied, or extended with the entries nanobot added since, when
  hippobot's copy is a prefix of nanobot's; the cursors take the larger value.
* The memory history (nanobot's git store, ``<workspace>/.git``): copied when hippobot's
  workspace has none, or only the ``init`` commit of a fresh ``onboard`` (moved aside to
  ``.hippobot/git-before-import``).
* Sessions from both layouts under their original keys: 0.3.x keeps them at
  ``<home>/sessions/<workspace-id>/<base64url(key)>.jsonl`` (the id in
  ``<workspace>/.nanobot/workspace-id``), 0.2.x at ``<workspace>/sessions/<key with : as
  _>.jsonl``. A session here whose messages are a prefix of nanobot's gets the new ones
  appended; one that diverged is kept and reported. nanobot's internal ``dream:<time>``
  sessions (one per Dream run) are skipped.

:func:`bring_in` runs the same steps (config aside) at the start of every command when the
configuration names a nanobot workspace (a copied ``config.json``, ``--workspace``,
``HIPPOBOT_WORKSPACE``): hippobot then works in its own workspace and never writes nanobot's.
It remembers what it saw (``.hippobot/nanobot-sync.json``), so a file nanobot changed later
replaces hippobot's copy when hippobot left that copy alone, each conflict is reported once,
and a command finding nothing changed at nanobot's opens none of its files.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from hippobot.atomic import atomic_write_bytes, atomic_write_text
from hippobot.config import Settings
from hippobot.config.keys import drop_nulls, group_paths, known_subset, walk_keys
from hippobot.config.loader import parse_config, strip_json_comments
from hippobot.config.schema import Config
from hippobot.context.loader import template_versions
from hippobot.errors import ConfigError, UserError
from hippobot.locks import locked
from hippobot.safeio import LinkOutside, open_fd, read_regular
from hippobot.session.legacy import MIGRATED_FROM, header_key, read_legacy, source_stamp
from hippobot.session.store import JsonlSessionStore
from hippobot.workspace import (
    AGENTS_MD,
    CONFIG_FILE,
    CURSOR,
    DREAM_CURSOR,
    DREAM_GUIDE,
    HISTORY,
    LEGACY_HISTORY,
    MEMORY_MD,
    SESSION_SUFFIX,
    SOUL_MD,
    TEMPLATE_FILES,
    USER_MD,
    NanobotFiles,
    Workspace,
)

__all__ = [
    "ImportReport",
    "NanobotHome",
    "bring_in",
    "describe_bring_in",
    "find_home",
    "home_of",
    "import_nanobot",
    "map_config",
]

log = logging.getLogger(__name__)

Seen = dict[str, Any]
"""What a reading-in saw of nanobot's files last time (``Workspace.nanobot_sync``):
``files`` (path -> SHA-256), ``history`` (SHA-256), ``git`` (HEAD), ``sessions`` (key ->
[size, mtime_ns]), so each thing nanobot changed is looked at and reported once."""

# What nanobot's workspace has as hippobot's does (the names are hippobot's: Workspace).
WORKSPACE_FILES = (AGENTS_MD, SOUL_MD, USER_MD, MEMORY_MD, LEGACY_HISTORY, DREAM_GUIDE)
CURSOR_FILES = (CURSOR, DREAM_CURSOR)
NOT_USED = ((NanobotFiles.heartbeat, "hippobot has no heartbeat"),)
INTERNAL_PREFIXES = ("dream:",)
_TEMPLATES = TEMPLATE_FILES


@dataclass(slots=True)
class ImportReport:
    brought: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"brought  {item}" for item in self.brought]
        out += [f"skipped  {item}" for item in self.skipped]
        if self.brought:
            out.append(f"Done: {len(self.brought)} brought over; nanobot's files were only read.")
        else:
            out.append("Nothing new: hippobot already has everything from this nanobot home.")
        return out


@dataclass(frozen=True, slots=True)
class NanobotHome:
    root: Path
    config: dict[str, Any]
    workspace: Path
    layout: Literal["0.2.x", "0.3.x"]

    @property
    def files(self) -> NanobotFiles:
        return NanobotFiles(self.root)

    @property
    def config_path(self) -> Path:
        return self.files.config


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read nanobot's config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"nanobot's config {path} is not a JSON object")
    return data


def find_home(path: Path) -> NanobotHome:
    """Recognise a nanobot home (``config.json`` and/or ``workspace/``) and its workspace."""
    root = path.expanduser()
    files = NanobotFiles(root)
    config_path = files.config
    if not root.is_dir() or not (config_path.is_file() or files.default_workspace.is_dir()):
        raise UserError(
            f"no nanobot home at {root} (expected config.json or workspace/ there): "
            "pass the folder nanobot uses, e.g. `hippobot import nanobot ~/.nanobot`"
        )
    config = _read_json(config_path) if config_path.is_file() else {}
    workspace = _workspace_of(root, config)
    return NanobotHome(root=root, config=config, workspace=workspace, layout=_layout(root, workspace))


def _layout(root: Path, workspace: Path) -> Literal["0.2.x", "0.3.x"]:
    """0.3.x keeps a workspace id and the sessions in the home; 0.2.x in the workspace."""
    if NanobotFiles.workspace_id(workspace).is_file() or _namespaces(NanobotFiles(root).sessions_root):
        return "0.3.x"
    return "0.2.x"


def _workspace_of(root: Path, config: dict[str, Any]) -> Path:
    """nanobot's ``agents.defaults.workspace``; ``~/.nanobot/...`` is read relative to the
    home being imported (which need not be the current user's)."""
    defaults = (config.get("agents") or {}).get("defaults") or {}
    configured = defaults.get("workspace") if isinstance(defaults, dict) else None
    if isinstance(configured, str) and configured:
        mine = f"~/{NanobotFiles.DIR}"
        if configured == mine or configured.startswith(f"{mine}/"):
            candidate = root / configured[len(mine) + 1:]
        else:
            candidate = Path(configured).expanduser()
        if candidate.is_dir():
            return candidate
    return NanobotFiles(root).default_workspace


def _namespaces(sessions_root: Path) -> list[Path]:
    if not sessions_root.is_dir():
        return []
    return sorted(p for p in sessions_root.iterdir() if p.is_dir() and not p.is_symlink())


# --- config -------------------------------------------------------------------------


def map_config(raw: dict[str, Any]) -> dict[str, Any]:
    """nanobot's config as hippobot's: only the keys hippobot reads, no placeholders.

    The workspace is not carried (hippobot keeps its own), nor a ``timezone`` nanobot
    detected itself (``timezoneMode: auto``), nor providers with neither key nor base URL.
    """
    data = known_subset(drop_nulls(raw), Config)
    defaults = (data.get("agents") or {}).get("defaults") or {}
    defaults.pop("workspace", None)
    raw_defaults = ((raw.get("agents") or {}).get("defaults")) or {}
    if isinstance(raw_defaults, dict) and raw_defaults.get("timezoneMode", "auto") == "auto":
        defaults.pop("timezone", None)
    providers = {}
    for name, entry in (data.get("providers") or {}).items():
        entry = {k: v for k, v in entry.items() if v not in ("", {}, [])}
        if entry.get("apiKey") or entry.get("api_key") or entry.get("apiBase") or entry.get("api_base"):
            providers[name] = entry
    data["providers"] = providers
    return _prune(data)


def _prune(value: Any) -> Any:
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v != {}}
    return value


def _import_config(home: NanobotHome, settings: Settings, report: ImportReport) -> None:
    if not home.config:
        report.skipped.append(f"config.json (none in {home.root})")
        return
    mapped = map_config(home.config)
    unused = walk_keys(drop_nulls(home.config), Config)
    target = settings.config_path
    if target.exists() and target.read_bytes() not in (_starter_config(), _dumps(mapped)):
        report.skipped.append(f"config.json (kept {target}; yours differs from nanobot's)")
        return
    if target.exists() and target.read_bytes() == _dumps(mapped):
        return
    data = _dumps(mapped)
    try:  # checked before it is written: a config that does not load is never installed
        config, _warnings = parse_config(data.decode("utf-8"), target)
    except ConfigError as exc:
        report.skipped.append(f"config.json (nanobot's values do not work here: {exc})")
        return
    atomic_write_bytes(target, data, mode=0o600)  # it carries the API keys
    keys = sum(1 for p in config.providers.values() if p.api_key)
    d = config.agents.defaults
    report.brought.append(
        f"config.json (model {d.model or '-'}, provider {d.provider or 'auto'}; "
        f"{keys} API key(s) carried, not shown)"
    )
    if unused.nanobot_only:
        report.skipped.append(
            "nanobot settings hippobot does not use: " + group_paths(unused.nanobot_only)
        )


def _dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _starter_config() -> bytes:
    return _template_bytes(CONFIG_FILE)


def _template_bytes(name: str) -> bytes:
    try:
        return resources.files("hippobot").joinpath("templates", name).read_bytes()
    except (FileNotFoundError, OSError):
        return b""


# --- workspace files ----------------------------------------------------------------


def _write_bytes(path: Path, data: bytes) -> None:
    """Replace hippobot's copy whole: a failure leaves the previous file as it was."""
    atomic_write_bytes(path, data)


def _theirs(src: Path, within: Path, label: str, report: ImportReport) -> bytes | None:
    """nanobot's file ``src`` (inside ``within``); None, reported, if it is a link out."""
    try:
        return read_regular(src, within=within)
    except LinkOutside as exc:
        report.skipped.append(f"{label} ({exc.strerror})")
        return None


def _ours(dst: Path, workspace: Path) -> bytes:
    return read_regular(dst, within=workspace)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _copy_file(src: Path, dst: Path, label: str, report: ImportReport, *, within: Path,
               workspace: Path, seen: Seen | None = None) -> None:
    """Copy when hippobot's file is missing or still hippobot's template; with ``seen`` (a
    reading-in), also when hippobot's is still what was last brought and nanobot's changed,
    and a file nanobot has not changed since is not looked at again."""
    data = _theirs(src, within, label, report)
    if data is None:
        return
    digest = _digest(data)
    files = seen.setdefault("files", {}) if seen is not None else {}
    last = files.get(label)
    if seen is not None and last == digest:
        return
    files[label] = digest
    if dst.exists():
        here = _ours(dst, workspace)
        if here == data:
            return
        untouched = (label in _TEMPLATES and here in [t.encode() for t in template_versions(label)]) or (
            last is not None and _digest(here) == last
        )
        if not untouched:
            report.skipped.append(f"{label} (kept hippobot's; it differs from nanobot's)")
            return
    _write_bytes(dst, data)
    report.brought.append(label)


def _import_history(src: Path, dst: Path, report: ImportReport, *, within: Path,
                    workspace: Path, seen: Seen | None = None) -> None:
    label = HISTORY
    data = _theirs(src, within, label, report)
    if data is None:
        return
    if seen is not None:
        if seen.get("history") == _digest(data):
            return
        seen["history"] = _digest(data)
    if not dst.exists():
        _write_bytes(dst, data)
        report.brought.append(f"{label} ({_lines(data)} entries)")
        return
    here = _ours(dst, workspace)
    if here == data:
        return
    if data.startswith(here) and (not here or here.endswith(b"\n")):
        tail = data[len(here):]
        fd = open_fd(dst, within=workspace, flags=os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "ab") as handle:
            handle.write(tail)
        report.brought.append(f"{label} (+{_lines(tail)} new entries)")
        return
    report.skipped.append(f"{label} (kept hippobot's; both have entries the other lacks)")


def _lines(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


def _import_cursor(src: Path, dst: Path, label: str, report: ImportReport, *, within: Path,
                   workspace: Path) -> None:
    def value(path: Path, root: Path) -> int | None:
        try:
            return int(read_regular(path, 64, within=root).decode("utf-8").strip())
        except (OSError, ValueError):
            return None

    theirs, ours = value(src, within), value(dst, workspace)
    if theirs is None or (ours is not None and ours >= theirs):
        return
    _write_bytes(dst, str(theirs).encode("ascii"))
    report.brought.append(f"{label} ({theirs})")


def _import_workspace_files(
    home: NanobotHome, workspace: Path, report: ImportReport, seen: Seen | None = None
) -> None:
    src_ws = home.workspace
    theirs, ours = Workspace(src_ws), Workspace(workspace)
    roots = {"within": src_ws, "workspace": workspace}
    for rel in WORKSPACE_FILES:
        if (theirs / rel).is_file():
            _copy_file(theirs / rel, ours / rel, rel, report, **roots, seen=seen)
    skills = theirs.skills_dir
    if skills.is_dir():
        for path in sorted(skills.rglob("*")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(src_ws).as_posix()
                _copy_file(path, workspace / rel, rel, report, **roots, seen=seen)
    if theirs.history.is_file():
        _import_history(theirs.history, ours.history, report, **roots, seen=seen)
    for rel in CURSOR_FILES:
        if (theirs / rel).is_file():
            _import_cursor(theirs / rel, ours / rel, rel, report, **roots)
    if seen is not None:
        return  # reading in: what hippobot does not use was named by the import, if ever
    for where, why in NOT_USED:
        if (path := where(src_ws)).exists():
            report.skipped.append(f"{path.relative_to(src_ws).as_posix()} ({why})")
    jobs = home.files.cron_jobs
    if jobs.is_file() and jobs.stat().st_size > 0:
        report.skipped.append(f"scheduled jobs in {jobs} (hippobot does not run nanobot's cron jobs)")


# --- memory history (git) -----------------------------------------------------------


def _head_commit(gitdir: Path) -> str | None:
    """HEAD's commit id, read from the files (nanobot's repository is never opened by git)."""
    try:
        head = (gitdir / "HEAD").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not head.startswith("ref: "):
        return head or None
    ref = head[5:]
    try:
        return (gitdir / ref).read_text(encoding="ascii").strip()
    except OSError:
        pass
    try:
        for line in (gitdir / "packed-refs").read_text(encoding="ascii").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref:
                return parts[0]
    except OSError:
        pass
    return None


def _has_object(gitdir: Path, sha: str) -> bool:
    if (gitdir / "objects" / sha[:2] / sha[2:]).is_file():
        return True
    # Packed objects: the pack index lists every object it holds.
    raw = bytes.fromhex(sha) if len(sha) == 40 else b""
    packs = gitdir / "objects" / "pack"
    return bool(raw) and packs.is_dir() and any(
        raw in idx.read_bytes() for idx in packs.glob("*.idx")
    )


def _only_init_commit(workspace: Path) -> bool:
    from hippobot.memory.gitstore import INIT_MESSAGE, GitStore

    try:
        log = GitStore(workspace).log(limit=2)
    except Exception:  # an unreadable repository is not ours to replace
        return False
    return len(log) == 1 and log[0].subject == INIT_MESSAGE


def _import_git(home: NanobotHome, workspace: Path, report: ImportReport, seen: Seen | None = None) -> None:
    src = Workspace(home.workspace).git_dir
    if not src.is_dir():
        if seen is None:
            report.skipped.append("memory history (nanobot's workspace has no git store)")
        return
    theirs = _head_commit(src)
    if seen is not None:
        if seen.get("git") == theirs:
            return
        seen["git"] = theirs
    ours = Workspace(workspace)
    dst = ours.git_dir
    if dst.exists():
        if theirs and _has_object(dst, theirs):
            return  # already imported (and maybe continued here)
        if not _only_init_commit(workspace):
            report.skipped.append(
                f"memory history (kept hippobot's; nanobot's stays in {src})"
            )
            return
        aside = ours.git_before_import
        if aside.exists():
            shutil.rmtree(aside)
        aside.parent.mkdir(parents=True, exist_ok=True)
        os.replace(dst, aside)
    shutil.copytree(src, dst, symlinks=True)
    ignore = Workspace(home.workspace).gitignore
    if ignore.is_file() and not ours.gitignore.exists():
        shutil.copyfile(ignore, ours.gitignore)
    from hippobot.memory.gitstore import GitStore

    try:
        commits = len(GitStore(workspace).log(limit=10_000))
        report.brought.append(f"memory history ({commits} commits, from {src})")
    except Exception as exc:
        report.brought.append(f"memory history (copied, but it does not read: {exc})")


# --- sessions -----------------------------------------------------------------------


def _key_from_stem(stem: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(stem + "=" * (-len(stem) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _session_files(home: NanobotHome, report: ImportReport | None) -> dict[str, Path]:
    """key -> nanobot file, the 0.3.x namespace winning over 0.2.x files for one key."""
    found: dict[str, Path] = {}
    legacy_dir = NanobotFiles.legacy_sessions(home.workspace)
    if legacy_dir.is_dir():
        for path in sorted(legacy_dir.glob(f"*{SESSION_SUFFIX}")):
            key = header_key(path, within=home.workspace) if path.is_file() else None
            if key:
                found[key] = path
    namespaces = _namespaces(home.files.sessions_root)
    if namespaces:
        mine = _namespace_of(home, namespaces)
        for ns in namespaces:
            if ns != mine and report is not None:
                marker = NanobotFiles.namespace_marker(ns)
                where = marker.read_text(encoding="utf-8").strip() if marker.is_file() else ns.name
                count = len(list(ns.glob(f"*{SESSION_SUFFIX}")))
                report.skipped.append(f"{count} session(s) of another nanobot workspace ({where})")
        if mine is not None:
            for path in sorted(mine.glob(f"*{SESSION_SUFFIX}")):
                if path.is_file():
                    key = header_key(path, within=home.root) or _key_from_stem(path.stem)
                    if key:
                        found[key] = path
    return found


def _namespace_of(home: NanobotHome, namespaces: list[Path]) -> Path | None:
    id_file = NanobotFiles.workspace_id(home.workspace)
    if id_file.is_file():
        ns = home.files.sessions_root / id_file.read_text(encoding="utf-8").strip()
        if ns in namespaces:
            return ns
    for ns in namespaces:
        marker = NanobotFiles.namespace_marker(ns)
        if marker.is_file() and Path(marker.read_text(encoding="utf-8").strip()) == home.workspace:
            return ns
    return namespaces[0] if len(namespaces) == 1 else None


def _comparable(messages: list[Any]) -> list[str]:
    return [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in messages]


def _import_sessions(home: NanobotHome, workspace: Path, report: ImportReport, seen: Seen | None = None) -> None:
    files = _session_files(home, report if seen is None else None)
    internal = [k for k in files if k.startswith(INTERNAL_PREFIXES)]
    if internal and seen is None:
        report.skipped.append(f"{len(internal)} internal nanobot Dream session(s)")
    store = JsonlSessionStore(workspace)
    stamps = seen.setdefault("sessions", {}) if seen is not None else {}
    for key, path in sorted(files.items()):
        if key.startswith(INTERNAL_PREFIXES):
            continue
        if seen is not None:  # reading in: a file nanobot has not touched since is skipped
            info = path.stat()
            stamp = [info.st_size, info.st_mtime_ns]
            if stamps.get(key) == stamp:
                continue
            stamps[key] = stamp
        within = home.workspace if path.is_relative_to(home.workspace) else home.root
        try:
            theirs = read_legacy(path, key, within=within)
        except LinkOutside as exc:
            report.skipped.append(f"session {key} ({exc.strerror})")
            continue
        ours = store.load(key)
        if ours is None:
            theirs.updated_at = theirs.updated_at or theirs.created_at
            store.rewrite(theirs)
            report.brought.append(f"session {key} ({len(theirs.messages)} messages)")
            continue
        mine, new = _comparable(ours.messages), _comparable(theirs.messages)
        if mine == new:
            continue
        if new[: len(mine)] == mine:
            tail = theirs.messages[len(mine):]
            store.append(ours, [ours.add(m) for m in tail])
            ours.metadata[MIGRATED_FROM] = source_stamp(path)
            store.save_meta(ours)
            report.brought.append(f"session {key} (+{len(tail)} new messages)")
            continue
        report.skipped.append(
            f"session {key} (kept hippobot's: both hippobot and nanobot added to it since)"
        )


# --- the whole import ---------------------------------------------------------------


def import_nanobot(source: Path, settings: Settings) -> tuple[NanobotHome, ImportReport]:
    """Bring ``source`` (a nanobot home) into ``settings``' home and workspace."""
    home = find_home(source)
    target = settings.workspace
    if home.workspace.resolve() == target.resolve():
        raise UserError(
            f"hippobot's workspace is nanobot's ({target}): set HIPPOBOT_WORKSPACE or "
            "--workspace to import into a separate one"
        )
    report = ImportReport()
    _import_config(home, settings, report)
    target.mkdir(parents=True, exist_ok=True)
    _import_git(home, target, report)
    _import_workspace_files(home, target, report)
    _import_sessions(home, target, report)
    from hippobot.agent.onboarding import ensure_workspace
    from hippobot.memory.gitstore import GitStore

    ensure_workspace(target)
    GitStore(target).init()
    return home, report


# --- reading a nanobot workspace in (a copied config, --workspace) ------------------


def home_of(workspace: Path) -> Path:
    """The nanobot home a workspace belongs to: the nearest ``.nanobot`` folder above it
    (0.3.x keeps sessions there), else the folder above the workspace."""
    for parent in workspace.parents:
        if parent.name == NanobotFiles.DIR:
            return parent
    return workspace.parent


def _stamp(home: NanobotHome) -> str:
    """Sizes and modification times of everything a reading-in looks at, as one digest: when
    it is unchanged, nanobot changed nothing and no file needs to be opened."""
    ws = Workspace(home.workspace)
    paths = [ws / rel for rel in (*WORKSPACE_FILES, *CURSOR_FILES, HISTORY)]
    paths += [ws.git_dir / "HEAD", ws.git_dir / "packed-refs"]
    for folder, pattern in (
        (ws.skills_dir, "**/*"), (ws.git_dir / "refs", "**/*"),
        (NanobotFiles.legacy_sessions(ws.root), f"*{SESSION_SUFFIX}"),
        (home.files.sessions_root, f"*/*{SESSION_SUFFIX}"),
    ):
        if folder.is_dir():
            paths += sorted(folder.glob(pattern))
    parts = []
    for path in paths:
        try:
            info = path.stat()
            parts.append(f"{path}\0{info.st_size}\0{info.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}\0-")
    return _digest("\n".join(parts).encode("utf-8", "surrogateescape"))


_RECORD_FORMAT = 1  # {"v": 1, "sources": {nanobot workspace: {"stamp": ..., "seen": Seen}}}


def _records(path: Path) -> dict[str, Any]:
    """Every source's entry; an unreadable or other-format record is as good as none (it is
    derived state: the next reading-in compares the files again and rewrites it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("v") != _RECORD_FORMAT:
        return {}
    sources = data.get("sources")
    return sources if isinstance(sources, dict) else {}


def _read_record(path: Path, source: Path) -> dict[str, Any]:
    entry = _records(path).get(str(source))
    return entry if isinstance(entry, dict) else {}


def _write_record(path: Path, source: Path, entry: dict[str, Any]) -> None:
    sources = {**_records(path), str(source): entry}
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"v": _RECORD_FORMAT, "sources": sources}
    atomic_write_text(path, json.dumps(record, ensure_ascii=False, indent=1) + "\n")


def bring_in(settings: Settings) -> ImportReport:
    """Read what is new in the nanobot workspace the configuration named
    (``settings.nanobot_workspace``) into hippobot's own (``settings.workspace``), by the
    import's rules: prompt and memory files, skills, history and its cursors, the memory
    history, sessions. nanobot's files are only read. A file hippobot has not changed since
    it was last brought takes nanobot's newer version; one changed on both sides stays as
    hippobot has it and is reported once. When nothing in nanobot's workspace changed (the
    sizes and times of its files, :func:`_stamp`), nothing is opened."""
    source = settings.nanobot_workspace
    report = ImportReport()
    if source is None or not source.is_dir():
        return report
    root = home_of(source)
    home = NanobotHome(root=root, config={}, workspace=source, layout=_layout(root, source))
    paths = Workspace(settings.workspace)
    record_path = paths.nanobot_sync
    stamp = _stamp(home)
    if _read_record(record_path, source).get("stamp") == stamp:
        return report
    paths.locks_dir.mkdir(parents=True, exist_ok=True)
    with locked(paths.nanobot_sync_lock, timeout=60):
        entry = _read_record(record_path, source)  # another process may have just done it
        if entry.get("stamp") == stamp:
            return report
        kept = entry.get("seen")
        seen: Seen = kept if isinstance(kept, dict) else {}
        _import_git(home, settings.workspace, report, seen)
        _import_workspace_files(home, settings.workspace, report, seen)
        _import_sessions(home, settings.workspace, report, seen)
        _write_record(record_path, source, {"stamp": stamp, "seen": seen})
    return report


def describe_bring_in(source: Path, target: Path, report: ImportReport) -> str | None:
    """One line for the terminal about a reading-in that brought or kept something."""
    if not report.brought and not report.skipped:
        return None

    def some(items: list[str]) -> str:
        shown = ", ".join(items[:4])
        return shown + (f" and {len(items) - 4} more" if len(items) > 4 else "")

    parts = []
    if report.brought:
        parts.append(f"brought {some(report.brought)}")
    if report.skipped:
        parts.append(f"kept {some(report.skipped)}")
    return (
        f"read nanobot's workspace {source} into hippobot's {target} (nanobot's files are "
        f"only read): {'; '.join(parts)}"
    )
