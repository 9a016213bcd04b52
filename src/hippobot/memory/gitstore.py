"""Memory versions: a small git repository at the workspace root, written with dulwich.

Invariants:

* Only the store paths (the tracked memory files plus ``.gitignore``) are ever written
  into a commit; every other entry of HEAD's tree is carried over untouched, and files
  outside the store are never read or staged.
* No method overwrites a tracked file whose working copy differs from HEAD without
  first committing it (``manual: edits before restore``); only :meth:`GitStore.revert`
  writes tracked files at all, and it writes nothing when any file would conflict.
* A commit is made only when the new tree differs from HEAD's: never an empty commit.
* Writers (``init``, ``commit``, ``revert``) hold ``.hippobot/locks/git.lock`` so several
  processes can share one workspace.
* A ``.git`` that cannot be read makes the store *unavailable* (a one-line reason)
  instead of raising on construction, so chat keeps working without versions.
* No ``git`` binary is used, and no program is ever run: blobs are made from the files'
  bytes and the index is written from them directly, so ``.gitattributes`` filters,
  ``filter.*`` drivers in ``.git/config`` and hooks never apply. Symlinks, FIFOs and
  devices in place of a tracked file are not followed or read (HEAD's version stays).
* A tracked path ending in ``/`` is a folder: every regular file below it is versioned
  (``skills/``, ``prompts/``), so everything that shapes the prompt can be undone.
* With a ``redactor`` given (the agent's), a tracked file holding a configured key (in
  any of the redactor's spellings) or a well-known token shape is rewritten with
  ``[REDACTED]`` in its place before it is committed: a key never enters the permanent
  history.
* All methods are blocking: call them from async code through ``asyncio.to_thread``.

Diff rendering lives in :mod:`hippobot.memory.gitdiff` and the three-way merge in
:mod:`hippobot.memory.merge3`; their public names are re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Literal, TypeVar

from dulwich.errors import (
    ChecksumMismatch,
    FileFormatException,
    NoIndexPresent,
    NotGitRepository,
    ObjectMissing,
    WrongObjectException,
)
from dulwich.file import FileLocked
from dulwich.index import Index, commit_tree, index_entry_from_stat
from dulwich.object_store import iter_tree_contents
from dulwich.objects import Blob, Commit
from dulwich.repo import Repo

from hippobot.atomic import atomic_write_bytes
from hippobot.errors import HippobotError, StorageError, UserError
from hippobot.locks import LockTimeout, locked
from hippobot.memory.gitdiff import (
    DIFF_CAP,
    DiffSummary,
    FileStat,
    Snapshot,
    dream_message,
    summarize,
)
from hippobot.memory.ledger import LEDGER_PATH, RevertedLine, content_lines, serialize
from hippobot.memory.merge3 import merge3, merge_lines
from hippobot.redact import Redactor
from hippobot.safeio import open_fd
from hippobot.workspace import DREAM_CURSOR, GIT_DIR, GITIGNORE, TRACKED, Workspace

__all__ = [
    "AUTHOR",
    "CURSOR_PATH",
    "DEFAULT_TRACKED",
    "CommitDiff",
    "CommitInfo",
    "DiffSummary",
    "FileStat",
    "GitStore",
    "RevertConflict",
    "RevertRefused",
    "RevertResult",
    "UnknownCommit",
    "VersioningUnavailable",
    "dream_message",
    "merge3",
    "merge_lines",
]

log = logging.getLogger(__name__)

AUTHOR = "hippobot <hippobot@dream>"
DEFAULT_TRACKED: tuple[str, ...] = TRACKED
CURSOR_PATH = DREAM_CURSOR
INIT_MESSAGE = "init: memory store"
MANUAL_MESSAGE = "manual: edits before restore"
_SHORT = 8
_MIN_PREFIX = 4
_FILE_MODE = 0o100644
_MAX_FILE_BYTES = 8 * 1024 * 1024  # a bigger tracked file keeps HEAD's version
_MAX_TREE_FILES = 2000  # files versioned below one tracked folder
# Errors that mean "the repository's data cannot be read", as opposed to our own bugs.
_CORRUPT_ERRORS = (
    KeyError,
    ObjectMissing,
    ChecksumMismatch,
    FileFormatException,
    WrongObjectException,
    zlib.error,
)

T = TypeVar("T")
_STALE_LOCK_RETRIES = 8


# --- errors -------------------------------------------------------------------------


class VersioningUnavailable(HippobotError):
    """The memory history is missing, unreadable or busy; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownCommit(UserError):
    """A sha prefix matched no version, or several; ``recent`` lists valid short shas."""

    def __init__(self, message: str, *, recent: Sequence[str] = ()) -> None:
        hint = f" (recent versions: {', '.join(recent)})" if recent else ""
        super().__init__(message + hint)
        self.recent = list(recent)


