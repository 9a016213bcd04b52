"""Tools are typed functions; the registry is the only way the agent calls them.

A :class:`Tool` is a name, a description, a JSON schema of its parameters and the function
that does the work. :meth:`Tool.from_function` (and the :func:`tool` decorator) derive all
three from an ordinary Python function: the name from ``__name__``, the description from
the docstring's first paragraph, parameter descriptions from a Google-style ``Args:``
section, and the schema and the argument validator from the signature's types, by pydantic
(:mod:`hippobot.tools.arguments`).

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

from hippobot.errors import ToolError
from hippobot.lazy_regex import lazy_compile
from hippobot.tools.arguments import ToolArguments

__all__ = [
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "first_sentence",
    "tool",
]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call gives back to the model."""

    text: str
    is_error: bool = False
    # The call worked and has nothing to answer from ("No matches for 'x'."): a model that
    # then says it does not know has answered (the runner asks again only after a finding).
    found_nothing: bool = False


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model can call.

    ``arguments`` are its parameters: :attr:`parameters` is their JSON schema (type
    ``object``), and ``fn`` is called with keyword arguments that passed their validator.
    ``fn`` may be sync (run in a worker thread) or async, and may return a ``str``, a
    :class:`ToolResult`, ``None`` or any JSON-serialisable value. It signals a failure the
    model should read by raising :class:`~hippobot.errors.ToolError`.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    arguments: ToolArguments

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
        return cls(tool_name, text, fn, ToolArguments(tool_name, fn, arg_docs))

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the parameters (read-only: tools with equal ones share it)."""
        return self.arguments.schema

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (a decorated function stays usable)."""
        return self.fn(*args, **kwargs)

    def schema(self, *, compact: bool = False) -> dict[str, Any]:
        """The OpenAI function-tool definition sent to the model. ``compact`` (small context
        windows): the description's first sentence and the required parameters, without
        descriptions. Optional parameters are still accepted (arguments are validated against
        the full parameter list), and the results that need one name it (read_file's "Read on with
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
            return await t.invoke(t.arguments.parse(arguments))
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
        return ToolResult("(no output)", found_nothing=True)
    if isinstance(value, str):
        return ToolResult(value)
    try:
        return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return ToolResult(str(value))


# --- docstrings -------------------------------------------------------------------

_SENTENCE_END = lazy_compile(r"(?<=[.!?])\s")


def first_sentence(text: str) -> str:
    """The first sentence of a description (the whole text when it has one)."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


_SECTION = lazy_compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?):\s*$")
_ARG_LINE = lazy_compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


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
