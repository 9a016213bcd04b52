"""Reading files that another program (or a bug) may have replaced with something else.

A FIFO in place of a session file blocks ``open()`` until a writer appears; a symlink to
``/dev/zero`` never ends. :func:`open_regular` opens without blocking and refuses
anything that is not a regular file, so such a file becomes one clear error
(:class:`NotRegularFile`, an ``OSError``) instead of a hang. Folders raise
``IsADirectoryError``, as ``open()`` would.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["NotRegularFile", "open_regular", "read_regular"]


class NotRegularFile(OSError):
    """The path is a FIFO, socket or device (or a symlink to one)."""


def open_regular(path: Path | str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file; never blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(
                errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path)
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int = -1) -> bytes:
    """The bytes of a regular file (at most ``limit`` if given); see :func:`open_regular`."""
    with open_regular(path) as fh:
        return fh.read(limit)
