"""Atomic file replacement: readers see the old file or the new one, whole, never a mix.

The one way hippobot replaces a file: memory files, cursors, a compacted history, config,
the ``serve`` token, a new session file, files the model writes with its tools, files a
version restore writes, Dream's staged copies, files the nanobot import brings, the
endpoint holder note.
``hippobot.memory`` re-exports these names.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from hippobot.errors import StorageError

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None,
                       durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, whole.

    A temp file in the same directory is written, fsynced, renamed over ``path`` and the
    directory fsynced. The file keeps the mode of the file it replaces (new files get the
    usual umask-derived mode), or gets ``mode`` when given (the temp file has it from the
    start, so a private file is never readable by others, not even half-written). A link at
    ``path`` is replaced, never written through. On failure the temp file is removed, the
    old file is left untouched and :class:`StorageError` is raised.

    ``durable=False`` skips the two fsyncs, for a hint that may be lost in a crash (never
    for data): readers still see the old file or the new one, whole.
    """
    path = Path(path)
    directory = path.parent
    tmp = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        try:
            _write_fully(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777 if mode is None else mode)
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException as exc:  # an interrupted write leaves no temp file either
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise StorageError(
                f"could not write {path}: {exc}; the previous file is unchanged"
            ) from exc
        raise
    if durable:
        _fsync_dir(directory)


def _write_fully(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write_text(path: Path, text: str, *, mode: int | None = None,
                      durable: bool = True) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode, durable=durable)
