"""The workspace and the home: every file, folder and lock hippobot uses, named in one place
(SPEC 2).

Code that needs a path asks a :class:`Workspace` (or :class:`Home`) for it instead of
spelling ``".hippobot" / "locks" / ...`` itself, so a file's name and its lock's name cannot
drift apart between the modules that share them. Code that works on workspace-relative
names (the memory files Dream edits, the versioned paths, the recall index's keys) uses the
``*_MD``/``*_DIR``/... constants below; ``tests/architecture/test_file_names.py`` checks that
no other module spells one.

Locks (all under ``.hippobot/locks/``; :mod:`hippobot.locks` takes them):

* ``turn-<sha>.lock`` — one turn at a time per session, across processes;
* ``consolidate-<sha>.lock`` — one consolidation at a time per session;
* ``sessions/<channel>/<chat>.lock`` — each read-modify-append of a session file;
* ``history.lock`` — appends to ``memory/history.jsonl`` and its cursors;
* ``git.lock`` — writes to the memory repository;
* ``dream.lock`` — one Dream run per workspace;
* ``nanobot-sync.lock`` — one reading-in of a nanobot workspace at a time;
* ``files/<sha>.lock`` — every read-modify-write of one file the agent edits (memory files,
  prompts, project files): ``edit_file``/``write_file``, Dream applying its edits, a
  restore, a chat commit. Order: file locks (sorted by path) before ``git.lock``.

The home (:class:`Home`) names what every workspace of one hippobot home shares: the config,
the default workspace, the ``serve`` token and users, and the locks that let one request at
a time reach a local model endpoint, whichever workspace, ``serve`` user or process sends it.
:class:`NanobotFiles` names what hippobot reads (never writes) in a nanobot home.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath

from hippobot.locks import PathLock, many

__all__ = [
    "AGENTS_MD",
    "BOOTSTRAP_FILES",
    "CONFIG_FILE",
    "CURSOR",
    "DREAM_CURSOR",
    "DREAM_GUIDE",
    "GITIGNORE",
    "GIT_DIR",
    "HISTORY",
    "HISTORY_ARCHIVE",
    "HISTORY_FILES",
    "LEGACY_HISTORY",
    "MEMORY_DIR",
    "MEMORY_FILES",
    "MEMORY_MD",
    "PROMPTS_DIR",
    "PROTECTED_DIRS",
    "REVERTED",
    "SERVE_TOKEN",
    "SESSIONS_DIR",
    "SESSION_SUFFIX",
    "SKILLS_DIR",
    "SOUL_MD",
    "STATE_DIR",
    "TEMPLATE_FILES",
    "TRACKED",
    "USER_MD",
    "VERSIONED_FILES",
    "EndpointFiles",
    "Home",
    "NanobotFiles",
    "Workspace",
]

# --- names relative to the workspace (POSIX) ----------------------------------------

SOUL_MD = "SOUL.md"
USER_MD = "USER.md"
AGENTS_MD = "AGENTS.md"
MEMORY_DIR = "memory"
MEMORY_MD = f"{MEMORY_DIR}/MEMORY.md"
#: The history archive (SPEC 3.2): pending entries, and those Dream processed moved out.
HISTORY = f"{MEMORY_DIR}/history.jsonl"
HISTORY_ARCHIVE = f"{MEMORY_DIR}/history.archive.jsonl"
HISTORY_FILES = (HISTORY_ARCHIVE, HISTORY)
#: The last history cursor allocated, and the last one a completed Dream processed.
CURSOR = f"{MEMORY_DIR}/.cursor"
DREAM_CURSOR = f"{MEMORY_DIR}/.dream_cursor"
#: nanobot's free-form archive, turned into ``history.jsonl`` once (kept as ``.bak``).
LEGACY_HISTORY = f"{MEMORY_DIR}/HISTORY.md"
#: Lines the user undid, so Dream does not write them again (``memory.ledger``).
REVERTED = f"{MEMORY_DIR}/reverted.jsonl"
SESSIONS_DIR = "sessions"
SESSION_SUFFIX = ".jsonl"
SKILLS_DIR = "skills"
PROMPTS_DIR = "prompts"
DREAM_GUIDE = f"{PROMPTS_DIR}/dream.md"
GIT_DIR = ".git"
GITIGNORE = ".gitignore"
#: hippobot's derived state (locks, index, Dream's staging); never written by the model.
STATE_DIR = ".hippobot"

#: The files shown in the system prompt as written (a project directory may have its own).
BOOTSTRAP_FILES = (AGENTS_MD, SOUL_MD, USER_MD)
#: The durable memory files Dream edits, relative to the workspace (SPEC 3.3).
MEMORY_FILES = (SOUL_MD, USER_MD, MEMORY_MD)
#: What a new workspace gets from the packaged templates.
TEMPLATE_FILES = (AGENTS_MD, SOUL_MD, USER_MD, MEMORY_MD)
#: What the memory files' locks cover: the memory files, Dream's cursor, the ignore file.
VERSIONED_FILES = (*MEMORY_FILES, DREAM_CURSOR, GITIGNORE)
#: What the memory repository versions (a trailing ``/``: every file below that folder).
TRACKED = (SOUL_MD, USER_MD, AGENTS_MD, MEMORY_MD, DREAM_CURSOR, f"{SKILLS_DIR}/",
           f"{PROMPTS_DIR}/", REVERTED)
#: Folders of a workspace the file tools never write and ``exec`` sees read-only.
PROTECTED_DIRS = (GIT_DIR, STATE_DIR)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Workspace:
    """Paths of one workspace. Pure naming: nothing is created or read here."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def __truediv__(self, relative: str) -> Path:
        """``root / relative`` for one of this module's relative names."""
        return self.root / relative

    # --- user-visible files -----------------------------------------------------------

    @property
    def soul(self) -> Path:
        return self.root / SOUL_MD

    @property
    def user(self) -> Path:
        return self.root / USER_MD

    @property
    def agents(self) -> Path:
        return self.root / AGENTS_MD

    @property
    def memory_dir(self) -> Path:
        return self.root / MEMORY_DIR

    @property
    def memory_md(self) -> Path:
        return self.root / MEMORY_MD

    @property
    def history(self) -> Path:
        return self.root / HISTORY

    @property
    def history_archive(self) -> Path:
        return self.root / HISTORY_ARCHIVE

    @property
    def cursor(self) -> Path:
        return self.root / CURSOR

    @property
    def dream_cursor(self) -> Path:
        return self.root / DREAM_CURSOR

    @property
    def legacy_history(self) -> Path:
        return self.root / LEGACY_HISTORY

    def legacy_history_backup(self, n: int = 1) -> Path:
        """Where the migrated ``HISTORY.md`` is kept: ``HISTORY.md.bak``, then ``.bak.2``..."""
        legacy = self.legacy_history
        return legacy.with_name(f"{legacy.name}.bak" + (f".{n}" if n > 1 else ""))

    @property
    def reverted(self) -> Path:
        return self.root / REVERTED

    @property
    def sessions_dir(self) -> Path:
        return self.root / SESSIONS_DIR

    @property
    def skills_dir(self) -> Path:
        return self.root / SKILLS_DIR

    @property
    def dream_guide(self) -> Path:
        return self.root / DREAM_GUIDE

    @property
    def git_dir(self) -> Path:
        """The memory repository (versions of the memory and prompt files)."""
        return self.root / GIT_DIR

    @property
    def gitignore(self) -> Path:
        return self.root / GITIGNORE

    @staticmethod
    def corrupt_copy(path: Path) -> Path:
        """Where the unreadable lines of a session file are copied (once each)."""
        return path.with_name(path.name + ".corrupt")

    def memory_file(self, name: str) -> Path:
        """One of :data:`MEMORY_FILES` as an absolute path."""
        return self.root / name

    # --- derived state ----------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def recall_index(self) -> Path:
        """The search index (derived from the files; rebuilt when missing or corrupt)."""
        return self.state_dir / "recall.sqlite3"

    @property
    def recall_index_files(self) -> tuple[Path, Path, Path]:
        """The index and SQLite's write-ahead log and shared memory beside it."""
        index = self.recall_index
        return index, index.with_name(f"{index.name}-wal"), index.with_name(f"{index.name}-shm")

    @property
    def usage_ledger(self) -> Path:
        """One line per model request (``hippobot usage``)."""
        return self.state_dir / "usage.jsonl"

    @property
    def skills_cache(self) -> Path:
        """Derived: the skills' parsed front matter (``context.skills.FrontMatterCache``)."""
        return self.state_dir / "skills.json"

    @property
    def dream_state(self) -> Path:
        return self.state_dir / "dream"

    @property
    def dream_staged(self) -> Path:
        """Dream's working copies of the memory files (edited, never the live files)."""
        return self.dream_state / "staged"

    @property
    def dream_base(self) -> Path:
        """The memory files as a Dream run found them (the base of its three-way merge)."""
        return self.dream_state / "base"

    @property
    def dream_manifest(self) -> Path:
        """Dream's commit point: present from the moment a run is committed until applied."""
        return self.dream_state / "manifest.json"

    @property
    def dream_pending(self) -> Path:
        """Why the last Dream run left entries pending (``memory history --pending``)."""
        return self.dream_state / "pending.json"

    @property
    def dream_log(self) -> Path:
        """What a detached ``hippobot dream --background`` printed."""
        return self.dream_state / "background.log"

    @property
    def locks_dir(self) -> Path:
        return self.state_dir / "locks"

    @property
    def pending_versions(self) -> Path:
        """Chat memory edits whose version commit has not been made yet, one file each
        (``hippobot.agent.chat_versions``): written before a reply is shown, removed once
        committed, so a process killed in between leaves the commit to the next one."""
        return self.state_dir / "pending-versions"

    def pending_version(self, stamp: str) -> Path:
        """One chat edit's pending version (``stamp`` orders them; ``"*"`` globs them)."""
        return self.pending_versions / f"{stamp}.json"

    @property
    def nanobot_sync(self) -> Path:
        """What was last read in from a nanobot workspace (``migrate.nanobot.bring_in``)."""
        return self.state_dir / "nanobot-sync.json"

    @property
    def git_before_import(self) -> Path:
        """Where the import moves a fresh workspace's own repository aside."""
        return self.state_dir / "git-before-import"

    # --- lock files -------------------------------------------------------------------

    def turn_lock(self, key: str) -> Path:
        return self.locks_dir / f"turn-{_digest(key)}.lock"

    def consolidate_lock(self, key: str) -> Path:
        return self.locks_dir / f"consolidate-{_digest(key)}.lock"

    def session_lock(self, relative: PurePath) -> Path:
        """Lock of a session file given its path relative to ``sessions/``."""
        return self.locks_dir / "sessions" / relative.with_suffix(".lock")

    @property
    def history_lock(self) -> Path:
        return self.locks_dir / "history.lock"

    @property
    def git_lock(self) -> Path:
        return self.locks_dir / "git.lock"

    @property
    def dream_lock(self) -> Path:
        return self.locks_dir / "dream.lock"

    @property
    def nanobot_sync_lock(self) -> Path:
        return self.locks_dir / "nanobot-sync.lock"

    def file_lock_path(self, path: Path | str) -> Path:
        """The lock guarding read-modify-write of ``path`` (any file, in the workspace or
        not): named by the file's absolute path, so every writer finds the same lock."""
        full = os.path.abspath(os.fspath(Path(path).expanduser()))
        return self.locks_dir / "files" / f"{_digest(full)}.lock"

    # --- taking locks -----------------------------------------------------------------

    def file_lock(self, path: Path | str, timeout: float = 60.0) -> PathLock:
        """The per-file lock of ``path``: ``with`` in a worker thread, ``async with`` on
        the event loop (never blocks it)."""
        return PathLock(self.file_lock_path(path), timeout)

    def files_lock(self, paths: Iterable[Path | str], timeout: float = 60.0) -> PathLock:
        """Several per-file locks at once, taken in one global order (no deadlock)."""
        return many([self.file_lock_path(p) for p in paths], timeout)

    def memory_files_lock(self, timeout: float = 60.0) -> PathLock:
        """The locks of every versioned file, as one set (Dream's apply step, restores and
        commits all take this same set, so nested holders never take them out of order)."""
        return self.files_lock([self.root / n for n in VERSIONED_FILES], timeout)

    def all_lock_paths(self) -> list[Path]:
        """Every lock file that exists now (for diagnostics and tests)."""
        if not self.locks_dir.is_dir():
            return []
        return sorted(p for p in self.locks_dir.rglob("*.lock") if p.is_file())


