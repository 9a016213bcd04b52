"""Reading the workspace's Markdown files cheaply, every turn.

The prompt is rebuilt before every model call, so the files behind it are read through a
cache keyed by ``(mtime_ns, size, inode)``: an edit shows on the next turn without a restart,
and an unchanged file costs one ``stat``.

Invariants:

* A file whose stat key is unchanged is not read again, except while it is *racy*: its
  mtime is within :data:`RACY_WINDOW_NS` of the moment we last read it. File systems stamp
  mtimes with a coarse clock, so two writes in quick succession can leave the same key;
  racy entries are re-read (as git does for its index) and, when the bytes are identical,
  the previous :class:`FileText` object is returned unchanged.
* The same bytes always give an equal :class:`FileText`; reading never raises for content
  (undecodable bytes become U+FFFD with one logged warning; huge files are cut with a
  visible note).
* Bundled templates are package data read once per process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from hippobot.safeio import read_regular
from hippobot.workspace import BOOTSTRAP_FILES, MEMORY_MD

__all__ = [
    "BOOTSTRAP_FILES",
    "MEMORY_FILE",
    "RACY_WINDOW_NS",
    "FileCache",
    "FileText",
    "WorkspaceFiles",
    "bundled_template",
    "is_template",
    "template_versions",
]

log = logging.getLogger(__name__)

MEMORY_FILE = MEMORY_MD
RACY_WINDOW_NS = 2_000_000_000  # covers coarse (1-2 s) mtime clocks too


@dataclass(frozen=True)
class FileText:
    """A file's text as the prompt uses it.

    ``text`` has ``\\r\\n`` normalised to ``\\n`` and, when ``truncated``, ends with a visible
    note; ``original_chars`` is the length before cutting. ``warning`` explains anything
    surprising (not UTF-8, unreadable). A missing file is ``exists=False`` with empty text.
    ``full`` is the whole text when it was cut (memory files are then selected by relevance
    instead, see :mod:`hippobot.context.memory_select`), else empty.
    """

    text: str
    truncated: bool = False
    original_chars: int = 0
    warning: str | None = None
    exists: bool = True
    full: str = ""


_MISSING = FileText("", exists=False)


@dataclass
class _Entry:
    key: tuple[int, int, int]
    read_at_ns: int
    raw: bytes
    value: FileText


def _decode(raw: bytes, display: str) -> tuple[str, str | None]:
    try:
        text = raw.decode("utf-8-sig")
        warning = None
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        warning = f"{display} is not valid UTF-8; undecodable bytes are shown as \ufffd"
        log.warning("%s", warning)
    return text.replace("\r\n", "\n"), warning


def _cut(text: str, max_chars: int | None, display: str) -> tuple[str, bool]:
    if max_chars is None or len(text) <= max_chars:
        return text, False
    note = (
        f"[... truncated: {max_chars} of {len(text)} characters shown; "
        f"edit {display} to shorten it]"
    )
    return f"{text[:max_chars].rstrip()}\n\n{note}", True


class FileCache:
    """Stat-keyed cache of decoded text files (thread-safe; shared by loader and skills).

    ``disk_reads`` counts real reads, so callers and tests can see the cache working.
    """

    def __init__(
        self,
        *,
        max_chars: int | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.max_chars = max_chars
        self.disk_reads = 0
        self._clock_ns = clock_ns
        self._entries: dict[Path, _Entry] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def read(self, path: Path, display: str | None = None, *, within: Path) -> FileText:
        """The text of ``path``, a file inside ``within`` (``display`` names it in notes and
        warnings). A link that leaves ``within`` is not followed: the file reads as empty,
        with a warning."""
        display = display or str(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            self._forget(path)
            return _MISSING
        except OSError as exc:
            return self._unreadable(path, display, exc)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            entry = self._entries.get(path)
        if entry and entry.key == key and st.st_mtime_ns < entry.read_at_ns - RACY_WINDOW_NS:
            return entry.value
        read_at = self._clock_ns()
        try:
            # A FIFO, a link to /dev/zero or a link out of the workspace is refused, not read.
            raw = read_regular(path, within=within)
        except FileNotFoundError:
            self._forget(path)
            return _MISSING
        except OSError as exc:  # a directory, a FIFO or device, no permission...
            return self._unreadable(path, display, exc)
        self.disk_reads += 1
        if entry and entry.raw == raw:
            value = entry.value  # same bytes: keep the object so downstream caches hit
        else:
            text, warning = _decode(raw, display)
            cut, truncated = _cut(text, self.max_chars, display)
            value = FileText(cut, truncated, len(text), warning, full=text if truncated else "")
        with self._lock:
            self._entries[path] = _Entry(key, read_at, raw, value)
        return value

    def _forget(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)

    def _unreadable(self, path: Path, display: str, exc: OSError) -> FileText:
        self._forget(path)
        warning = f"cannot read {display}: {exc.strerror or exc}"
        if warning not in self._warned:  # once, not on every turn
            self._warned.add(warning)
            log.warning("%s", warning)
        return FileText("", warning=warning, exists=path.exists())


@cache
def bundled_template(name: str) -> str | None:
    """Text of the packaged workspace template ``name`` (e.g. ``"memory/MEMORY.md"``)."""
    try:
        ref = resources.files("hippobot").joinpath("templates", *name.split("/"))
        return ref.read_text(encoding="utf-8").replace("\r\n", "\n")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def template_versions(name: str) -> list[str]:
    """The bundled template ``name`` and the versions it replaced (``templates/earlier/``):
    a workspace made before a template changed still holds the earlier one, untouched."""
    return [t for t in (bundled_template(name), bundled_template(f"earlier/{name}")) if t is not None]


def is_template(text: str, template_name: str) -> bool:
    """True when ``text`` is an untouched bundled template, the current one or one it
    replaced (whitespace-trimmed compare). A missing template is never matched."""
    text = text.replace("\r\n", "\n").strip()
    return any(text == template.strip() for template in template_versions(template_name))


class WorkspaceFiles:
    """The Markdown files the prompt is built from, for one workspace (and project).

    With a ``project`` selected, the bootstrap files come from the project root and *replace*
    the workspace's (no fallback); memory always comes from the workspace.
    """

    def __init__(
        self,
        workspace: Path,
        project: Path | None = None,
        *,
        max_file_chars: int = 20_000,
        cache: FileCache | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        if project is not None and _same_dir(Path(project), self.workspace):
            project = None
        self.project = Path(project) if project is not None else None
        self.cache = cache or FileCache(max_chars=max_file_chars)

    @property
    def disk_reads(self) -> int:
        return self.cache.disk_reads

    def read(self, name: str, *, root: Path | None = None) -> FileText:
        """``name`` (a ``/``-separated path) under ``root`` (default: the workspace)."""
        base = root or self.workspace
        display = name if self.project is None else str(base / name)
        return self.cache.read(base.joinpath(*name.split("/")), display, within=base)

    def bootstrap(self) -> list[tuple[str, str]]:
        """``(filename, text)`` of AGENTS.md, SOUL.md, USER.md worth showing, in that order.

        Empty files and untouched templates are skipped.
        """
        root = self.project or self.workspace
        found: list[tuple[str, str]] = []
        for name in BOOTSTRAP_FILES:
            text = self.read(name, root=root).text
            if text.strip() and not is_template(text, name):
                found.append((name, text))
        return found

    def whole(self, name: str) -> str | None:
        """The uncut text of a bootstrap or memory file that is shown (None: not shown)."""
        root = (self.project or self.workspace) if name in BOOTSTRAP_FILES else self.workspace
        value = self.read(name, root=root)
        text = value.full or value.text
        if not text.strip() or is_template(text, name):
            return None
        return text

    def memory(self) -> str | None:
        """MEMORY.md's text, or None when it is missing, empty or the untouched template."""
        text = self.read(MEMORY_FILE).text
        if not text.strip() or is_template(text, MEMORY_FILE):
            return None
        return text


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()
