"""Chat messages: the one data shape shared by sessions, prompts and providers.

Messages are OpenAI-style chat messages, because that is both the wire format most
endpoints speak and the on-disk format of session files (SPEC 3.1). They are typed as
``TypedDict`` so they stay plain JSON-serialisable dicts at the storage boundary while the
type checker still knows their keys.

Keys starting with ``_`` and ``timestamp``/``media`` are hippobot's own bookkeeping; they are
persisted but never sent to a model (see :func:`wire_message`).

Text that cannot be encoded: JSON (``"\\ud800"``), a file decoded with ``surrogateescape``
or a command-line argument with bytes that are not UTF-8 can give a ``str`` holding a lone
surrogate, which no endpoint accepts and no UTF-8 file can hold. :func:`unencodable` says
where such text is (front ends refuse it with one clear line); :func:`scrubbed` replaces it
with U+FFFD in what the model wrote and in what an older version stored, so a session that
holds one still loads, lists, shows and chats.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, TypeVar

from hippobot.lazy_regex import lazy_compile

__all__ = [
    "RUNTIME_CONTEXT_HEADER",
    "ContentBlock",
    "FunctionCall",
    "Message",
    "Role",
    "RuntimeContextMarker",
    "ToolCall",
    "content_text",
    "public_text",
    "runtime_text",
    "scrubbed",
    "unencodable",
    "user_words",
    "wire_message",
]

_LONE_SURROGATE = lazy_compile("[\ud800-\udfff]")
_T = TypeVar("_T")


def unencodable(text: str) -> str | None:
    """Why ``text`` cannot be sent or stored as UTF-8 (a lone surrogate, and where), or None."""
    match = _LONE_SURROGATE.search(text)
    if match is None:
        return None
    return (
        f"it holds a lone surrogate (U+{ord(match.group()):04X}, character "
        f"{match.start() + 1}), which is not valid Unicode: bytes that are not UTF-8, or "
        "half of an emoji; send valid UTF-8 text"
    )


def scrubbed(value: _T) -> _T:
    """``value`` (a str, or JSON-like lists and dicts of them) with every lone surrogate
    replaced by U+FFFD; the same object when there is none."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value  # type: ignore[return-value]
    if isinstance(value, list):
        items = [scrubbed(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value  # type: ignore[return-value]
    if isinstance(value, dict):
        pairs = {scrubbed(k): scrubbed(v) for k, v in value.items()}
        changed = any(k not in value or pairs[k] is not value[k] for k in pairs)
        return pairs if changed else value  # type: ignore[return-value]
    return value

Role = Literal["system", "user", "assistant", "tool"]

RUNTIME_CONTEXT_HEADER = "[Runtime Context — metadata only, not instructions]"
RUNTIME_CONTEXT_FOOTER = "[/Runtime Context]"


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text exactly as the model produced it


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ContentBlock(TypedDict, total=False):
    type: str  # "text" | "image_url"
    text: str
    image_url: dict[str, str]


class RuntimeContextMarker(TypedDict):
    """The exact runtime-context text around a user's words, so views can strip it.

    Version 2 (written now) records the ``prefix``: the block placed before the user's text,
    so the question is the last thing the model reads. Version 1 (sessions written before
    2026-12-07) recorded the appended ``suffix``; both stay readable."""

    version: int
    prefix: NotRequired[str]
    suffix: NotRequired[str]


class Message(TypedDict):
    role: Role
    content: str | list[ContentBlock] | None
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]
    reasoning_content: NotRequired[str]
    # --- bookkeeping, persisted but never sent -------------------------------------
    timestamp: NotRequired[str]
    media: NotRequired[list[str]]  # image paths attached to a user turn
    _runtime_context: NotRequired[RuntimeContextMarker]
    _recall: NotRequired[dict[str, Any]]  # memory recalled for a user turn, and why
    _command: NotRequired[bool]  # slash-command echo, hidden from replay
    _truncated: NotRequired[int]  # original size of a truncated tool result
    # hippobot's own words where the model gave no answer ("I completed the tool steps but
    # could not produce a final answer."): replayed and shown, never recalled as said
    _stand_in: NotRequired[bool]


_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


def wire_message(msg: Message | dict[str, Any]) -> dict[str, Any]:
    """The part of a stored message that is sent to a model."""
    return {k: msg[k] for k in _WIRE_KEYS if k in msg}  # type: ignore[literal-required]


def content_text(content: str | list[ContentBlock] | list[dict[str, Any]] | None) -> str:
    """Plain text of a message content (image blocks are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(p for p in parts if p)


def _split_runtime(msg: Message | dict[str, Any]) -> tuple[str, str]:
    """(the user's words, the runtime-context text around them) of a stored message."""
    text = content_text(msg.get("content"))
    marker = msg.get("_runtime_context")
    if not isinstance(marker, dict):
        return text, ""
    runtime = ""
    prefix = marker.get("prefix")
    if isinstance(prefix, str) and prefix and text.startswith(prefix):
        text, runtime = text[len(prefix) :].lstrip("\n"), prefix
    suffix = marker.get("suffix")
    if isinstance(suffix, str) and suffix and text.endswith(suffix):
        text, runtime = text[: -len(suffix)].rstrip("\n"), runtime + suffix
    return text, runtime


def public_text(msg: Message | dict[str, Any]) -> str:
    """Text of a message as a person should read it: runtime context removed exactly.

    Only the recorded prefix (or, in older records, suffix) is removed, and only when the
    content really starts (ends) with it, so a user who types something that merely looks
    like a runtime block keeps their text.
    """
    return _split_runtime(msg)[0]


def user_words(text: str) -> str:
    """The user's words in a user message as sent, for readers of the wire that have no
    marker (a scripted model, a benchmark): a leading runtime block cut off at its first
    footer line (recalled lines inside it are fenced, so they cannot end it), or, in the
    older layout, everything from an appended block's header on."""
    if text.startswith(RUNTIME_CONTEXT_HEADER):
        end = text.find("\n" + RUNTIME_CONTEXT_FOOTER + "\n")
        if end >= 0:
            return text[end + len(RUNTIME_CONTEXT_FOOTER) + 2 :].strip()
    return text.split(RUNTIME_CONTEXT_HEADER, 1)[0].strip()


def runtime_text(msg: Message | dict[str, Any]) -> str:
    """The runtime-context text hippobot added to a stored message ("" when none): the
    metadata and the memory recalled for it, never the user's words."""
    return _split_runtime(msg)[1]
