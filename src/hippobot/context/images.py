"""Image attachments: file paths in the session, data-URL blocks on the wire.

A user turn stores only the image *paths* (``media``); each request re-reads them into
OpenAI-style ``image_url`` blocks. Blocks are cached by ``(path, mtime_ns, size)`` so a
replayed image costs nothing and is byte-identical to what was sent before (the provider's
prompt cache depends on that). The type is sniffed from the file's first bytes, never from
its extension.

These functions do blocking file I/O; async callers wrap them in ``asyncio.to_thread``.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from hippobot.errors import UserError
from hippobot.messages import ContentBlock

__all__ = ["MAX_IMAGE_BYTES", "SUPPORTED", "load_image_block", "sniff_image_type", "user_content"]

MAX_IMAGE_BYTES = 20 * 1024 * 1024
SUPPORTED = "png, jpeg, gif, webp"
_CACHE_MAX_CHARS = 64 * 1024 * 1024  # total base64 kept in memory

_cache: OrderedDict[tuple[str, int, int], str] = OrderedDict()
_cache_chars = 0
_lock = threading.Lock()


def sniff_image_type(head: bytes) -> str | None:
    """MIME type from magic bytes (PNG, JPEG, GIF, WEBP), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _remember(key: tuple[str, int, int], url: str) -> None:
    global _cache_chars
    with _lock:
        if key in _cache:
            return
        _cache[key] = url
        _cache_chars += len(url)
        while _cache_chars > _CACHE_MAX_CHARS and len(_cache) > 1:
            _, old = _cache.popitem(last=False)
            _cache_chars -= len(old)


def _data_url(path: Path) -> str:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(f"image not found: {path}") from None
    except OSError as exc:
        raise UserError(f"cannot read image {path}: {exc.strerror or exc}") from None
    if not path.is_file():
        raise UserError(f"not an image: {path} (supported: {SUPPORTED})")
    if st.st_size > MAX_IMAGE_BYTES:
        raise UserError(
            f"image too large: {path} ({st.st_size / 1e6:.1f} MB; the limit is "
            f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB)"
        )
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    with _lock:
        url = _cache.get(key)
        if url is not None:
            _cache.move_to_end(key)
            return url
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read image {path}: {exc.strerror or exc}") from None
    mime = sniff_image_type(data[:16])
    if mime is None:
        raise UserError(f"not an image: {path} (supported: {SUPPORTED})")
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    _remember(key, url)
    return url


def load_image_block(path: Path) -> ContentBlock:
    """An ``image_url`` block with the file as a data URL.

    Raises :class:`~hippobot.errors.UserError` for a missing, oversized or non-image file.
    Each call returns a fresh dict; the URL string is shared from the cache.
    """
    return ContentBlock(type="image_url", image_url={"url": _data_url(Path(path))})


def user_content(text: str, media: Sequence[str | Path] | None) -> str | list[ContentBlock]:
    """A user message's content: ``text`` alone, or image blocks first and then the text."""
    if not media:
        return text
    blocks = [load_image_block(Path(p).expanduser()) for p in media]
    blocks.append(ContentBlock(type="text", text=text))
    return blocks
