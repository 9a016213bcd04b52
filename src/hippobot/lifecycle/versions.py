"""User-facing texts for memory versions: ``/dream-log``, ``/dream-restore`` and the CLI twins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hippobot.errors import UserError

if TYPE_CHECKING:
    from hippobot.memory.gitstore import GitStore

__all__ = ["describe_log", "describe_restore", "list_versions"]


def _unavailable(git: GitStore) -> str | None:
    if not git.initialized:
        return (
            "Memory versioning is not set up in this workspace yet: run `hippobot onboard` "
            "(Dream commits every change it makes once it is)."
        )
    if not git.available:
        return f"Memory versioning is off: {git.broken_reason}. Chat still works; fix or remove {git.workspace / '.git'}."
    return None


def describe_log(git: GitStore, sha: str | None) -> str:
    problem = _unavailable(git)
    if problem:
        return problem
    if sha is None:
        latest = git.log(limit=1, prefix="dream:") or git.log(limit=1)
        if not latest:
            return "No memory versions yet."
        sha = latest[0].sha
    try:
        commit = git.show(sha)
    except UserError as exc:
        return f"{exc}. See /dream-restore for the list of versions."
    files = ", ".join(commit.files) or "(no files)"
    body = commit.diff.strip() or "(no file changes in this version)"
    return (
        f"## {commit.subject}\ncommit {commit.short_sha}  {commit.time}\nfiles: {files}\n\n"
        f"```diff\n{body}\n```\nUndo exactly this change with /dream-restore {commit.short_sha}"
    )


def list_versions(git: GitStore, limit: int = 15) -> str:
    problem = _unavailable(git)
    if problem:
        return problem
    versions = git.log(limit=limit)
    if not versions:
        return "No memory versions yet."
    lines = ["Memory versions (newest first):"]
    lines += [f"  {v.short_sha}  {v.time}  {v.subject}" for v in versions]
    lines.append("Show one with /dream-log <sha>; undo one with /dream-restore <sha>.")
    return "\n".join(lines)


def describe_restore(git: GitStore, sha: str) -> str:
    problem = _unavailable(git)
    if problem:
        return problem
    try:
        result = git.revert(sha)
    except UserError as exc:
        return f"{exc}\n\n{list_versions(git)}"
    if result.new_sha is None:
        return f"Nothing to undo: the changes of {sha} are already gone."
    files = ", ".join(result.files)
    return (
        f"Undid {result.reverted[:8]} as new version {result.new_sha[:8]} ({files}); later "
        f"changes were kept. The Dream cursor now matches the restored state."
    )
