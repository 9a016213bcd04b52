"""Memory versions for people and scripts: ``/dream-log``, ``/dream-restore`` and the CLI twins.

Two layers: the ``*_data`` functions return values or raise (:class:`~hippobot.errors.UserError`
for bad input, ``VersioningUnavailable`` for a broken history), so the command line can exit
non-zero with one line; the ``describe_*`` functions turn the same values, or the error, into
the text shown in chat. :class:`Hints` names the follow-up commands where the user is: slash
commands in chat, shell commands in a shell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hippobot.errors import HippobotError, UserError
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.memory.gitstore import CommitDiff, CommitInfo, GitStore, RevertResult

__all__ = [
    "CHAT_HINTS",
    "SHELL_HINTS",
    "Hints",
    "commit_json",
    "describe_log",
    "describe_restore",
    "ensure_history",
    "format_log",
    "format_restore",
    "format_versions",
    "list_versions",
    "log_data",
    "restore_data",
    "restore_json",
    "versions_data",
]


@dataclass(frozen=True, slots=True)
class Hints:
    """How to spell the follow-up commands where the user is."""

    log: str
    restore: str


CHAT_HINTS = Hints(log="/dream-log", restore="/dream-restore")
SHELL_HINTS = Hints(log="hippobot memory log", restore="hippobot memory restore")

_NO_VERSIONS = (
    "No memory versions yet: the first Dream or memory edit in chat starts the history."
)


def ensure_history(git: GitStore) -> None:
    """Versions are always on: create the workspace's history if it is missing (idempotent)."""
    if not git.initialized:
        git.init()


def _ready(git: GitStore) -> bool:
    """False when there is no history yet; raises when it exists but cannot be read."""
    from hippobot.memory.gitstore import VersioningUnavailable

    if not git.initialized:
        return False
    reason = git.broken_reason
    if reason:
        raise VersioningUnavailable(
            f"memory versioning is off: {reason}. Chat still works; fix or move "
            f"{Workspace(git.workspace).git_dir} aside"
        )
    return True


# --- values (raise on failure) -------------------------------------------------------


def log_data(git: GitStore, sha: str | None) -> CommitDiff | None:
    """One version with its diff: ``sha``, else the latest Dream change (else the latest).
    ``None`` when there is no history yet and no ``sha`` was asked for."""
    from hippobot.memory.gitstore import UnknownCommit

    if not _ready(git):
        if sha is None:
            return None
        raise UnknownCommit(f"{sha!r} matches no memory version (there is no history yet)")
    if sha is None:
        latest = git.log(limit=1, prefix="dream:") or git.log(limit=1)
        if not latest:
            return None
        sha = latest[0].sha
    return git.show(sha)


def versions_data(git: GitStore, limit: int = 15) -> list[CommitInfo]:
    return git.log(limit=limit) if _ready(git) else []


def restore_data(git: GitStore, sha: str, *, after_cursor: int = 0) -> RevertResult:
    """Undo one version; the lines it takes out go to the ledger (``after_cursor`` = the
    last history cursor now, ``MemoryStore.last_cursor()``), the Dream cursor stays."""
    from hippobot.memory.gitstore import UnknownCommit

    if not _ready(git):
        raise UnknownCommit(f"{sha!r} matches no memory version (there is no history yet)")
    return git.revert(sha, after_cursor=after_cursor)


# --- JSON ----------------------------------------------------------------------------


def commit_json(commit: CommitInfo) -> dict[str, Any]:
    data: dict[str, Any] = {
        "sha": commit.sha, "short_sha": commit.short_sha, "subject": commit.subject,
        "message": commit.message, "time": commit.time, "files": list(commit.files),
    }
    diff = getattr(commit, "diff", None)
    if diff is not None:
        data["diff"] = diff
    return data


def restore_json(result: RevertResult) -> dict[str, Any]:
    return {
        "reverted": result.reverted,
        "new_sha": result.new_sha,
        "files": list(result.files),
        "manual_sha": result.manual_sha,
        "forgotten": [{"file": f.file, "text": f.text} for f in result.forgotten],
    }


# --- text ----------------------------------------------------------------------------


def format_log(commit: CommitDiff | None, hints: Hints) -> str:
    if commit is None:
        return _NO_VERSIONS
    files = ", ".join(commit.files) or "(no files)"
    body = commit.diff.strip() or "(no file changes in this version)"
    return (
        f"## {commit.subject}\ncommit {commit.short_sha}  {commit.time}\nfiles: {files}\n\n"
        f"```diff\n{body}\n```\nUndo exactly this change with {hints.restore} {commit.short_sha}"
    )


def format_versions(versions: list[CommitInfo], hints: Hints) -> str:
    if not versions:
        return _NO_VERSIONS
    lines = ["Memory versions (newest first):"]
    lines += [f"  {v.short_sha}  {v.time}  {v.subject}" for v in versions]
    lines.append(f"Show one with {hints.log} <sha>; undo one with {hints.restore} <sha>.")
    return "\n".join(lines)


def format_restore(result: RevertResult, sha: str) -> str:
    if result.new_sha is None:
        return f"Nothing to undo: the changes of {sha} are already gone."
    files = ", ".join(result.files)
    text = (
        f"Undid {result.reverted[:8]} as new version {result.new_sha[:8]} ({files}); later "
        "changes were kept."
    )
    if result.forgotten:
        shown = "\n".join(f"  {f.file}: {f.text}" for f in result.forgotten[:10])
        more = f"\n  … and {len(result.forgotten) - 10} more" if len(result.forgotten) > 10 else ""
        text += (
            "\nDream will not add these lines again unless a later conversation states them:\n"
            f"{shown}{more}"
        )
    return text


# --- chat (errors become text) -------------------------------------------------------


def describe_log(git: GitStore, sha: str | None, hints: Hints = CHAT_HINTS) -> str:
    try:
        return format_log(log_data(git, sha), hints)
    except UserError as exc:
        return f"{exc}. See {hints.restore} for the list of versions."
    except HippobotError as exc:
        return str(exc)


def list_versions(git: GitStore, limit: int = 15, hints: Hints = CHAT_HINTS) -> str:
    try:
        return format_versions(versions_data(git, limit), hints)
    except HippobotError as exc:
        return str(exc)


def describe_restore(
    git: GitStore, sha: str, hints: Hints = CHAT_HINTS, *, after_cursor: int = 0
) -> str:
    try:
        return format_restore(restore_data(git, sha, after_cursor=after_cursor), sha)
    except UserError as exc:
        return f"{exc}\n\n{list_versions(git, hints=hints)}"
    except HippobotError as exc:
        return str(exc)