class RevertRefused(UserError):
    """The commit cannot be undone (the root commit has nothing before it)."""


class RevertConflict(UserError):
    """Undoing the commit clashes with later edits; nothing on disk was changed."""

    def __init__(self, sha: str, files: Sequence[str]) -> None:
        super().__init__(
            f"cannot undo {sha[:_SHORT]}: later edits to {', '.join(files)} touch the same "
            "lines; nothing was changed. Edit the file(s) by hand instead."
        )
        self.sha = sha
        self.files = list(files)


# --- data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    short_sha: str
    message: str
    subject: str
    time: str  # local time, "YYYY-MM-DD HH:MM"
    files: tuple[str, ...]


@dataclass(frozen=True)
class CommitDiff(CommitInfo):
    diff: str  # unified diff against the first parent; the root shows additions only


@dataclass(frozen=True)
class RevertResult:
    """``new_sha`` is None when the commit's changes were already gone (nothing done)."""

    reverted: str
    new_sha: str | None
    files: tuple[str, ...]
    manual_sha: str | None = None  # the "manual: edits before restore" commit, if any
    forgotten: tuple[RevertedLine, ...] = ()  # lines taken out, now in the ledger


# --- the store ----------------------------------------------------------------------


class _Corrupt(Exception):
    """Internal: the repository is unreadable; the message is the detail."""


def _short(sha: bytes | str) -> str:
    return (sha.decode("ascii") if isinstance(sha, bytes) else sha)[:_SHORT]


def _head_sha(repo: Repo) -> bytes | None:
    """HEAD's commit id, None for a fresh repository; raises _Corrupt for garbage."""
    raw = repo.refs.read_ref(b"HEAD")
    if raw is None:
        raise _Corrupt("HEAD is missing")
    if raw.startswith(b"ref: "):
        _, sha = repo.refs.follow(b"HEAD")
    else:
        sha = raw
    if sha is None:
        return None
    if not re.fullmatch(rb"[0-9a-f]{40}", sha):
        raise _Corrupt("HEAD does not point to a commit")
    return sha


def _tree_ids(repo: Repo, tree_id: bytes | None) -> dict[str, bytes]:
    if tree_id is None:
        return {}
    return {
        e.path.decode("utf-8", "surrogateescape"): e.sha
        for e in iter_tree_contents(repo.object_store, tree_id)
        if e.mode is not None and e.mode & 0o170000 == 0o100000  # regular blobs only
    }


def _load(repo: Repo, ids: dict[str, bytes]) -> Snapshot:
    return {path: repo[sha].as_raw_string() for path, sha in ids.items()}


def _local_offset() -> int:
    offset = datetime.now().astimezone().utcoffset()
    return int(offset.total_seconds()) if offset else 0


