"""Versioning what a chat turn's tools changed in the memory files, after the reply.

The reply is shown as soon as the session holds it; the git commit of the turn's memory edits
comes after, so it never delays a reply. To lose nothing when the process dies in between
(``agent -m`` killed right after its answer), the edit is first written down in a small
journal (``Workspace.pending_versions``): which session, the versioned files' contents before
the turn, and HEAD at that moment. Committing a journal removes it; a journal left behind by a
killed process is committed by the next one (:meth:`ChatVersions.resume`), whichever step it
died in: the commits already made are recognised from HEAD, so none is made twice.

Commits, as before: a hand edit not yet committed goes first, on its own, as ``manual: edits
before chat`` (so undoing the chat commit never touches it), then ``memory: edited in chat
(KEY)`` with the files as they are now.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.atomic import atomic_write_bytes
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.memory.gitstore import GitStore

__all__ = ["MANUAL", "ChatVersions", "chat_message"]

log = logging.getLogger(__name__)

MANUAL = "manual: edits before chat"


def chat_message(key: str) -> str:
    return f"memory: edited in chat ({key})"


class ChatVersions:
    """Journal, commit and resume the version commits of chat edits (blocking: call from a
    worker thread)."""

    def __init__(self, workspace: Workspace, git: Callable[[], GitStore]) -> None:
        self.paths = workspace
        self._git = git

    def journal(self, key: str, before: dict[str, bytes], touched: set[str]) -> Path | None:
        """Write down that ``touched`` (versioned paths) changed in session ``key``'s turn;
        ``before`` holds their earlier contents (a path missing from it did not exist)."""
        if not touched:
            return None
        from hippobot.lifecycle.versions import ensure_history

        git = self._git()
        ensure_history(git)
        if not git.available:
            return None
        head = git.log(limit=1)
        record = {
            "v": 1,
            "key": key,
            "head": head[0].sha if head else None,
            "before": {rel: None if before.get(rel) is None else base64.b64encode(before[rel]).decode()
                       for rel in sorted(touched)},
        }
        folder = self.paths.pending_versions
        folder.mkdir(parents=True, exist_ok=True)
        path = self.paths.pending_version(f"{time.time_ns():020d}-{os.getpid()}")
        atomic_write_bytes(path, json.dumps(record).encode())
        return path

    def commit(self, path: Path) -> None:
        """Make the commits ``path`` stands for (those not made yet), then remove it."""
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            key = str(record["key"])
            before = {rel: None if data is None else base64.b64decode(data)
                      for rel, data in record["before"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("dropping an unreadable pending version %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return
        git = self._git()
        if git.available:
            top = git.log(limit=1)
            head, subject = (top[0].sha, top[0].subject) if top else (None, "")
            if head == record.get("head"):  # nothing of it committed yet
                git.commit(MANUAL, contents=before)
                git.commit(chat_message(key))  # the manual commit holds the rest
            elif subject != chat_message(key):  # died after the manual commit (or later work)
                git.commit(chat_message(key))
        path.unlink(missing_ok=True)

    def pending(self) -> list[Path]:
        try:
            return sorted(self.paths.pending_versions.glob(self.paths.pending_version("*").name))
        except OSError:
            return []

    def resume(self) -> int:
        """Commit every journal left behind (oldest first); how many there were."""
        found = self.pending()
        for path in found:
            try:
                self.commit(path)
            except Exception as exc:  # stays pending, tried again next time
                log.warning("could not version a pending memory edit: %s", exc)
        return len(found)
