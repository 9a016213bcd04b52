"""Which paths the file tools may touch.

:class:`PathPolicy` turns a path the model wrote into an absolute, fully resolved path, or
refuses with a :class:`~hippobot.errors.ToolError` the model can read. Invariants:

* Containment is decided on the *resolved* path (every symlink followed, ``..`` folded;
  for a file that does not exist yet, its existing ancestors are resolved), so neither
  ``..`` nor a symlink inside the workspace can reach outside it.
* Whatever ``restrict`` says, a path with a NUL byte, a path over 4096 bytes or a component
  over 255 bytes is refused, and so is anything that exists but is not a regular file or
  a directory (devices, FIFOs, sockets): reading a FIFO would hang, reading a device can
  block or never end.
* ``read_only_roots`` (e.g. the built-in skills shipped with the package) can be read but
  never written.
* With ``allowed_files`` set, exactly those files and nothing else can be used (Dream may
  touch SOUL.md, USER.md and memory/MEMORY.md only).
* Nothing is ever written inside a folder named ``.git`` or ``.hippobot``, nor to a file
  named ``.gitattributes``, at any depth and in any letter case, whether the path names
  them or a symlink leads there: they hold the memory history, its configuration (filter
  drivers, hooks) and hippobot's own state, and a write there could make a later git
  operation run a program.
* ``hidden_roots`` (hippobot's home, holding ``config.json`` and its keys) can be neither
  read nor written, except where a root (the workspace) lies inside them.

A check and the later open are two system calls, so a process racing to swap a symlink in
between is not stopped; the policy guards against the model's mistakes, not a local attacker.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from hippobot.errors import ToolError
from hippobot.workspace import PROTECTED_DIRS

__all__ = ["MAX_COMPONENT_BYTES", "MAX_PATH_BYTES", "PROTECTED_DIRS", "PathPolicy", "protected_part"]

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
PROTECTED_FILES = (".gitattributes",)


def protected_part(parts: Sequence[str]) -> str | None:
    """The first of ``parts`` (path components) that makes a write forbidden, or None.

    Compared case-insensitively and ignoring trailing dots and spaces, because some
    filesystems treat ``.GIT`` or ``.git.`` as ``.git``.
    """
    for part in parts:
        name = part.rstrip(". ").casefold() if part not in (".", "..") else part
        if name in PROTECTED_DIRS or name in PROTECTED_FILES:
            return part
    return None


class PathPolicy:
    """Resolves and confines the paths file tools receive from the model."""

    def __init__(
        self,
        root: Path,
        *,
        extra_roots: Sequence[Path] = (),
        read_only_roots: Sequence[Path] = (),
        restrict: bool = True,
        allowed_files: Iterable[Path] | None = None,
        hidden_roots: Sequence[Path] = (),
    ) -> None:
        self.root = _real(Path(root).expanduser())
        self.hidden_roots = tuple(_real(Path(r).expanduser()) for r in hidden_roots)
        self.extra_roots = tuple(_real(Path(r).expanduser()) for r in extra_roots)
        self.read_only_roots = tuple(_real(Path(r).expanduser()) for r in read_only_roots)
        self.restrict = restrict
        self.allowed_files: frozenset[Path] | None = None
        if allowed_files is not None:
            self.allowed_files = frozenset(
                _real(p if Path(p).is_absolute() else self.root / p) for p in allowed_files
            )

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The resolved absolute path for ``path``, or :class:`ToolError` saying why not.

        Relative paths are relative to the workspace root; ``~`` is the user's home.
        """
        _check_syntax(path)
        candidate = Path(os.path.expanduser(path))
        if not candidate.is_absolute():
            candidate = self.root / candidate
        real = _real(candidate)
        if len(os.fsencode(str(real))) > MAX_PATH_BYTES:
            raise ToolError(f"{path}: the resolved path is longer than {MAX_PATH_BYTES} bytes")
        via = "" if str(real) == os.path.normpath(candidate) else f" (it resolves to {real})"
        if self.allowed_files is not None and real not in self.allowed_files:
            allowed = ", ".join(sorted(self.display(p) for p in self.allowed_files))
            raise ToolError(
                f"{path}{via} is not allowed here; only these files can be used: {allowed}"
            )
        if self.restrict and not self._inside(real, self._roots(for_write=False)):
            raise ToolError(
                f"{path}{via} is outside the workspace {self.root}; "
                "set tools.restrictToWorkspace to false to allow it"
            )
        if self._hidden(real):
            raise ToolError(
                f"{path}{via} is inside hippobot's home, which holds its configuration and "
                "keys; tools cannot use it"
            )
        if for_write and self._read_only(real):
            raise ToolError(f"{path}{via} is read-only; write inside the workspace {self.root}")
        if for_write:
            self._check_protected(path, via, Path(os.path.normpath(candidate)), real)
        _check_kind(path, real)
        return real

    def display(self, path: Path) -> str:
        """``path`` as the model should see it: relative to the root when inside it."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return str(path)
        return str(rel) if rel.parts else "."

    def _roots(self, *, for_write: bool) -> tuple[Path, ...]:
        base = (self.root, *self.extra_roots)
        return base if for_write else (*base, *self.read_only_roots)

    def _read_only(self, real: Path) -> bool:
        """Inside a read-only root and not inside a writable one nested in it."""
        return self._inside(real, self.read_only_roots) and not self._inside(
            real, self._roots(for_write=True)
        )

    def _hidden(self, real: Path) -> bool:
        return self._inside(real, self.hidden_roots) and not self._inside(
            real, self._roots(for_write=False)
        )

    def _check_protected(self, path: str, via: str, lexical: Path, real: Path) -> None:
        """Refuse a write into ``.git``/``.hippobot`` or to ``.gitattributes`` (module doc)."""
        for candidate in (lexical, real):
            base = next((r for r in self._roots(for_write=True) if self._inside(candidate, (r,))), None)
            parts = candidate.relative_to(base).parts if base else candidate.parts
            hit = protected_part(parts)
            if hit is not None:
                raise ToolError(
                    f"{path}{via}: file tools never write {hit} (it holds version history, "
                    "git settings or hippobot's own state, and could make git run programs)"
                )

    @staticmethod
    def _inside(real: Path, roots: Iterable[Path]) -> bool:
        return any(real == r or real.is_relative_to(r) for r in roots)


def _real(path: Path) -> Path:
    """Resolve every symlink that exists on the way; the non-existing rest stays lexical."""
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: cannot resolve path ({exc})") from None


def _check_syntax(path: str) -> None:
    if not isinstance(path, str):
        raise ToolError(f"path must be a string, got {type(path).__name__}")
    if not path.strip():
        raise ToolError("path is empty")
    if "\x00" in path:
        raise ToolError("path contains a NUL byte")
    raw = os.fsencode(path) if _encodable(path) else path.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_PATH_BYTES:
        raise ToolError(f"path is longer than {MAX_PATH_BYTES} bytes")
    if any(len(part) > MAX_COMPONENT_BYTES for part in raw.split(b"/")):
        raise ToolError(f"a path component is longer than {MAX_COMPONENT_BYTES} bytes")


def _encodable(path: str) -> bool:
    try:
        os.fsencode(path)
    except UnicodeError:
        return False
    return True


def _check_kind(path: str, real: Path) -> None:
    """Refuse anything that exists and is neither a regular file nor a directory."""
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror or exc}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ToolError(
            f"{path} is a device, FIFO or socket; only regular files and directories can be used"
        )