def _read_regular(path: Path, within: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a symlink) of sane size, else None.

    Opened through :mod:`hippobot.safeio` (a folder on the way that is a link out of the
    workspace ``within`` is not followed) and never when the file itself is a link, so a
    FIFO or a link to ``/dev/zero`` in place of a tracked file can neither hang nor flood a
    commit, and a ``skills`` link to someone else's folder brings nothing in.
    """
    if os.path.islink(path):
        return None
    try:
        fd = open_fd(path, within=within)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(_MAX_FILE_BYTES + 1)
        return data if len(data) <= _MAX_FILE_BYTES else None
    finally:
        os.close(fd)


def _ignore_lines(tracked: Sequence[str]) -> list[str]:
    """``/*`` then, per tracked file, un-ignore its folders (ignoring their other
    contents) and the file itself (a tracked folder: all of it); ``!.gitignore`` last."""
    lines = ["/*"]
    for path in [p for p in tracked if "/" in p] + [p for p in tracked if "/" not in p]:
        parts = path.rstrip("/").split("/")  # a tracked folder ends with "/"
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            for line in (f"!{folder}/", f"{folder}/*"):
                if line not in lines:
                    lines.append(line)
        if f"!{path}" not in lines:
            lines.append(f"!{path}")
    return [*lines, f"!{GITIGNORE}"]


def _merge_ignore(existing: str, ours: list[str]) -> str:
    """Our block goes where the first of our lines was (else at the end), in our order;
    other lines keep their place, so nothing is duplicated and ours keep their effect."""
    old = existing.splitlines()
    first = next((i for i, line in enumerate(old) if line.strip() in ours), len(old))
    before = [line for line in old[:first] if line.strip() not in ours]
    after = [line for line in old[first:] if line.strip() not in ours]
    return "\n".join([*before, *ours, *after]) + "\n"


def _past_stale_locks(action: Callable[[], T]) -> T:
    """Run a dulwich write; remove a lock file a killed writer left behind, and retry.

    dulwich writes every object, ref and the index through ``<name>.lock`` and a rename,
    so a process killed in between leaves the lock, and every later write to that name
    fails. Call this only while holding ``git.lock``: no other hippobot process writes the
    repository then, so a lock found at that moment belongs to a writer that died.
    """
    for _ in range(_STALE_LOCK_RETRIES):
        try:
            return action()
        except FileLocked as err:
            stale = os.fsdecode(err.lockfilename)
            log.warning("removing %s, left by an interrupted memory commit", stale)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
    return action()


class GitStore:
    """Versions of the memory files in ``<workspace>/.git`` (see module docstring)."""

    def __init__(
        self,
        workspace: Path,
        tracked: Sequence[str] = DEFAULT_TRACKED,
        *,
        lock_timeout: float = 60.0,
        diff_cap: int = DIFF_CAP,
        redactor: Redactor | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        self.tracked = tuple(self._check_path(p) for p in tracked)
        self.store_paths = (*self.tracked, GITIGNORE)
        self._files = tuple(p for p in self.store_paths if not p.endswith("/"))
        self._folders = tuple(p for p in self.store_paths if p.endswith("/"))
        self._redact = redactor
        self._paths = Workspace(self.workspace)
        self._lock_path = self._paths.git_lock
        self._lock_timeout = lock_timeout
        self._diff_cap = diff_cap

    @staticmethod
    def _check_path(path: str) -> str:
        parts = Path(path).as_posix().strip("/").split("/")
        if not path or any(p in ("", ".", "..", GIT_DIR) for p in parts):
            raise ValueError(f"not a workspace-relative file path: {path!r}")
        return "/".join(parts) + ("/" if path.endswith("/") else "")

    def is_store_path(self, rel: str) -> bool:
        """True for a path this store versions (a tracked file, or a file in a tracked folder)."""
        return rel in self._files or any(rel.startswith(f) for f in self._folders)

    def working_files(self) -> dict[str, bytes]:
        """The store files as they are on disk now (regular files only), by path."""
        out = {}
        for rel in self._store_files([]):
            data = _read_regular(self.workspace / rel, self.workspace)
            if data is not None:
                out[rel] = data
        return out

    def _store_files(self, head_paths: Sequence[str]) -> list[str]:
        """The tracked files, the regular files now below tracked folders, and every
        store path HEAD has (so a deletion is seen)."""
        found = [*self._files, *(p for p in head_paths if self.is_store_path(p))]
        for folder in self._folders:
            top = self.workspace / folder
            count = 0
            for dirpath, dirnames, filenames in os.walk(top):  # never follows symlinks
                dirnames[:] = sorted(d for d in dirnames if d.casefold() != GIT_DIR)
                for name in sorted(filenames):
                    full = Path(dirpath) / name
                    if count >= _MAX_TREE_FILES or not full.is_file() or full.is_symlink():
                        continue
                    count += 1
                    found.append(full.relative_to(self.workspace).as_posix())
        return sorted(set(found))

    # -- state --------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return os.path.lexists(self._paths.git_dir)

    @property
    def available(self) -> bool:
        """True when the history exists and can be read."""
        return self._probe() is None

    @property
    def broken_reason(self) -> str | None:
        """One line saying why an existing ``.git`` cannot be used, else None."""
        return self._probe() if self.initialized else None

    def _probe(self) -> str | None:
        try:
            with self._open():
                return None
        except VersioningUnavailable as err:
            return err.reason

    @contextmanager
    def _open(self) -> Iterator[Repo]:
        """Open and sanity-check the repository; unreadable data becomes
        VersioningUnavailable, inside the ``with`` body too."""
        gitdir = self._paths.git_dir
        if not self.initialized:
            raise VersioningUnavailable(f"memory versioning is not initialised in {self.workspace}")
        try:
            repo = Repo(str(self.workspace))
        except (NotGitRepository, OSError, ValueError, *_CORRUPT_ERRORS) as err:
            raise self._broken(gitdir, f"cannot open it: {err!r}") from err
        try:
            self._check(repo)
            yield repo
        except _Corrupt as err:
            raise self._broken(gitdir, str(err)) from err
        except _CORRUPT_ERRORS as err:
            raise self._broken(gitdir, f"missing or damaged data: {err!r}") from err
        finally:
            repo.close()

    @staticmethod
    def _broken(gitdir: Path, detail: str) -> VersioningUnavailable:
        return VersioningUnavailable(
            f"memory history {gitdir} is unreadable ({detail}); move it aside to start a new one"
        )

    @staticmethod
    def _check(repo: Repo) -> None:
        head = _head_sha(repo)
        if head is None:
            return
        commit = repo[head]
        if not isinstance(commit, Commit):
            raise _Corrupt("HEAD does not point to a commit")
        for sha in _tree_ids(repo, commit.tree).values():
            if sha not in repo.object_store:
                raise _Corrupt(f"object {_short(sha)} is missing")

    @contextmanager
    def _locked(self, *, files: bool = True) -> Iterator[None]:
        """Hold the store paths' per-file locks (so no edit lands between reading and
        writing them), then ``git.lock``. Blocking: call from a worker thread."""
        # Every file the commit may read: tracked files and those now in tracked folders
        # (skills/, prompts/), each under the same lock an edit of it takes.
        paths = [self.workspace / p for p in self._store_files([])] if files else []
        try:
            with self._paths.files_lock(paths, self._lock_timeout), locked(
                self._lock_path, timeout=self._lock_timeout
            ):
                yield
        except LockTimeout as err:
            raise VersioningUnavailable(
                f"memory history is busy: {err} held for {self._lock_timeout:.0f} s"
            ) from err

    # -- writing ------------------------------------------------------------------

    def init(self) -> bool:
        """Create the repository (even inside another git repository) with an
        ``init: memory store`` commit; True if it was created. Idempotent."""
        with self._locked():
            created = not self.initialized
            if created:
                self.workspace.mkdir(parents=True, exist_ok=True)
                Repo.init(str(self.workspace), default_branch=b"main").close()
            with self._open() as repo:
                head = _head_sha(repo)
                if created or head is None or self._ignore_is_ours():
                    self._write_ignore()
                if head is None:
                    self._commit(repo, INIT_MESSAGE)
            return created

    def _ignore_is_ours(self) -> bool:
        """A missing .gitignore, or one starting with ``/*``, is managed by us; any
        other belongs to whoever owns an existing repository and is left alone."""
        path = self._paths.gitignore
        if not path.exists():
            return True
        lines = [ln.strip() for ln in (_read_regular(path, self.workspace) or b"").decode(
            "utf-8", "replace").splitlines()]
        return next((ln for ln in lines if ln and not ln.startswith("#")), None) == "/*"

    def _write_ignore(self) -> None:
        path = self._paths.gitignore
        existing = (_read_regular(path, self.workspace) or b"").decode("utf-8", "surrogateescape")
        merged = _merge_ignore(existing, _ignore_lines(self.tracked))
        if merged != existing:
            atomic_write_bytes(path, merged.encode("utf-8", "surrogateescape"))

    def commit(self, message: str, contents: Mapping[str, bytes | None] | None = None) -> str | None:
        """Commit the store paths as they are on disk; the new sha, or None if unchanged.

        ``contents`` replaces what is read from disk for some store paths (``None`` =
        absent): a caller that knows a file's earlier state commits that instead.
        """
        with self._locked(), self._open() as repo:
            return self._commit(repo, message, contents)

    def _worktree(
        self, repo: Repo, head: bytes | None, contents: Mapping[str, bytes | None] | None = None
    ) -> Snapshot:
        """HEAD's tree with every store path replaced by its file (absent = deleted)."""
        snap = _load(repo, _tree_ids(repo, repo[head].tree if head else None))
        for rel in self._store_files([*list(snap), *(contents or {})]):
            path = self.workspace / rel
            if contents is not None and rel in contents:
                given = contents[rel]
                if given is None:
                    snap.pop(rel, None)
                else:
                    snap[rel] = given
                continue
            if not os.path.lexists(path):
                snap.pop(rel, None)
                continue
            data = _read_regular(path, self.workspace)
            if data is None:  # a symlink, FIFO, device, folder or huge file: not versioned
                if not path.is_dir() or path.is_symlink():
                    log.warning("not versioning %s: not a regular file of sane size", path)
                if path.is_dir():
                    snap.pop(rel, None)
                continue
            snap[rel] = self._redacted(path, data)
        return snap

    def _redacted(self, path: Path, data: bytes) -> bytes:
        """``data`` through the redactor; the file on disk is rewritten to match."""
        if self._redact is None:
            return data
        text = data.decode("utf-8", "surrogateescape")
        clean = self._redact(text)
        if clean == text:
            return data
        out = clean.encode("utf-8", "surrogateescape")
        log.warning("removed a key from %s before versioning it", path)
        with contextlib.suppress(StorageError):
            atomic_write_bytes(path, out)
        return out

    def _commit(
        self, repo: Repo, message: str, contents: Mapping[str, bytes | None] | None = None
    ) -> str | None:
        head = _head_sha(repo)
        snap = self._worktree(repo, head, contents)
        blobs = []
        for path, data in sorted(snap.items()):
            blob = Blob.from_string(data)
            _past_stale_locks(partial(repo.object_store.add_object, blob))
            blobs.append((path.encode("utf-8", "surrogateescape"), blob.id, _FILE_MODE))
        tree = _past_stale_locks(lambda: commit_tree(repo.object_store, blobs))
        if head is not None and repo[head].tree == tree:
            return None
        now, offset = int(time.time()), _local_offset()
        commit = Commit()
        commit.tree = tree
        commit.parents = [head] if head else []
        commit.author = commit.committer = AUTHOR.encode()
        commit.author_time = commit.commit_time = now
        commit.author_timezone = commit.commit_timezone = offset
        commit.message = message.rstrip("\n").encode("utf-8") + b"\n"
        _past_stale_locks(lambda: repo.object_store.add_object(commit))
        subject = b"commit: " + commit.message.splitlines()[0]
        kwargs = {"committer": commit.committer, "timestamp": now, "timezone": offset}
        if head is None:
            ok = _past_stale_locks(
                lambda: repo.refs.add_if_new(b"HEAD", commit.id, message=subject, **kwargs)
            )
        else:
            ok = _past_stale_locks(
                lambda: repo.refs.set_if_equals(
                    b"HEAD", head, commit.id, message=subject, **kwargs
                )
            )
        if not ok:
            raise StorageError("memory history moved while committing; nothing was committed")
        self._stage(repo, {p.decode("utf-8", "surrogateescape"): sha for p, sha, _ in blobs})
        return commit.id.decode("ascii")

    def _stage(self, repo: Repo, committed: dict[str, bytes]) -> None:
        """Point the index's store entries at the blobs just committed.

        Keeps ``git status`` in any client clean. Written directly, never through
        dulwich's ``stage`` (which runs ``.gitattributes`` filter drivers); our commits
        never read the index, so a failure here only affects that view.
        """
        try:
            try:
                index = repo.open_index()
            except NoIndexPresent:
                index = Index(repo.index_path(), read=False)
            for rel in sorted(set(committed) | {os.fsdecode(p) for p in index}):
                if not self.is_store_path(rel):
                    continue
                key = rel.encode("utf-8", "surrogateescape")
                try:
                    st = os.lstat(self.workspace / rel)
                except OSError:
                    st = None
                if rel in committed and st is not None and stat.S_ISREG(st.st_mode):
                    index[key] = index_entry_from_stat(st, committed[rel], mode=_FILE_MODE)
                elif key in index:
                    del index[key]
            _past_stale_locks(index.write)
        except Exception as err:  # best effort by design, see above
            log.warning("could not update the git index in %s: %s", self.workspace, err)

    # -- reading ------------------------------------------------------------------

    def _resolve(self, repo: Repo, prefix: str) -> bytes:
        """The one commit reachable from HEAD (whole history) whose sha starts with prefix."""
        want = prefix.strip().lower()
        head = _head_sha(repo)
        matches: list[bytes] = []
        if len(want) >= _MIN_PREFIX and re.fullmatch(r"[0-9a-f]+", want):
            matches = [
                c.id
                for c in self._walk(repo, head, all_parents=True)
                if c.id.decode("ascii").startswith(want)
            ]
        if len(matches) == 1:
            return matches[0]
        recent = [_short(c.id) for _, c in zip(range(5), self._walk(repo, head), strict=False)]
        what = "is ambiguous" if matches else "matches no memory version"
        raise UnknownCommit(f"{prefix!r} {what}", recent=recent)

    @staticmethod
    def _walk(repo: Repo, head: bytes | None, *, all_parents: bool = False) -> Iterator[Commit]:
        """Commits from HEAD, newest first: the first-parent line, or every ancestor."""
        todo, seen = deque([head] if head else []), set()
        while todo:
            sha = todo.popleft()
            if sha in seen:
                continue
            seen.add(sha)
            commit = repo[sha]
            yield commit
            todo.extend(commit.parents if all_parents else commit.parents[:1])

    def _info(self, repo: Repo, commit: Commit) -> CommitInfo:
        parent = repo[commit.parents[0]].tree if commit.parents else None
        old, new = _tree_ids(repo, parent), _tree_ids(repo, commit.tree)
        files = tuple(sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p)))
        message = commit.message.decode("utf-8", "replace").rstrip("\n")
        sha = commit.id.decode("ascii")
        return CommitInfo(
            sha=sha,
            short_sha=sha[:_SHORT],
            message=message,
            subject=message.split("\n", 1)[0],
            time=datetime.fromtimestamp(commit.commit_time).strftime("%Y-%m-%d %H:%M"),
            files=files,
        )

    def log(self, limit: int = 20, prefix: str | None = None) -> list[CommitInfo]:
        """First-parent history, newest first; with ``prefix`` only commits whose
        message starts with it are returned (and counted toward ``limit``)."""
        out: list[CommitInfo] = []
        with self._open() as repo:
            for commit in self._walk(repo, _head_sha(repo)):
                if len(out) >= limit:
                    break
                if prefix is None or commit.message.decode("utf-8", "replace").startswith(prefix):
                    out.append(self._info(repo, commit))
        return out

    def show(self, sha_prefix: str) -> CommitDiff:
        """One version and its full unified diff against its first parent."""
        with self._open() as repo:
            commit = repo[self._resolve(repo, sha_prefix)]
            parent = repo[commit.parents[0]].tree if commit.parents else None
            summary = summarize(
                _load(repo, _tree_ids(repo, parent)),
                _load(repo, _tree_ids(repo, commit.tree)),
                cap=None,
            )
            info = self._info(repo, commit)
        return CommitDiff(**vars(info), diff=summary.diff)

    def diff_summary(
        self, old_sha: str | None = None, new: Literal["worktree"] | str = "worktree"
    ) -> DiffSummary:
        """Changes from ``old_sha`` (default HEAD) to the working files or a commit."""
        with self._open() as repo:
            head = _head_sha(repo)
            old = self._resolve(repo, old_sha) if old_sha else head
            before = _load(repo, _tree_ids(repo, repo[old].tree if old else None))
            if new == "worktree":
                after = self._worktree(repo, head)
            else:
                after = _load(repo, _tree_ids(repo, repo[self._resolve(repo, new)].tree))
        return summarize(before, after, cap=self._diff_cap)

    # -- undo ---------------------------------------------------------------------

    def revert(
        self, sha_prefix: str, *, message: str | None = None, after_cursor: int = 0
    ) -> RevertResult:
        """Undo exactly one commit as a new commit, keeping every later change.

        Per file changed by the commit: three-way merge of base = the commit's version,
        ours = the working file, theirs = the parent's version. Any conflict raises
        RevertConflict before anything is written or committed. ``memory/.dream_cursor``
        is left alone: what was undone stays undone, so Dream must not read the same
        history again. Each line the undo takes out of a memory file is appended to the
        ledger (``memory/reverted.jsonl``, with ``after_cursor`` = the last history
        cursor now) in the same commit, so Dream can leave it out later. Uncommitted
        edits are first committed as ``manual: edits before restore``.
        """
        with self._locked(), self._open() as repo:
            target = self._resolve(repo, sha_prefix)
            commit = repo[target]
            short = _short(target)
            if not commit.parents:
                raise RevertRefused(f"{short} is the first version; there is nothing before it")
            head = _head_sha(repo)
            base = _load(repo, _tree_ids(repo, commit.tree))
            theirs = _load(repo, _tree_ids(repo, repo[commit.parents[0]].tree))
            ours = self._worktree(repo, head)
            changed = sorted(
                p for p in base.keys() | theirs.keys()
                if self.is_store_path(p) and p != CURSOR_PATH and base.get(p) != theirs.get(p)
            )
            merged, conflicts = {}, []
            for path in changed:
                result = self._merge_file(path, base.get(path), ours.get(path), theirs.get(path))
                if result is False:
                    conflicts.append(path)
                else:
                    merged[path] = result
            if conflicts:
                raise RevertConflict(target.decode("ascii"), conflicts)
            writes = {p: v for p, v in merged.items() if v != ours.get(p)}
            if not writes:
                return RevertResult(target.decode("ascii"), None, ())
            forgotten = self._forgotten(target.decode("ascii"), base, theirs, writes, after_cursor)
            if forgotten:
                ledger = writes.get(LEDGER_PATH, ours.get(LEDGER_PATH))
                writes[LEDGER_PATH] = serialize(ledger, forgotten)
            manual = self._commit(repo, MANUAL_MESSAGE)
            self._apply_writes(writes)
            summary = summarize(
                {p: ours[p] for p in writes if p in ours},
                {p: v for p, v in writes.items() if v is not None},
                cap=None,
            )
            subject = message or f"restore: undo {short}"
            new_sha = self._commit(repo, f"{subject}\n\n{summary.stats()}")
            files = tuple(p for p in writes if p != LEDGER_PATH or LEDGER_PATH in merged)
            return RevertResult(target.decode("ascii"), new_sha, files, manual, tuple(forgotten))

    @staticmethod
    def _forgotten(
        sha: str, base: Snapshot, theirs: Snapshot, writes: Mapping[str, bytes | None], after: int
    ) -> list[RevertedLine]:
        """Lines the undone commit added that the undo takes out of the memory files."""
        when = datetime.now().strftime("%Y-%m-%d %H:%M")
        out: list[RevertedLine] = []
        for path, data in writes.items():
            if path in (CURSOR_PATH, GITIGNORE, LEDGER_PATH):
                continue
            decode = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
            before, added, now = decode(theirs.get(path)), decode(base.get(path)), decode(data)
            old, kept = set(content_lines(before)), set(content_lines(now))
            for line in dict.fromkeys(content_lines(added)):
                if line not in old and line not in kept:
                    out.append(RevertedLine(path, line.strip(), when, after, sha))
        return out

    @staticmethod
    def _merge_file(
        path: str, base: bytes | None, ours: bytes | None, theirs: bytes | None
    ) -> bytes | Literal[False] | None:
        """Merged content, None for "file absent", False for a conflict."""
        if ours == base:
            return theirs
        if theirs == base or ours == theirs:
            return ours
        merged = None
        if None not in (base, ours, theirs):
            merged = merge3(base, ours, theirs)  # type: ignore[type-var]
        return merged if merged is not None else False

    def _apply_writes(self, writes: dict[str, bytes | None]) -> None:
        for rel, data in writes.items():
            path = self.workspace / rel
            try:
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    atomic_write_bytes(path, data)  # a StorageError of its own
            except OSError as err:
                raise StorageError(f"could not write {path}: {err.strerror or err}") from err
