"""Tools are typed functions; the registry is the only way the agent calls them.

A :class:`Tool` is a name, a description, a JSON schema of its parameters and the function
that does the work. :meth:`Tool.from_function` (and the :func:`tool` decorator) derive all
three from an ordinary Python function: the name from ``__name__``, the description from
the docstring's first paragraph, parameter descriptions from a Google-style ``Args:``
section and the schema from the signature.

:class:`ToolRegistry` holds the tools the model may call. Invariants:

* :meth:`ToolRegistry.schemas` returns the same list, in name order, until the registry
  changes, so the tool block of every request is byte-identical and prompt caches hit.
* :meth:`ToolRegistry.execute` never raises (except for cancellation): unknown tools,
  malformed arguments and failing tools all come back as a :class:`ToolResult` with
  ``is_error=True`` whose text starts with ``Error:``, for the model to read and correct.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from hippobot.errors import ToolError

__all__ = [
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "first_sentence",
    "tool",
]

_INVALID_JSON_PREVIEW = 200


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gives back to the model."""

    text: str
    is_error: bool = False


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model can call.

    ``parameters`` is a JSON schema of type ``object``; ``fn`` is called with keyword
    arguments that have been checked against it. ``fn`` may be sync (run in a worker
    thread) or async, and may return a ``str``, a :class:`ToolResult`, ``None`` or any
    JSON-serialisable value. It signals a failure the model should read by raising
    :class:`~hippobot.errors.ToolError`.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """Build a tool from a typed function (see the module docstring)."""
        doc = inspect.cleandoc(fn.__doc__ or "")
        summary, arg_docs = _parse_docstring(doc)
        tool_name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise ValueError(f"invalid tool name {tool_name!r}: use 1-64 letters, digits, _ or -")
        text = description if description is not None else summary
        if not text:
            raise ValueError(f"tool {tool_name!r} needs a description (give it a docstring)")
        return cls(tool_name, text, _parameters_schema(fn, arg_docs), fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (a decorated function stays usable)."""
        return self.fn(*args, **kwargs)

    def schema(self, *, compact: bool = False) -> dict[str, Any]:
        """The OpenAI function-tool definition sent to the model. ``compact`` (small context
        windows): the description's first sentence and the required parameters, without
        descriptions. Optional parameters are still accepted (arguments are checked against
        the full schema), and the results that need one name it (read_file's "Read on with
        offset=...", edit_file's "set replace_all")."""
        if not compact:
            return {
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            }
        required = self.parameters.get("required", [])
        properties = {
            name: {k: v for k, v in spec.items() if k not in ("description", "default")}
            for name, spec in self.parameters.get("properties", {}).items()
            if name in required
        }
        parameters = {**self.parameters, "properties": properties}
        parameters.pop("additionalProperties", None)  # the registry checks arguments anyway
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": first_sentence(self.description),
                "parameters": parameters,
            },
        }

    async def invoke(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the function with already validated arguments; exceptions propagate."""
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(**arguments)
        else:
            value = await asyncio.to_thread(self.fn, **arguments)
            if inspect.isawaitable(value):
                value = await value
        return _as_result(value)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator form of :meth:`Tool.from_function`: ``@tool`` or ``@tool(name=...)``."""
    if fn is not None:
        return Tool.from_function(fn, name=name, description=description)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description)

    return wrap


class ToolRegistry:
    """The set of tools offered to the model, in a stable (name) order. ``compact``: the
    schemas are :meth:`Tool.schema` ``(compact=True)`` (for small context windows)."""

    def __init__(self, tools: Iterable[Tool] = (), *, compact: bool = False) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas: list[dict[str, Any]] | None = None
        self.compact = compact
        self.extend(tools)

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add a tool; a second tool with the same name is a bug unless ``replace``."""
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas = None

    def extend(self, tools: Iterable[Tool]) -> None:
        for t in tools:
            self.register(t)

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self._schemas = None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry with only ``names`` (each must be registered here)."""
        wanted = list(names)
        missing = [n for n in wanted if n not in self._tools]
        if missing:
            raise ValueError(f"unknown tool(s): {', '.join(missing)}")
        return ToolRegistry((self._tools[n] for n in dict.fromkeys(wanted)), compact=self.compact)

    def schemas(self) -> list[dict[str, Any]]:
        """Tool definitions for a request. The same object is returned until the registry
        changes; treat it as read-only."""
        if self._schemas is None:
            self._schemas = [self._tools[n].schema(compact=self.compact) for n in self.names()]
        return self._schemas

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter([self._tools[n] for n in self.names()])

    async def execute(self, name: str, arguments: str | Mapping[str, Any]) -> ToolResult:
        """Run one tool call as the model asked for it. Never raises (bar cancellation)."""
        t = self._tools.get(name)
        if t is None:
            available = ", ".join(self.names()) or "(none)"
            return _error(f"unknown tool {name!r}. Available tools: {available}")
        try:
            args = _check_arguments(t, _decode_arguments(name, arguments))
            return await t.invoke(args)
        except ToolError as exc:
            return _error(str(exc) or type(exc).__name__)
        except (Exception, SystemExit) as exc:
            return _error(f"{type(exc).__name__}: {exc}")


# --- results ----------------------------------------------------------------------


def _error(message: str) -> ToolResult:
    return ToolResult(f"Error: {message}", is_error=True)


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult("(no output)")
    if isinstance(value, str):
        return ToolResult(value)
    try:
        return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return ToolResult(str(value))


