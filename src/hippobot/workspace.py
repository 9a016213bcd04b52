"""The workspace: every file and lock hippobot uses, named in one place (SPEC 2).

Code that needs a path asks a :class:`Workspace` for it instead of spelling
``".hippobot" / "locks" / ...`` itself, so a file's name and its lock's name cannot drift
apart between the modules that share them.

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

The home (:class:`Home`) names what every workspace of one hippobot home shares: the locks
that let one request at a time reach a local model endpoint, whichever workspace, ``serve``
user or process sends it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath

from hippobot.locks import PathLock, many

__all__ = ["MEMORY_FILES", "VERSIONED_FILES", "EndpointFiles", "Home", "Workspace"]

#: The durable memory files Dream edits, relative to the workspace (SPEC 3.3).
MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")
#: What the memory repository versions: the memory files, Dream's cursor, its ignore file.
VERSIONED_FILES = (*MEMORY_FILES, "memory/.dream_cursor", ".gitignore")


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Workspace:
    """Paths of one workspace. Pure naming: nothing is created or read here."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    # --- user-visible files -----------------------------------------------------------

    @property
    def soul(self) -> Path:
        return self.root / "SOUL.md"

    @property
    def user(self) -> Path:
        return self.root / "USER.md"

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def memory_md(self) -> Path:
        return self.memory_dir / "MEMORY.md"

    @property
    def history(self) -> Path:
        return self.memory_dir / "history.jsonl"

    @property
    def dream_cursor(self) -> Path:
        return self.memory_dir / ".dream_cursor"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def dream_guide(self) -> Path:
        return self.root / "prompts" / "dream.md"

    def memory_file(self, name: str) -> Path:
        """One of :data:`MEMORY_FILES` as an absolute path."""
        return self.root / name

    # --- derived state ----------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return self.root / ".hippobot"

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
    def locks_dir(self) -> Path:
        return self.state_dir / "locks"

    @property
    def pending_versions(self) -> Path:
        """Chat memory edits whose version commit has not been made yet, one file each
        (``hippobot.agent.chat_versions``): written before a reply is shown, removed once
        committed, so a process killed in between leaves the commit to the next one."""
        return self.state_dir / "pending-versions"

    @property
    def nanobot_sync(self) -> Path:
        """What was last read in from a nanobot workspace (``migrate.nanobot.bring_in``)."""
        return self.state_dir / "nanobot-sync.json"

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