@dataclass(frozen=True, slots=True)
class EndpointFiles:
    """The files that let one request at a time reach one endpoint (:mod:`hippobot.providers.serial`).

    ``slot`` is held (exclusively) by the request being sent; ``chats`` is held shared by every
    chat that waits for the endpoint or uses it, which background work reads as "wait";
    ``holder`` (not a lock) says who holds the slot, for "queued behind Dream"."""

    slot: Path
    chats: Path
    holder: Path


@dataclass(frozen=True, slots=True)
class Home:
    """Paths of a hippobot home (``~/.hippobot`` or ``$HIPPOBOT_HOME``) shared by all its
    workspaces. Pure naming: nothing is created or read here.

    Locks (under ``locks/``): ``endpoint-<sha>.lock``, ``.chats`` and ``.holder`` per model
    endpoint (:class:`EndpointFiles`)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @staticmethod
    def default() -> Path:
        """The home when ``HIPPOBOT_HOME`` names none."""
        return Path.home() / ".hippobot"

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def default_workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def serve_token(self) -> Path:
        """The token ``hippobot serve`` makes for this install."""
        return self.root / SERVE_TOKEN

    def user_workspace(self, name: str) -> Path:
        """Where a ``serve`` user's workspace is when the config names none."""
        return self.root / "users" / name

    @property
    def config_noted(self) -> Path:
        """The digest of the config file whose unused nanobot settings were last noted."""
        return self.root / STATE_DIR / "config-noted"

    @property
    def input_history(self) -> Path:
        """What was typed at the interactive prompt (arrow-up history)."""
        return self.root / ".input_history"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    def endpoint(self, key: str) -> EndpointFiles:
        """The files of the endpoint known by ``key`` (its normalised address)."""
        stem = self.locks_dir / f"endpoint-{_digest(key)}"
        return EndpointFiles(
            slot=stem.with_suffix(".lock"), chats=stem.with_suffix(".chats"),
            holder=stem.with_suffix(".holder"),
        )


