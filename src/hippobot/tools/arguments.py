"""A tool's parameters as pydantic derives them from the function's signature: the JSON schema
the model reads and the validator the model's arguments pass.

The signature becomes a ``TypedDict`` (a required key per parameter without a default, an
optional one per parameter with one) that pydantic validates and describes. Invariants:

* Validation is strict: ``"3"`` is not an integer, ``true`` is not ``1``, ``[1, "2"]`` is not
  a list of integers. Two leniencies, because the meaning is not in doubt: a whole number
  written as a float is an integer (JSON has one kind of number: ``4.0`` is 4), and ``null``
  for a parameter with a default means "use the default", as weaker models send every
  parameter. The function gets only the arguments the model gave, so its own defaults apply.
* The schema carries what the model needs and nothing more: no titles, ``null`` only where it
  is a value of its own (a required ``X | None``), a ``default`` only when it is a plain
  value, and each property's keys in the order type, enum/items, description, default.
* A bad call is one line naming the parameter and what is wrong; unknown and missing
  arguments are all named at once.
* A parameter type JSON cannot carry fails when the tool is defined, not when it is called.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, with_config
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from hippobot.errors import ToolError
from hippobot.schema_build import without_pydantic_plugins

__all__ = ["ToolArguments"]

_INVALID_JSON_PREVIEW = 200
_PLAIN_TYPES = (str, float, bool, type(None), list, dict)
_PLAIN_DEFAULT = str | int | float | bool
_UNIONS = (typing.Union, types.UnionType)


def _whole_number(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


_Integer = Annotated[int, BeforeValidator(_whole_number)]


def _json_type(tp: Any, where: str) -> Any:
    """``tp`` as the validator should see it (``int`` takes whole floats, a sequence is the
    list JSON gives); TypeError for an annotation JSON cannot carry."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int:
        return _Integer
    if tp is Any or tp in _PLAIN_TYPES or origin is Literal:
        return tp
    if origin in _UNIONS:
        return typing.Union[tuple(_json_type(a, where) for a in args)]  # noqa: UP007
    if tp is tuple or origin in (list, tuple, Sequence):
        return list[_json_type(args[0], where)] if args else list  # type: ignore[misc]
    if origin in (dict, Mapping):
        return dict[_json_type(args[0], where), _json_type(args[1], where)]  # type: ignore[misc]
    raise TypeError(f"{where}: unsupported annotation {tp!r} for a tool parameter")


def _without_null(tp: Any) -> Any:
    """A parameter with a default never receives ``null`` (it means "use the default")."""
    if typing.get_origin(tp) not in _UNIONS:
        return tp
    rest = [a for a in typing.get_args(tp) if a is not type(None)]
    return typing.Union[tuple(rest)] if rest else tp  # noqa: UP007


# (name, type, required, plain default or None, description) per parameter
_Spec = tuple[tuple[str, Any, bool, _PLAIN_DEFAULT | None, str], ...]


def _spec(fn: Callable[..., Any], docs: Mapping[str, str]) -> _Spec:
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise TypeError(f"cannot resolve the annotations of {fn.__name__}: {exc}") from exc
    out = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"{fn.__name__}: tool parameters must be named (got {name})")
        required = param.default is param.empty
        tp = _json_type(hints.get(name, Any), f"{fn.__name__}.{name}")
        default = param.default if isinstance(param.default, _PLAIN_DEFAULT) else None
        out.append((name, tp if required else _without_null(tp), required, default, docs.get(name, "")))
    return tuple(out)


class _ModelFacing(GenerateJsonSchema):
    """pydantic's JSON schema without what the model does not need (see the module doc)."""

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value  # keep the order the schema was built in

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if isinstance(inner.get("type"), str) and "enum" not in inner:
            return {**inner, "type": [inner["type"], "null"]}
        return super().nullable_schema(schema)

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        inner = super().dict_schema(schema)
        if inner.get("additionalProperties") is True:  # any value: JSON schema's default
            del inner["additionalProperties"]
        return inner

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        inner = super().literal_schema(schema)
        enum = {"enum": inner["enum"] if "enum" in inner else [inner["const"]]}
        return {"type": inner["type"], **enum} if "type" in inner else enum