# --- docstrings -------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def first_sentence(text: str) -> str:
    """The first sentence of a description (the whole text when it has one)."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """First paragraph (joined to one line) and the ``Args:`` descriptions."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    in_args = False
    indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if not in_args:
            in_args = stripped in ("Args:", "Arguments:", "Parameters:")
            continue
        if not stripped:
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent or (depth == 0 and _SECTION.match(stripped)):
            break
        m = _ARG_LINE.match(stripped)
        if depth == indent and m:
            current = m.group(1).lstrip("*")
            args[current] = m.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), args


# --- schema from a signature ------------------------------------------------------

_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SKIPPED_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _parameters_schema(fn: Callable[..., Any], arg_docs: Mapping[str, str]) -> dict[str, Any]:
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise TypeError(f"cannot resolve the annotations of {fn.__name__}: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in sig.parameters.items():
        if param.kind in _SKIPPED_KINDS or param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{fn.__name__}: tool parameters must be named (got {pname})")
        schema, nullable = _type_schema(hints.get(pname, Any), f"{fn.__name__}.{pname}")
        has_default = param.default is not inspect.Parameter.empty
        if nullable and not has_default:
            schema = _allow_null(schema)
        if arg_docs.get(pname):
            schema = {**schema, "description": arg_docs[pname]}
        if has_default and isinstance(param.default, str | int | float | bool):
            schema["default"] = param.default
        if not has_default:
            required.append(pname)
        properties[pname] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out


def _type_schema(tp: Any, where: str) -> tuple[dict[str, Any], bool]:
    """JSON schema for one annotation, and whether ``None`` is allowed."""
    if tp is Any:
        return {}, True
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}, False
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        schemas = [_type_schema(a, where)[0] for a in members]
        return (schemas[0] if len(schemas) == 1 else {"anyOf": schemas}), nullable
    if origin is Literal:
        kinds = {_SIMPLE.get(type(a)) for a in args}
        if None in kinds or len(kinds) != 1:
            raise TypeError(f"{where}: Literal values must all be str, int, float or bool")
        return {"type": kinds.pop(), "enum": list(args)}, False
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        items = _type_schema(args[0], where)[0] if args else {}
        return ({"type": "array", "items": items} if items else {"type": "array"}), False
    if tp is dict or origin in (dict, Mapping):
        return {"type": "object"}, False
    raise TypeError(f"{where}: unsupported annotation {tp!r} for a tool parameter")


def _allow_null(schema: dict[str, Any]) -> dict[str, Any]:
    if "type" in schema and isinstance(schema["type"], str) and "enum" not in schema:
        return {**schema, "type": [schema["type"], "null"]}
    if not schema:
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


# --- checking the model's arguments -----------------------------------------------


def _decode_arguments(name: str, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not arguments.strip():
        return {}
    preview = arguments[:_INVALID_JSON_PREVIEW]
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"arguments for {name} are not valid JSON ({exc.msg} at position {exc.pos}): {preview}"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(
            f"arguments for {name} are not valid JSON (expected an object, got "
            f"{_json_type(value)}): {preview}"
        )
    return value


def _check_arguments(t: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """Validate ``args`` against the tool's schema; returns the (lightly coerced) kwargs.

    ``null`` for an optional parameter means "use the default", as weaker models often
    send every parameter.
    """
    props: dict[str, Any] = t.parameters.get("properties", {})
    required: list[str] = t.parameters.get("required", [])
    unknown = [k for k in args if k not in props]
    if unknown and t.parameters.get("additionalProperties") is False:
        accepted = ", ".join(props) or "none"
        raise ToolError(
            f"unknown argument(s) for {t.name}: {', '.join(unknown)} (accepted: {accepted})"
        )
    missing = [k for k in required if k not in args]
    if missing:
        raise ToolError(f"missing required argument(s) for {t.name}: {', '.join(missing)}")
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key not in props:
            out[key] = value
            continue
        if value is None and key not in required:
            continue
        out[key] = _check_value(value, props[key], f"argument {key!r} of {t.name}")
    return out


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _check_value(value: Any, schema: Mapping[str, Any], where: str) -> Any:
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return _check_value(value, option, where)
            except ToolError:
                continue
        raise ToolError(f"{where} has the wrong type ({_json_type(value)})")
    if "type" in schema:
        value = _check_type(value, schema["type"], where)
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(json.dumps(v) for v in schema["enum"])
        raise ToolError(f"{where} must be one of {options}, got {json.dumps(value)}")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        value = [_check_value(v, schema["items"], f"{where} item") for v in value]
    return value


def _check_type(value: Any, expected: str | list[str], where: str) -> Any:
    kinds = [expected] if isinstance(expected, str) else list(expected)
    for kind in kinds:
        if kind == "null" and value is None:
            return None
        if kind == "integer" and _is_number(value) and _is_whole(value):
            return int(value)
        if kind == "number" and _is_number(value):
            return value
        if kind in _PY_TYPES and isinstance(value, _PY_TYPES[kind]):
            return value
    wanted = " or ".join(kinds)
    shown = json.dumps(value, ensure_ascii=False, default=str)[:80]
    raise ToolError(f"{where} must be {_article(wanted)}, got {_json_type(value)} {shown}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: int | float) -> bool:
    return isinstance(value, int) or value.is_integer()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"
