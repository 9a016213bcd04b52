"""Opening workspace files that someone else may have planted or replaced: the one owner.

hippobot reads its workspace *outside* the ``exec`` sandbox, and a sandboxed command can
write anything into the workspace, symbolic links included. So every reader of a workspace
file (prompt, memory, skills, sessions, history, the recall index, Dream, the memory page,
import) opens it here, which guards against two things:

* **Where the file is.** ``within`` names the folder the file must stay inside (the
  workspace, a project, nanobot's home). A symbolic link on the way is followed only while
  its target stays inside that folder and outside its ``.git`` and ``.hippobot`` folders
  (at any depth, in any letter case): ``AGENTS.md -> notes/agents.md`` works, while
  ``AGENTS.md -> ~/.hippobot/config.json``, ``sessions/api/x.jsonl -> <another user's
  session>`` or ``memory/MEMORY.md -> .git/config`` raise :class:`LinkOutside`. The path is
  walked one component at a time from an open descriptor of ``within`` (``openat`` with
  ``O_NOFOLLOW``), reading each link itself, so a component swapped for a link while we
  look cannot redirect the open either.
* **What the file is.** A FIFO in place of a session file would block ``open()`` until a
  writer appears; a link to ``/dev/zero`` never ends. Files are opened without blocking and
  anything but a regular file is refused (:class:`NotRegularFile`; a folder raises
  ``IsADirectoryError``, as ``open()`` would).

Both errors are ``OSError``\\ s, so readers that already turn an unreadable file into one
clear line (or an empty value and a warning) handle them the same way.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from hippobot.workspace import PROTECTED_DIRS

__all__ = [
    "PROTECTED_NAMES",
    "LinkOutside",
    "NotRegularFile",
    "open_fd",
    "open_regular",
    "read_regular",
    "read_text",
]

#: Folders a link may never lead into: version history and its settings, hippobot's state.
PROTECTED_NAMES = PROTECTED_DIRS
_MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_WALKS = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd


class NotRegularFile(OSError):
    """The path is a FIFO, socket or device (or a symlink to one)."""


class LinkOutside(PermissionError):
    """A symbolic link that leads out of the folder a file must stay in (or into its
    ``.git``/``.hippobot``); it was not followed."""


def _protected(parts: list[str]) -> bool:
    return any(p.rstrip(". ").casefold() in PROTECTED_NAMES for p in parts)


def _outside(path: Path | str, target: str, root: str) -> LinkOutside:
    return LinkOutside(
        errno.EACCES,
        f"a symbolic link to {target}, outside {root} or inside its .git/.hippobot; "
        "hippobot does not follow it (remove the link)",
        str(path),
    )


def _relative_parts(path: Path | str, within: Path | str) -> tuple[str, list[str]]:
    """The real path of ``within`` and the components of ``path`` below it (lexically)."""
    root = os.path.realpath(within)
    given = os.path.abspath(os.fspath(path))
    base = os.path.abspath(os.fspath(within))
    for prefix in (base, root):
        if given == prefix:
            return root, []
        if given.startswith(prefix.rstrip(os.sep) + os.sep):
            return root, given[len(prefix.rstrip(os.sep)) + 1 :].split(os.sep)
    raise LinkOutside(errno.EACCES, f"not inside {within}", str(path))


def open_fd(
    path: Path | str, *, within: Path | str, flags: int = os.O_RDONLY, mode: int = 0o666
) -> int:
    """``os.open(path, flags, mode)`` for a regular file that stays inside ``within``.

    Links are followed as the module docstring says; ``O_CREAT`` creates the last
    component (never through a link that leaves ``within``). The descriptor is blocking
    and close-on-exec. Raises :class:`LinkOutside`, :class:`NotRegularFile`,
    ``IsADirectoryError`` or the ``OSError`` of the failing system call.
    """
    root, parts = _relative_parts(path, within)
    if not _WALKS:  # no openat/O_NOFOLLOW: check the resolved path, then open it
        real = os.path.realpath(os.path.join(root, *parts))
        inside = os.path.relpath(real, root).split(os.sep)
        if inside[0] == ".." or (real != os.path.join(root, *parts) and _protected(inside)):
            raise _outside(path, real, root)
        return _checked(os.open(real, flags | os.O_NONBLOCK | _CLOEXEC, mode), path)
    return _walk(path, root, parts, flags, mode)


def _walk(path: Path | str, root: str, parts: list[str], flags: int, mode: int) -> int:
    dirs = [os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)]  # dirs[i]: depth i below root
    names: list[str] = []  # the real components from root to dirs[-1]
    todo = list(reversed(parts))
    links = 0
    followed = False
    target = ""  # the last link's own text, to name it when it leads out
    try:
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not names:
                    raise _outside(path, target or "..", root)
                names.pop()
                os.close(dirs.pop())
                continue
            here = dirs[-1]
            last = not todo
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                if not (last and flags & os.O_CREAT):
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path)) from None
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path))
                target = os.readlink(name, dir_fd=here)
                followed = True
                rest = target
                if os.path.isabs(target):
                    real = os.path.normpath(target)
                    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
                        raise _outside(path, target, root)
                    while len(dirs) > 1:
                        os.close(dirs.pop())
                    names = []
                    rest = real[len(root.rstrip(os.sep)) + 1 :]
                todo.extend(reversed(rest.split("/")))
                continue
            if followed and _protected([*names, name]):
                raise _outside(path, target, root)
            if not last:
                try:
                    dirs.append(os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=here))
                except NotADirectoryError:
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path)) from None
                names.append(name)
                continue
            fd = os.open(name, flags | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, mode, dir_fd=here)
            return _checked(fd, path)
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    except OSError as exc:
        if exc.errno == errno.ELOOP and not isinstance(exc, LinkOutside) and links <= _MAX_LINKS:
            # O_NOFOLLOW met a link that appeared after we looked: someone is racing us.
            raise _outside(path, "(a link that appeared while opening)", root) from None
        raise
    finally:
        for fd in dirs:
            os.close(fd)


def _checked(fd: int, path: Path | str) -> int:
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(
                errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path)
            )
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: Path | str, *, within: Path | str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file inside ``within`` (see :func:`open_fd`)."""
    return os.fdopen(open_fd(path, within=within), "rb")


def read_regular(path: Path | str, limit: int = -1, *, within: Path | str) -> bytes:
    """The bytes of a regular file inside ``within`` (at most ``limit`` if given)."""
    with open_regular(path, within=within) as fh:
        return fh.read(limit)


def read_text(path: Path | str, *, within: Path | str, errors: str = "replace") -> str:
    """The UTF-8 text of a regular file inside ``within`` (undecodable bytes per ``errors``)."""
    return read_regular(path, within=within).decode("utf-8", errors)