@dataclass(frozen=True)
class _Compiled:
    """The validator and the schema of one parameter list."""

    adapter: TypeAdapter[dict[str, Any]]
    schema: dict[str, Any]


@functools.lru_cache(maxsize=256)
def _compile(spec: _Spec) -> _Compiled:
    """Shared by equal parameter lists, as every session's copy of the file tools has."""
    fields: dict[str, Any] = {}
    for name, tp, required, default, doc in spec:
        shown = {"default": default} if default is not None else None
        field = Annotated[tp, Field(description=doc or None, json_schema_extra=shown)]  # type: ignore[valid-type]
        fields[name] = field if required else NotRequired[field]
    arguments = TypedDict("arguments", fields)  # type: ignore[misc]
    strict = with_config(ConfigDict(extra="forbid", strict=True))
    with without_pydantic_plugins():
        adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(strict(arguments))
    schema = adapter.json_schema(schema_generator=_ModelFacing)
    schema.pop("title")
    return _Compiled(adapter, schema)


class ToolArguments:
    """The parameters of one tool function. A signature problem is a TypeError here; the
    pydantic validator and schema are built on first use."""

    def __init__(self, tool: str, fn: Callable[..., Any], docs: Mapping[str, str]) -> None:
        self.tool = tool
        self._spec = _spec(fn, docs)
        self._optional = frozenset(name for name, _, required, _, _ in self._spec if not required)

    @functools.cached_property
    def _compiled(self) -> _Compiled:
        return _compile(self._spec)

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema (type ``object``) of the parameters; read-only, it is shared."""
        return self._compiled.schema

    def parse(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call the function with, from the model's JSON text (or
        an already decoded object); ToolError saying what is wrong."""
        args = arguments if isinstance(arguments, Mapping) else _decode(self.tool, arguments)
        given = {k: v for k, v in args.items() if v is not None or k not in self._optional}
        try:
            return self._compiled.adapter.validate_python(given)
        except ValidationError as exc:
            raise ToolError(self._explain(exc.errors(include_url=False), given)) from None

    def _explain(self, errors: list[ErrorDetails], args: Mapping[str, Any]) -> str:
        props: dict[str, Any] = self.schema["properties"]
        unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
        if unknown:
            accepted = ", ".join(props) or "none"
            return f"unknown argument(s) for {self.tool}: {', '.join(unknown)} (accepted: {accepted})"
        missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing"]
        if missing:
            return f"missing required argument(s) for {self.tool}: {', '.join(missing)}"
        first, *path = errors[0]["loc"]
        field = str(first)
        where, schema, value = f"argument {field!r} of {self.tool}", props[field], args[field]
        while path and isinstance(path[0], int) and "items" in schema:  # into list items
            where, schema, value = f"{where} item", schema["items"], value[path.pop(0)]
        if "anyOf" in schema:  # what is left of the path names the union's members
            return f"{where} has the wrong type ({_json_kind(value)})"
        if path:  # inside an object: pydantic's words, at the key that failed
            return f"{where} is not valid at {'.'.join(map(str, path))}: {errors[0]['msg']}"
        return _wrong_value(where, schema, value)


def _decode(tool: str, text: str) -> Mapping[str, Any]:
    if not text.strip():
        return {}
    preview = text[:_INVALID_JSON_PREVIEW]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"arguments for {tool} are not valid JSON ({exc.msg} at position {exc.pos}): {preview}"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(
            f"arguments for {tool} are not valid JSON (expected an object, got "
            f"{_json_kind(value)}): {preview}"
        )
    return value


def _wrong_value(where: str, schema: Mapping[str, Any], value: Any) -> str:
    if "enum" in schema:
        options = ", ".join(json.dumps(v) for v in schema["enum"])
        return f"{where} must be one of {options}, got {json.dumps(value)}"
    kind = schema["type"]
    wanted = kind if isinstance(kind, str) else " or ".join(kind)
    shown = json.dumps(value, ensure_ascii=False, default=str)[:80]
    return f"{where} must be {_article(wanted)}, got {_json_kind(value)} {shown}"


_JSON_KINDS = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
               list: "array", dict: "object"}  # fmt: skip


def _json_kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"
