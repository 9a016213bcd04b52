"""Session keys and the file each one lives in: a reversible, collision-free mapping.

A key ``channel:chat`` (split at the *first* colon) lives in
``sessions/<channel>/<chat>.jsonl``. Each part is escaped on its own so that every key
maps to exactly one path and every canonical path maps back to exactly one key:

* ``%``, ``/``, ``\\``, ``:``, ``<>"|?*``, control characters (C0, DEL, C1) and lone
  surrogates become ``%XX`` (upper-case hex of their UTF-8 bytes). Everything else,
  including non-ASCII letters, stays as it is so file names remain readable.
* A leading ``.`` (hidden files, ``..``), a trailing ``.`` or space (dropped by Windows)
  and the first letter of a Windows device name (``con``, ``nul``, ``com1`` ...) are
  escaped too.
* An empty part is written ``%%``. A key without any colon (``heartbeat``) keeps its
  text as the channel and uses ``%`` as the chat file: ``sessions/heartbeat/%.jsonl``.
  Neither sentinel can come out of escaping a non-empty string, because escaping only
  ever emits ``%`` followed by two hex digits.
* A part whose escaped form is longer than 200 bytes is split over several directory
  levels; every piece but the last ends with the marker ``%+`` (again impossible in
  escaped text), so file-name length limits are never hit.

Invariant: ``relpath_to_key(key_to_relpath(k)) == k`` for every string ``k``, and
``relpath_to_key(p)`` is ``None`` for any path that ``key_to_relpath`` would not produce.
Case-insensitive file systems can still fold keys that differ only in letter case.
"""

from __future__ import annotations

import functools
import re
from pathlib import PurePath, PurePosixPath

from hippobot.errors import UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.workspace import SESSION_SUFFIX, SESSIONS_DIR

__all__ = [
    "MAX_KEY_LENGTH",
    "SESSIONS_DIR",
    "key_to_relpath",
    "relpath_to_key",
    "validate_key",
]

MAX_KEY_LENGTH = 512

_SUFFIX = SESSION_SUFFIX
_EMPTY = "%%"  # an empty channel or chat part
_NO_CHAT = "%"  # the key has no colon at all
_CONTINUED = "%+"  # this directory level continues the same part
_MAX_COMPONENT_BYTES = 200  # leaves room for ".jsonl.corrupt" under the usual 255
_UNSAFE = frozenset('%/\\:<>"|?*')
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"COM{i}" for i in range(1, 10)]
    + [f"LPT{i}" for i in range(1, 10)]
)
_TOKEN = lazy_compile(r"%[0-9A-F]{2}|[^%]", re.DOTALL)


def _needs_escape(ch: str) -> bool:
    code = ord(ch)
    return (
        ch in _UNSAFE
        or code < 0x20
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xDFFF  # lone surrogates cannot be file names
    )


def _pct(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _fix_component(tokens: list[str]) -> list[str]:
    """Escape the characters that are unsafe only at a name's edges."""
    tokens = list(tokens)
    if tokens[0] == ".":
        tokens[0] = _pct(".")
    if tokens[-1] in (".", " "):
        tokens[-1] = _pct(tokens[-1])
    stem = "".join(tokens).split(".", 1)[0]
    if stem.upper() in _WINDOWS_DEVICES:
        tokens[0] = _pct(tokens[0])
    return tokens


def _encode_part(part: str) -> list[str]:
    """Escape one key part into one or more path components."""
    if not part:
        return [_EMPTY]
    tokens = [_pct(ch) if _needs_escape(ch) else ch for ch in part]
    chunks: list[list[str]] = [[]]
    size = 0
    for token in tokens:
        width = len(token.encode("utf-8", "surrogatepass"))
        if chunks[-1] and size + width > _MAX_COMPONENT_BYTES - 4:
            chunks.append([])
            size = 0
        chunks[-1].append(token)
        size += width
    names = ["".join(_fix_component(chunk)) for chunk in chunks]
    return [name + _CONTINUED for name in names[:-1]] + names[-1:]


def _decode_part(text: str) -> str | None:
    """Undo :func:`_encode_part` on the joined components; ``None`` if malformed."""
    if text == _EMPTY:
        return ""
    raw = bytearray()
    pos = 0
    for match in _TOKEN.finditer(text):
        if match.start() != pos:
            return None
        token = match.group()
        if len(token) == 3:
            raw.append(int(token[1:], 16))
        else:
            raw.extend(token.encode("utf-8", "surrogatepass"))
        pos = match.end()
    if pos != len(text):
        return None
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


@functools.lru_cache(maxsize=1024)  # a pure function, called several times per store call
def key_to_relpath(key: str) -> PurePosixPath:
    """The session file of ``key``, relative to the workspace (``sessions/…/….jsonl``)."""
    channel, colon, chat = key.partition(":")
    chat_parts = _encode_part(chat) if colon else [_NO_CHAT]
    *dirs, last = [*_encode_part(channel), *chat_parts]
    # A folder must never look like a session file (channel "0.jsonl" would make one).
    dirs = [d[:-1] + _pct(d[-1]) if d.endswith(_SUFFIX) else d for d in dirs]
    return PurePosixPath(SESSIONS_DIR, *dirs, last + _SUFFIX)


def relpath_to_key(path: str | PurePath) -> str | None:
    """The key whose canonical file is ``path`` (relative to the workspace), else ``None``."""
    parts = PurePosixPath(PurePath(path).as_posix()).parts
    if len(parts) < 3 or parts[0] != SESSIONS_DIR or not parts[-1].endswith(_SUFFIX):
        return None
    components = [*parts[1:-1], parts[-1][: -len(_SUFFIX)]]
    groups: list[str] = []
    current = ""
    for component in components:
        if component.endswith(_CONTINUED):
            current += component[: -len(_CONTINUED)]
            continue
        groups.append(current + component)
        current = ""
    if current or len(groups) != 2:
        return None
    channel = _decode_part(groups[0])
    if channel is None:
        return None
    if groups[1] == _NO_CHAT:
        key = channel
    else:
        chat = _decode_part(groups[1])
        if chat is None:
            return None
        key = f"{channel}:{chat}"
    # Only the exact spelling key_to_relpath produces is canonical (no "%41" for "A").
    return key if key_to_relpath(key) == PurePosixPath(*parts) else None


def validate_key(key: str) -> str:
    """Return ``key`` if it can name a session, else raise :class:`UserError`."""
    if not isinstance(key, str) or not key:
        raise UserError("session key is empty: use 'channel:chat', for example 'cli:direct'")
    if len(key) > MAX_KEY_LENGTH:
        raise UserError(
            f"session key is {len(key)} characters long; the limit is {MAX_KEY_LENGTH}"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError("session key is not valid Unicode text (lone surrogate)") from None
    return key