#: The config's file name in the home (and of its packaged starter template).
CONFIG_FILE = "config.json"
#: The ``serve`` token's file name in the home.
SERVE_TOKEN = "serve-token"


@dataclass(frozen=True, slots=True)
class NanobotFiles:
    """What hippobot reads (never writes) of a nanobot home ``home``. The files of nanobot's
    workspace that hippobot has too (memory files, history, cursors, ``skills/``, ``.git``)
    are named by ``Workspace(workspace)``; these are nanobot's own."""

    home: Path

    #: The folder nanobot keeps in (and above) its workspaces.
    DIR = ".nanobot"

    @property
    def config(self) -> Path:
        return self.home / CONFIG_FILE

    @property
    def default_workspace(self) -> Path:
        """nanobot's workspace when ``agents.defaults.workspace`` names none."""
        return self.home / "workspace"

    @property
    def sessions_root(self) -> Path:
        """0.3.x: one folder of sessions per workspace (``<id>/<base64url(key)>.jsonl``)."""
        return self.home / SESSIONS_DIR

    @property
    def cron_jobs(self) -> Path:
        return self.home / "cron" / "jobs.json"

    @staticmethod
    def workspace_marks(workspace: Path) -> tuple[Path, Path]:
        """A folder and a file only nanobot puts in a workspace."""
        return workspace / NanobotFiles.DIR, NanobotFiles.heartbeat(workspace)

    @staticmethod
    def heartbeat(workspace: Path) -> Path:
        return workspace / "HEARTBEAT.md"

    @staticmethod
    def workspace_id(workspace: Path) -> Path:
        """0.3.x: the id naming the workspace's session folder under :attr:`sessions_root`."""
        return workspace / NanobotFiles.DIR / "workspace-id"

    @staticmethod
    def legacy_sessions(workspace: Path) -> Path:
        """0.2.x: sessions in the workspace (``<key with : as _>.jsonl``)."""
        return workspace / SESSIONS_DIR

    @staticmethod
    def namespace_marker(namespace: Path) -> Path:
        """The file in a 0.3.x session folder naming the workspace it belongs to."""
        return namespace / ".workspace"
