"""Tool calls a model wrote as text, recovered as real tool calls.

Many small local models (behind Ollama, llama.cpp or vLLM) answer a request that offers tools by
*writing* the call into the message content instead of the ``tool_calls`` field::

    ```json
    {"name": "memory_get", "arguments": {"citation": "history#12"}}
    ```
    <tool_call>{"name": "read_file", "arguments": {"path": "USER.md"}}</tool_call>
    <tools>{"name": "memory_search", "arguments": {"query": "cat"}}</tools>

:func:`recover_tool_calls` turns such text into calls; :class:`TextToolCallProvider` does it on a
stream, holding back text from the first line that could start a call so the raw block is never
shown to the user.

The parser is conservative: text is recovered only when, from the first line that starts a
block, it consists of nothing but tool-call blocks (and at most a short closing remark), and
every block is a call. A reply that *opens* with such a block is a call whatever prose or
data follows it (that text, an imagined result written before the tool ran, is dropped). JSON data (no arguments
key, or keys a call does not have), a code block that is not a call, or a long explanation
around an example all stay text. An offered tool's definition pasted beside a call (its
name, description and JSON Schema, as the request sent it) is dropped, and the call runs;
pasted alone it stays text. A block shaped like a call (a name and an explicit
arguments key) that names a tool the request did not offer, or whose arguments are not an
object, is a call too: running it gives the model the registry's error (unknown tool, bad
arguments) to correct, where showing it would give the user a raw block. Accepted forms of
one call (in a fenced block, bare, inside ``<tool_call>`` or ``<tools>`` tags, inside the
``<tool_response>`` tags of a result when what they hold is a call, or as a list
of calls):

* ``{"name": N, "arguments": {...}}`` (also ``"parameters"``, ``"args"``, ``"input"``,
  ``"tool_input"``; arguments may be a JSON string of an object);
* ``{"function": N, "arguments": {...}}``, ``{"tool": N, ...}``, ``{"tool_name": N, ...}``;
* ``{"type": "function", "function": {"name": N, "arguments": ...}}`` and ``{"tool_calls": [...]}``;
* ``<function=N>{...}</function>`` (Llama 3.x);
* an object wrapped in doubled braces ``{{ ... }}`` (a chat-template artefact seen with
  Qwen2.5 behind llama.cpp), or opened with one and closed without it;
* a call's arguments alone, when their one key is the one required parameter of exactly one
  offered tool: ``{"citation": "session x#11"}``;
* an object written as a Python literal, strings in single quotes (read as literals only);
* an object in bold or code marks, with bare keys and names:
  ``**{name: memory_get, arguments: {"citation": "..."}}**`` (Qwen2.5-Coder-1.5B's first
  reply to a newcomer's "Hi, I'm Maya").
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hippobot.lazy_regex import lazy_compile
from hippobot.providers.base import (
    ChatRequest,
    Finish,
    Provider,
    Restart,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from hippobot.providers.endpoints import is_local

__all__ = [
    "Recovered",
    "TextToolCall",
    "TextToolCallProvider",
    "TextToolMode",
    "offered_tools",
    "recover_tool_calls",
    "text_tools_enabled",
]

TextToolMode = Literal["auto", "on", "off"]

# A line whose first non-blank characters are one of these may start a written tool call.
_TRIGGERS = (
    "```", "~~~", "{", "[", "<tool_call>", "<function=", "<|python_tag|>", "<tools>", "<tool_response>",
    "**{", "*{", "`{",
)
# Markdown marks around a written call: "**{name: ..., arguments: {...}}**".
_WRAP = lazy_compile(r"(\*\*|\*|`)(?=\{)")
# Empty tool markup and nothing else: a chat-template artefact (Qwen2.5 behind llama.cpp
# answered "<tools>\n\n</tools>"), never something to show the user.
_EMPTY_MARKUP = lazy_compile(r"\A\s*(?:<(tools|tool_call|tool_response)>\s*</\1>\s*)+\Z")
_MAX_PROSE_BEFORE = 400  # "Let me look that up." is fine; an essay around an example is not
_MAX_PROSE_AFTER = 200
_NAME_KEYS = ("name", "function", "tool", "tool_name")
_ARG_KEYS = ("arguments", "parameters", "args", "input", "tool_input", "tool_args")
_EXTRA_KEYS = frozenset({"type", "id", "call_id"})
_FENCE = lazy_compile(r"(```|~~~)[ \t]*([\w.+-]*)[ \t]*\n?")
_FUNCTION_TAG = lazy_compile(r"<function=([\w.-]+)>")
_CALL_TAG = lazy_compile(r"<(tool_call|tools|tool_response)>")
# A name a model could mean as a tool it was not offered ("memory", "search_memory"): such a
# call is still taken when its shape says "call" (a name and an explicit arguments key), so
# the registry answers "unknown tool, available: …" to the model instead of the raw block
# reaching the user.
_TOOLISH_NAME = lazy_compile(r"[A-Za-z_][\w.-]{0,63}")


def offered_tools(schemas: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """Tool name → its one required parameter (``None`` unless there is exactly one), from
    a request's schemas: what a written call may name, and where a bare string argument
    goes."""
    out: dict[str, str | None] = {}
    for schema in schemas:
        fn = schema.get("function") or {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        required = (fn.get("parameters") or {}).get("required") or []
        out[name] = required[0] if len(required) == 1 and isinstance(required[0], str) else None
    return out


def text_tools_enabled(mode: str, *, provider: str, api_base: str | None) -> bool:
    """Whether written tool calls are recovered for this endpoint.

    ``auto`` (the default) turns recovery on for local servers
    (:func:`hippobot.providers.endpoints.is_local`: the ``ollama``, ``vllm``, ``llamacpp`` and
    LM Studio providers, and any endpoint on this machine or a private network).
    """
    if mode == "on":
        return True
    if mode == "off" or provider == "anthropic":
        return False
    return is_local(provider, api_base)


@dataclass(frozen=True, slots=True)
class TextToolCall:
    name: str
    arguments: str  # a JSON object, re-serialised


# What a block holding a tool's own schema stands for while blocks are parsed: no call, and
# no reason to keep the reply as text when a call comes with it. Qwen2.5-Coder-1.5B wrote
# memory_search's definition inside <tools> tags, then the call in a JSON block, and the
# user was shown both.
_SCHEMA_ECHO = TextToolCall("", "")


@dataclass(frozen=True, slots=True)
class Recovered:
    """The calls found in a text and the prose around them (kept as the message content)."""

    calls: tuple[TextToolCall, ...]
    before: str = ""
    after: str = ""

    @property
    def text(self) -> str:
        return "\n".join(p for p in (self.before.strip(), self.after.strip()) if p)


def recover_tool_calls(text: str, offered: Collection[str]) -> Recovered | None:
    """The tool calls written in ``text``, or None when it must stay text (see module doc)."""
    start = trigger_start(text)
    if start is None:
        return None
    return _recover(text[:start], text[start:], offered)


def _recover(before: str, blocks: str, offered: Collection[str]) -> Recovered | None:
    """``before`` (prose) then ``blocks`` (text from the first line that starts a block)."""
    if len(before.strip()) > _MAX_PROSE_BEFORE:
        return None
    # A reply that opens with a call is a call: whatever prose follows was written before any
    # tool ran (Qwen2.5 behind llama.cpp goes on to describe an imagined result), so it is
    # dropped. Prose *before* a block may be an explanation around an example: there the
    # rest must be short.
    opens_with_call = not before.strip()
    parsed = parse_blocks(blocks, offered, any_prose_after=opens_with_call)
    if parsed is None:
        return None
    calls, after = parsed
    if opens_with_call and len(after.strip()) > _MAX_PROSE_AFTER:
        after = ""
    return Recovered(calls, before, after)


def trigger_start(text: str) -> int | None:
    """Offset of the first line that starts with a block that may be a tool call."""
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith(_TRIGGERS):
            return pos + len(line) - len(stripped)
        pos += len(line)
    return None


def parse_blocks(
    text: str, offered: Collection[str], *, any_prose_after: bool = False
) -> tuple[tuple[TextToolCall, ...], str] | None:
    """Calls in ``text`` (which starts with a block) and the remark after them, or None.

    The remark must be short and hold no further block unless ``any_prose_after``."""
    calls: list[TextToolCall] = []
    pos, n = 0, len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n:
            break
        step = _block_at(text, pos, offered)
        if step is None:
            if not calls:
                return None
            if not any_prose_after and (
                len(text[pos:].strip()) > _MAX_PROSE_AFTER or trigger_start(text[pos:]) is not None
            ):
                return None
            return _real(calls, text[pos:])
        found, end = step
        if not found:
            # A reply that opened with a call may trail off into a broken block (an unclosed
            # fence of stray code) or into the result the model imagined for its call
            # (Qwen2.5-Coder-1.5B: a memory_get call, then a fenced JSON "result"): the call
            # runs, and neither block is shown.
            if calls and any_prose_after:
                return _real(calls, "")
            return None
        calls.extend(found)
        pos = end
    return _real(calls, "")


def _real(calls: list[TextToolCall], after: str) -> tuple[tuple[TextToolCall, ...], str] | None:
    """The calls without the schemas echoed beside them; None when only echoes are left
    (a reply that pastes a tool's definition and calls nothing stays text)."""
    real = tuple(c for c in calls if c is not _SCHEMA_ECHO)
    return (real, after) if real else None


def _block_at(text: str, pos: int, offered: Collection[str]) -> tuple[list[TextToolCall], int] | None:
    """The calls of the block at ``pos`` and where it ends; None when no block starts there.

    An empty list means a block is there but is not a call to an offered tool.
    """
    rest = text[pos:]
    tag = _CALL_TAG.match(rest)
    if tag is not None:  # <tool_call>…</tool_call>, or Qwen's <tools>…</tools>
        body_start = pos + tag.end()
        close = f"</{tag.group(1)}>"
        end = text.find(close, body_start)
        stop = len(text) if end < 0 else end
        after = len(text) if end < 0 else end + len(close)
        return _calls_in_body(text[body_start:stop], offered), after
    if rest.startswith("<|python_tag|>"):
        return _calls_in_body(text[pos + len("<|python_tag|>") :], offered), len(text)
    m = _FUNCTION_TAG.match(rest)
    if m is not None:
        body_start = pos + m.end()
        end = text.find("</function>", body_start)
        stop = len(text) if end < 0 else end
        after = len(text) if end < 0 else end + len("</function>")
        args = _object(text[body_start:stop].strip() or "{}")
        call = _make_call(m.group(1), args, offered) if isinstance(args, dict) else None
        return ([call] if call else []), after
    fence = _FENCE.match(rest)
    if fence is not None:
        body_start = pos + fence.end()
        end = _closing_fence(text, fence.group(1), body_start)
        stop = len(text) if end < 0 else end
        after = len(text) if end < 0 else end + len(fence.group(1))
        return _calls_in_body(text[body_start:stop], offered), after
    wrap = _WRAP.match(rest)
    if wrap is not None:
        inner = _block_at(text, pos + wrap.end(), offered)
        if inner is None:
            return None
        found, after = inner
        if text.startswith(wrap.group(1), after):
            after += len(wrap.group(1))
        return found, after
    if rest.startswith(("{", "[")):
        decoded = _decode_at(text, pos)
        if decoded is None:
            broken = _broken_call(rest, offered)
            return ([broken] if broken else []), len(text)
        value, after = decoded
        return _calls_in_value(value, offered), after
    return None


def _calls_in_body(body: str, offered: Collection[str]) -> list[TextToolCall]:
    """Calls in a fenced or tagged body: one JSON value, or several one after another."""
    body = body.strip()
    if body.startswith(("<tool_call>", "<tools>", "<tool_response>", "<function=")):  # tags inside a fence
        parsed = parse_blocks(body, offered)
        return list(parsed[0]) if parsed is not None and not parsed[1].strip() else []
    found: list[TextToolCall] = []
    pos = 0
    while pos < len(body):
        decoded = _decode_at(body, pos)
        if decoded is None:
            broken = None if found else _broken_call(body, offered)
            return [broken] if broken else []
        value, pos = decoded
        calls = _calls_in_value(value, offered)
        if not calls:
            return []
        found.extend(calls)
        while pos < len(body) and (body[pos].isspace() or body[pos] == ","):
            pos += 1
    return found


def _closing_fence(text: str, fence: str, body_start: int) -> int:
    """Where the fence opened before ``body_start`` closes, -1 when it does not: at a line
    of its own when there is one. The local model's call quoted a recalled reply, fences
    and all, as its argument (Markdown closes a fence only on a line of its own, too)."""
    own_line = re.compile(rf"^[ \t]*{re.escape(fence)}[ \t]*$", re.M).search(text, body_start)
    return own_line.start() if own_line is not None else text.find(fence, body_start)


_BROKEN_CALL = lazy_compile(
    rf"\{{\s*\"(?:{'|'.join(_NAME_KEYS)})\"\s*:\s*\"(?P<name>[\w.-]+)\"\s*,\s*"
    rf"\"(?:{'|'.join(_ARG_KEYS)})\"\s*:\s*(?P<args>.*)",
    re.S,
)


def _broken_call(block: str, offered: Collection[str]) -> TextToolCall | None:
    """A call to an offered tool whose JSON does not parse (cut off by the reply limit, or
    with a stray character: ``"citation": "… 4417``"`` followed by a backtick): it opens
    like a call, name then arguments. It is a call all the same, its arguments kept as
    written, so the registry tells the model they are not valid JSON and where; shown, it
    would be a raw block in front of the user."""
    m = _BROKEN_CALL.match(block.strip())
    if m is None or m.group("name") not in offered:
        return None
    args = m.group("args").strip()
    if args.endswith("}") and args.count("}") > args.count("{"):
        args = args[:-1].rstrip()  # the brace that closes the call, not its arguments
    return TextToolCall(m.group("name"), args)


_DECODER = json.JSONDecoder()
_DECODER = json.JSONDecoder()


def _decode_at(text: str, pos: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        pass
    escaped = _decode_bad_escapes(text, pos)
    if escaped is not None:
        return escaped
    if text.startswith("{{", pos):  # a doubled brace: decode the inner object, drop the extra "}"
        try:
            value, end = _DECODER.raw_decode(text, pos + 1)
        except ValueError:
            return None
        while end < len(text) and text[end].isspace():
            end += 1
        if end < len(text) and text[end] == "}":
            return value, end + 1
        # "{{...}}" whose last brace closes the arguments: the doubled brace is only at the
        # start (Qwen2.5-Coder-1.5B's reply, shown raw to the user until this was read).
        return value, end
    return _decode_bare_words(text, pos) or _decode_python_literal(text, pos)


# A backslash JSON does not know (a backslash before "[" or "_"): Qwen2.5-Coder-1.5B escaped
# a bracket in a citation, and the call was shown to the user raw. Pairs are read left to
# right, so the second backslash of an escaped one is never taken for an escape of its own.
_ESCAPE = lazy_compile(r"\\(.)", re.S)
_JSON_ESCAPES = frozenset('"\\/bfnrtu')


def _decode_bad_escapes(text: str, pos: int) -> tuple[Any, int] | None:
    """The value at ``pos`` read with each unknown escape ``\\x`` taken as ``x``, and where
    it ends in ``text``; None when there is none or that does not make it JSON either."""
    rest = text[pos:]
    cuts: list[int] = []  # where a dropped backslash stood, in ``rest``

    def fix(m: re.Match[str]) -> str:
        if m.group(1) in _JSON_ESCAPES:
            return m.group(0)
        cuts.append(m.start())
        return m.group(1)

    cleaned = _ESCAPE.sub(fix, rest)
    if not cuts:
        return None
    try:
        value, end = _DECODER.raw_decode(cleaned)
    except ValueError:
        return None
    # ``end`` counts characters of the cleaned text: the k-th cut stood at cleaned index
    # cut - k, so each cut before ``end`` adds its backslash back.
    dropped = sum(1 for k, cut in enumerate(cuts) if cut - k < end)
    return value, pos + end + dropped


_MAX_LITERAL = 20_000


def _decode_python_literal(text: str, pos: int) -> tuple[Any, int] | None:
    """An object or list written as a Python literal, strings in single quotes
    (``{'name': 'memory_get', 'arguments': {'citation': '...'}}``, Qwen2.5-Coder-1.5B in
    LoCoMo's BM25 arm, shown raw), read with :func:`ast.literal_eval`, which evaluates
    literals and nothing else; None when it is not one, or holds what JSON cannot."""
    if not text.startswith(("{", "["), pos):
        return None
    depth, quote, i, n = 0, "", pos, min(len(text), pos + _MAX_LITERAL)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                break
        i += 1
    else:
        return None
    try:
        value = ast.literal_eval(text[pos : i + 1])
        json.dumps(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return (value, i + 1) if isinstance(value, dict | list) else None


_BARE_WORD = lazy_compile(r"[A-Za-z_][\w.-]*")


def _decode_bare_words(text: str, pos: int) -> tuple[Any, int] | None:
    """An object whose keys or string values are written without quotes (``{name:
    memory_get, arguments: {...}}``), decoded as if they were quoted; None otherwise."""
    if not text.startswith("{", pos):
        return None
    out: list[str] = []
    depth, i, n, repaired = 0, pos, len(text), False
    while i < n:
        ch = text[i]
        if ch == '"':  # a JSON string: copied as it is
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
            continue
        word = _BARE_WORD.match(text, i)
        if word is not None:
            token = word.group(0)
            repaired = repaired or token not in ("true", "false", "null")
            out.append(token if token in ("true", "false", "null") else json.dumps(token))
            i = word.end()
            continue
        out.append(ch)
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                if not repaired:
                    return None  # nothing was bare: the strict decoder already said no
                try:
                    return json.loads("".join(out)), i + 1
                except ValueError:
                    return None
        i += 1
    return None


def _object(text: str) -> Any:
    decoded = _decode_at(text, 0)
    if decoded is None or text[decoded[1] :].strip():
        return None
    return decoded[0]


def written_value(text: str) -> Any:
    """The one value ``text`` consists of, bare or in a fenced block, read the way calls are
    read (either fence, Python literals, bare words); None when the text holds anything more.
    For a reply that is data rather than a call (:mod:`hippobot.loop.runner`)."""
    text = text.strip()
    fence = _FENCE.match(text)
    if fence is not None:
        end = _closing_fence(text, fence.group(1), fence.end())
        if end < 0 or text[end + len(fence.group(1)) :].strip():
            return None
        text = text[fence.end() : end].strip()
    return _object(text) if text.startswith(("{", "[")) else None


def _calls_in_value(value: Any, offered: Collection[str]) -> list[TextToolCall]:
    """All calls of one decoded value, or [] when any part of it is not a call."""
    items = value if isinstance(value, list) else [value]
    if not items:
        return []
    calls: list[TextToolCall] = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("tool_calls"), list) and len(item) == 1:
            inner = _calls_in_value(item["tool_calls"], offered)
            if not inner:
                return []
            calls.extend(inner)
            continue
        call = _as_call(item, offered)
        if call is None:
            return []
        calls.append(call)
    return calls


def _is_schema_echo(item: dict[str, Any], offered: Collection[str]) -> bool:
    """An offered tool's definition as the request sent it (``{"type": "function",
    "function": {"name", "description", "parameters": {"type": "object", ...}}}``, or the
    inner object alone): a name, a description and a JSON Schema, never arguments."""
    inner = item.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else item
    if fn is not item and set(item) - {"function", "type"}:
        return False
    params, name = fn.get("parameters"), fn.get("name")
    return (
        isinstance(name, str)
        and name in offered
        and isinstance(fn.get("description"), str)
        and isinstance(params, dict)
        and params.get("type") == "object"
        and set(fn) <= {"name", "description", "parameters", "strict"}
    )


def _as_call(item: Any, offered: Collection[str]) -> TextToolCall | None:
    if not isinstance(item, dict):
        return None
    if _is_schema_echo(item, offered):
        return _SCHEMA_ECHO
    fn = item.get("function")
    if isinstance(fn, dict):  # {"type": "function", "function": {"name": ..., "arguments": ...}}
        if set(item) - {"function"} - _EXTRA_KEYS:
            return None
        return _as_call(fn, offered)
    names = [k for k in _NAME_KEYS if k in item]
    args_keys = [k for k in _ARG_KEYS if k in item]
    if not names and not args_keys:
        return _bare_arguments(item, offered)
    if len(names) != 1 or len(args_keys) > 1 or set(item) - set(names) - set(args_keys) - _EXTRA_KEYS:
        return None
    name = item[names[0]]
    if not isinstance(name, str):
        return None
    raw = item[args_keys[0]] if args_keys else {}
    args = _object(raw.strip() or "{}") if isinstance(raw, str) else raw
    if args is None and isinstance(raw, str) and isinstance(offered, Mapping):
        sole = offered.get(name.strip())  # "arguments": "history#42" for memory_get(citation)
        args = {sole: raw} if sole else None
    if isinstance(args, dict):
        call = _make_call(name, args, offered)
        if call is not None:
            return call
    if not args_keys or not _TOOLISH_NAME.fullmatch(name.strip()):
        return None
    # Shaped like a call, yet naming a tool that was not offered or with arguments that are
    # not an object: still a call. The registry's error tells the model what went wrong
    # (unknown tool, arguments must be an object) and the user never sees the block.
    value = args if isinstance(args, dict) else raw
    return TextToolCall(name.strip(), json.dumps(value, ensure_ascii=False))


def _bare_arguments(item: dict[str, Any], offered: Collection[str]) -> TextToolCall | None:
    """``{"citation": "session x#11"}`` alone: a call's arguments without its name
    (Qwen2.5-Coder-1.5B asked about a LoCoMo conversation). Taken as a call when its one
    key is the one required parameter of exactly one offered tool and its value a string;
    any other object stays text."""
    if len(item) != 1 or not isinstance(offered, Mapping):
        return None
    (key, value), = item.items()
    tools = [name for name, sole in offered.items() if sole == key]
    if len(tools) != 1 or not isinstance(value, str):
        return None
    return TextToolCall(tools[0], json.dumps(item, ensure_ascii=False))


def _make_call(name: str, args: dict[str, Any], offered: Collection[str]) -> TextToolCall | None:
    name = name.strip()
    if name not in offered:
        return None
    return TextToolCall(name, json.dumps(args, ensure_ascii=False))


# --- the streaming side ---------------------------------------------------------------------


@dataclass(slots=True)
class _Gate:
    """Passes text through line by line, and holds everything from the first line that starts
    like a tool-call block (or could still turn out to)."""

    passed: list[str] = field(default_factory=list)
    line: str = ""
    held: list[str] | None = None
    deciding: bool = True

    def feed(self, text: str) -> str:
        out: list[str] = []
        for ch in text:
            if self.held is not None:
                self.held.append(ch)
            elif not self.deciding:
                out.append(ch)
                if ch == "\n":
                    self.deciding, self.line = True, ""
            else:
                self.line += ch
                head = self.line.lstrip()
                if not head:
                    if ch == "\n":
                        out.append(self.line)
                        self.line = ""
                    continue
                if head.startswith(_TRIGGERS):
                    self.held = [self.line]
                    self.line = ""
                elif not any(t.startswith(head) for t in _TRIGGERS):
                    out.append(self.line)
                    self.line, self.deciding = "", ch == "\n"
        emitted = "".join(out)
        self.passed.append(emitted)
        return emitted

    def rest(self) -> str:
        """What was held back (the undecided end of a line included)."""
        return "".join(self.held) if self.held is not None else self.line


class TextToolCallProvider:
    """A provider that turns tool calls written as text into real tool calls.

    Only requests that offer tools are touched; a stream that already carries structured tool
    calls passes through unchanged (held text is released as text). Event order stays
    ``TextDelta* ToolCallEvent* Usage? Finish``.
    """

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if not request.tools:
            return self.inner.stream(request)
        return self._stream(request)

    async def _stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        offered = offered_tools(request.tools)
        gate, structured, usage = _Gate(), False, None
        async for ev in self.inner.stream(request):
            if isinstance(ev, TextDelta):
                text = gate.feed(ev.text)
                if text:
                    yield TextDelta(text)
            elif isinstance(ev, ToolCallEvent):
                structured = True
                yield ev
            elif isinstance(ev, Usage):
                usage = ev
            elif isinstance(ev, Restart):
                gate, structured, usage = _Gate(), False, None
                yield ev
            elif isinstance(ev, Finish):
                recovered = None
                held = gate.rest()
                if held and not structured:
                    recovered = _recover("".join(gate.passed), held, offered)
                if recovered is None:
                    if held and not _EMPTY_MARKUP.match(held):
                        yield TextDelta(held)
                    if usage is not None:
                        yield usage
                    yield ev
                    continue
                if request.tool_choice == "none":
                    # Told to answer, it wrote a call: nothing to run, nothing to show (the
                    # reply is what it said before the call, if anything).
                    if usage is not None:
                        yield usage
                    yield ev
                    continue
                for event in _events(recovered):
                    yield event
                if usage is not None:
                    yield usage
                yield Finish("tool_calls")
            else:
                yield ev

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def _events(recovered: Recovered) -> Iterator[StreamEvent]:
    if recovered.after.strip():
        yield TextDelta(("\n" if recovered.before.strip() else "") + recovered.after.strip())
    for call in recovered.calls:
        yield ToolCallEvent(f"call_{secrets.token_hex(6)}", call.name, call.arguments)
