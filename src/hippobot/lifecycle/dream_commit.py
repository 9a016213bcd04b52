"""Dream's working copies and its commit point: where a run's edits become the memory files.

On disk, under ``.hippobot/dream/`` (names from :class:`~hippobot.workspace.Workspace`)::

    staged/         the copies a run edits (never the live files)
    base/           the memory files as the run found them (the merge base)
    manifest.json   the commit point: {"cursor", "time", "accounting", "applying"}

A run goes idle → prepared (``staged/`` + ``base/``) → committed (manifest written) → applied
(all of it gone). Invariants, each tested by stopping a run at every step
(``tests/lifecycle/test_dream_commit.py``):

- Before the manifest exists, nothing live has changed: a crash leaves the files and the
  cursor as they were, and :meth:`StagedRun.recover` throws the copies away.
- From the manifest on, the run is done: :meth:`~StagedRun.recover` rolls it forward, now or
  on the next run, under the memory files' locks. Each live file is replaced atomically
  (old or new, never half) by a three-way merge of the copy with the live file (a user's
  edit made meanwhile survives); a file already replaced merges to itself, so rolling
  forward twice changes nothing.
- The Dream cursor moves only there, after every file is merged, and before the one git
  commit that records files and cursor together.
- The user's own uncommitted edits are committed apart (``manual: edits before dream``)
  once, before the first live file is touched; the manifest then says ``applying``, so a
  roll-forward after a crash mid-apply does not file Dream's half-applied change as theirs.

Blocking (file and git work): call from a worker thread.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hippobot.atomic import atomic_write_text
from hippobot.errors import StorageError
from hippobot.safeio import read_regular
from hippobot.workspace import MEMORY_FILES, Workspace

if TYPE_CHECKING:
    from pathlib import Path

    from hippobot.memory.gitstore import GitStore
    from hippobot.memory.store import MemoryStore

__all__ = ["Applied", "StagedRun", "read_bytes", "read_file"]

log = logging.getLogger(__name__)

Applied = tuple[tuple[str, ...], str | None]  # (live files changed, commit sha)


def read_bytes(path: Path, within: Path) -> bytes:
    """A file Dream reads (memory file, staged copy, guide): b"" when missing or unreadable,
    and when it is a link out of ``within`` or not a regular file (:mod:`hippobot.safeio`):
    what such a link points at never reaches the model."""
    try:
        return read_regular(path, within=within)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        log.warning("Dream does not read %s: %s", path, exc.strerror or exc)
        return b""


def read_file(path: Path, within: Path) -> str:
    """:func:`read_bytes` as text (undecodable bytes replaced)."""
    return read_bytes(path, within).decode("utf-8", "replace")


class StagedRun:
    """The staged copies of one workspace's Dream and its commit point.

    ``on_step`` is called with the name of each step of :meth:`recover` before it runs
    (``"manual-commit"``, ``"merge <file>"``, ``"cursor"``, ``"git-commit"``, ``"clear"``,
    ``"archive"``) and with ``"manifest"`` before the commit point is written: tests stop a
    run there to check what a crash at that moment leaves.
    """

    def __init__(
        self,
        paths: Workspace,
        memory: MemoryStore,
        git: Callable[[], GitStore],
        *,
        on_step: Callable[[str], None] | None = None,
    ) -> None:
        self.paths = paths
        self.memory = memory
        self._git = git
        self.staged = paths.dream_staged
        self.base_dir = paths.dream_base
        self.manifest = paths.dream_manifest
        self._step = on_step or (lambda name: None)

    # --- the working copies -------------------------------------------------------------

    def prepare(self) -> None:
        """Copy the memory files to ``staged/`` and ``base/``; a full or read-only disk is
        one clear :class:`StorageError` and leaves nothing behind."""
        try:
            shutil.rmtree(self.staged, ignore_errors=True)
            for name in MEMORY_FILES:
                src, dst = self.paths.memory_file(name), self.staged / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(read_bytes(src, self.paths.root))  # a link out is staged as empty
            shutil.rmtree(self.base_dir, ignore_errors=True)
            shutil.copytree(self.staged, self.base_dir)
        except OSError as exc:
            shutil.rmtree(self.staged, ignore_errors=True)
            why = exc.args[0][0][2] if isinstance(exc, shutil.Error) and exc.args[0] else exc
            raise StorageError(
                f"Dream could not prepare its working copies under {self.paths.dream_state} "
                f"({why}); nothing was changed and the entries stay pending"
            ) from exc

    def read(self) -> dict[str, str]:
        """The staged texts (``""`` for a file that cannot be read)."""
        return {name: read_file(self.staged / name, self.staged) for name in MEMORY_FILES}

    def base(self) -> dict[str, str]:
        return {name: read_file(self.base_dir / name, self.base_dir) for name in MEMORY_FILES}

    def write(self, files: Mapping[str, str]) -> None:
        """Replace the staged copies that differ from ``files``."""
        current = self.read()
        for name, text in files.items():
            if name in MEMORY_FILES and current.get(name) != text:
                atomic_write_text(self.staged / name, text)

    def changed(self) -> bool:
        """Whether any staged copy differs from the file as the run found it."""
        staged, base = self.read(), self.base()
        return any((self.staged / n).exists() and staged[n] != base[n] for n in MEMORY_FILES)

    def discard(self) -> None:
        shutil.rmtree(self.staged, ignore_errors=True)
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- the commit point ---------------------------------------------------------------

    def commit(self, cursor: int, accounting: str = "") -> Applied:
        """Write the manifest (from here on the run counts as done), then apply it."""
        manifest = {
            "cursor": cursor,
            "time": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M"),
            "accounting": accounting,
        }
        self._step("manifest")
        atomic_write_text(self.manifest, json.dumps(manifest))
        return self.recover()

    def recover(self) -> Applied:
        """Roll a committed-but-unapplied run forward (idempotent); returns the live files it
        changed and the commit. Without a manifest: drop the staged copies, change nothing.

        Holds the memory files' locks throughout, so an ``edit_file`` in a chat or a restore
        never lands between reading a live file and replacing it with the merge.
        """
        if not self.manifest.exists():
            shutil.rmtree(self.staged, ignore_errors=True)
            return (), None
        with self.paths.memory_files_lock():
            manifest = self._load()
            if manifest is None:
                shutil.rmtree(self.staged, ignore_errors=True)
                return (), None
            git = self._ready_git(manifest)
            changed = self._merge_all()
            self._step("cursor")
            self.memory.set_dream_cursor(int(manifest["cursor"]))
            sha = self._record(git, manifest)
            self._clear()
        self._archive()
        return tuple(changed), sha

    def _load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.manifest.read_text(encoding="utf-8"))
            int(data["cursor"])
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("Dream's manifest %s is unreadable; discarding that run", self.manifest)
            self.manifest.unlink(missing_ok=True)
            return None
        return data if isinstance(data, dict) else None

    def _ready_git(self, manifest: dict[str, Any]) -> GitStore:
        git = self._git()
        if not git.initialized:
            git.init()  # versions are always on: the first Dream starts the history
        if not manifest.get("applying"):
            self._step("manual-commit")
            if git.available and git.initialized:
                git.commit("manual: edits before dream")  # the user's edits, apart from Dream's
            atomic_write_text(self.manifest, json.dumps({**manifest, "applying": True}))
        return git

    def _merge_all(self) -> list[str]:
        from hippobot.memory.gitstore import merge3

        changed: list[str] = []
        for name in MEMORY_FILES:
            staged = self.staged / name
            if not staged.exists():
                continue
            new = read_file(staged, self.staged)
            base = read_file(self.base_dir / name, self.base_dir) if (self.base_dir / name).exists() else new
            live_path = self.paths.memory_file(name)
            live = read_file(live_path, self.paths.root)
            if new == base:
                continue  # Dream did not touch it: leave the live file (and any user edit) alone
            merged = merge3(base, live, new) if live != base else new
            if merged is None:
                log.warning("%s changed during Dream and the edits overlap; keeping your version", name)
                continue
            if merged != live:
                self._step(f"merge {name}")
                atomic_write_text(live_path, merged)
                changed.append(name)
        return changed

    def _record(self, git: GitStore, manifest: dict[str, Any]) -> str | None:
        """One commit of the memory files and the cursor, when a memory file changed."""
        if not (git.available and git.initialized):
            return None
        from hippobot.memory.gitstore import dream_message

        summary = git.diff_summary()
        # The cursor moves on every run; only content edits count (and make a commit).
        edits = tuple(f for f in summary.files if f.path in MEMORY_FILES)
        if not edits:
            return None
        message = dream_message(str(manifest.get("time", "")), replace(summary, files=edits))
        if manifest.get("accounting"):
            message += "\n\nAccounting:\n" + str(manifest["accounting"])
        self._step("git-commit")
        return git.commit(message)

    def _clear(self) -> None:
        self._step("clear")
        self.manifest.unlink(missing_ok=True)
        self.discard()

    def _archive(self) -> None:
        self._step("archive")
        try:
            self.memory.archive_processed()
        except StorageError as exc:  # the archive stays as it is; the next run tries again
            log.warning("could not move processed history entries to the archive: %s", exc)
