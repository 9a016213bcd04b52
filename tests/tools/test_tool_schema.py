"""A tool's name, description and JSON schema come from an ordinary typed function."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from hippobot.errors import ToolError
from hippobot.tools import Tool, tool


def search_notes(
    query: str,
    limit: int = 5,
    scale: float = 1.0,
    exact: bool = False,
    tags: list[str] | None = None,
    ids: list[int] | None = None,
    mode: Literal["fast", "full"] = "fast",
    since: str | None = None,
) -> str:
    """Search the user's notes.

    This second paragraph is for humans reading the code.

    Args:
        query: Words to look for.
        limit: How many results to return,
            at most 50.
        scale (float): A weighting factor.
        exact: Match whole words only.
        tags: Only notes with these tags.
        ids: Only these note ids.
        mode: How hard to search.
        since: ISO date of the oldest note.

    Returns:
        The matching notes.
    """
    return query


def test_name_description_and_parameter_docs_come_from_the_function():
    t = Tool.from_function(search_notes)
    assert t.name == "search_notes"
    assert t.description == "Search the user's notes."
    props = t.parameters["properties"]
    assert props["query"]["description"] == "Words to look for."
    assert props["limit"]["description"] == "How many results to return, at most 50."
    assert props["scale"]["description"] == "A weighting factor."
    assert "Returns" not in str(t.parameters)


def test_schema_types_follow_the_signature():
    props = Tool.from_function(search_notes).parameters["properties"]
    assert props["query"]["type"] == "string"
    assert props["limit"] == {
        "type": "integer",
        "description": "How many results to return, at most 50.",
        "default": 5,
    }
    assert props["scale"]["type"] == "number"
    assert props["exact"]["type"] == "boolean"
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert props["ids"]["items"] == {"type": "integer"}
    assert props["mode"]["type"] == "string" and props["mode"]["enum"] == ["fast", "full"]
    assert props["since"]["type"] == "string"


def test_only_parameters_without_defaults_are_required():
    params = Tool.from_function(search_notes).parameters
    assert params["required"] == ["query"]
    assert params["type"] == "object"
    assert params["additionalProperties"] is False


def test_optional_without_default_is_required_but_nullable():
    def pick(choice: int | None) -> str:
        """Pick one."""
        return str(choice)

    params = Tool.from_function(pick).parameters
    assert params["required"] == ["choice"]
    assert params["properties"]["choice"]["type"] == ["integer", "null"]


def test_openai_function_schema_shape():
    schema = Tool.from_function(search_notes).schema()
    assert schema["type"] == "function"
    assert set(schema["function"]) == {"name", "description", "parameters"}
    assert schema["function"]["name"] == "search_notes"


def test_decorator_with_and_without_options():
    @tool
    def ping() -> str:
        """Say pong."""
        return "pong"

    @tool(name="renamed", description="Custom text.")
    def other(x: int) -> int:
        return x

    assert isinstance(ping, Tool) and ping.name == "ping" and ping.description == "Say pong."
    assert "required" not in ping.parameters
    assert other.name == "renamed" and other.description == "Custom text."


def test_a_tool_needs_a_description():
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="description"):
        Tool.from_function(undocumented)


def test_unsupported_annotations_fail_when_the_tool_is_defined():
    def weird(x: complex) -> str:
        """Weird."""
        return ""

    with pytest.raises(TypeError, match="unsupported annotation"):
        Tool.from_function(weird)


def test_var_args_are_rejected():
    def splat(*args: str) -> str:
        """Splat."""
        return ""

    with pytest.raises(TypeError):
        Tool.from_function(splat)


def test_the_types_inside_a_mapping_reach_the_model_and_are_checked():
    def tally(counts: dict[str, int]) -> str:
        """Add up named counts."""
        return str(sum(counts.values()))

    t = Tool.from_function(tally)
    assert t.parameters["properties"]["counts"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    assert t.arguments.parse('{"counts": {"a": 2, "b": 3.0}}') == {"counts": {"a": 2, "b": 3}}
    with pytest.raises(ToolError) as refused:
        t.arguments.parse('{"counts": {"a": 2, "b": "three"}}')
    assert str(refused.value).startswith("argument 'counts' of tally is not valid at b:")


def _every_schema(tmp_path):
    from hippobot.recall.tools import recall_tools
    from hippobot.tools import PathPolicy, exec_tool, file_tools

    tools = [
        *file_tools(PathPolicy(tmp_path)),
        exec_tool(cwd=tmp_path),
        *recall_tools(None, session_key="cli:direct"),  # type: ignore[arg-type]
        Tool.from_function(search_notes),
    ]
    return [t.schema(compact=compact) for t in tools for compact in (False, True)]


def test_the_schemas_the_model_reads_carry_nothing_it_does_not_need(tmp_path):
    def walk(node, optional=False):
        if isinstance(node, dict):
            assert "title" not in node and "const" not in node and "$defs" not in node
            assert node.get("default", 0) is not None  # no "default": null
            if optional:  # null means "use the default": it is not advertised
                assert "null" not in json.dumps(node)
            props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            for name, sub in props.items():
                walk(sub, optional=name not in node.get("required", []))
            for key, sub in node.items():
                if key != "properties":
                    walk(sub)
        elif isinstance(node, list):
            for sub in node:
                walk(sub)

    for schema in _every_schema(tmp_path):
        parameters = schema["function"]["parameters"]
        assert parameters["type"] == "object"
        assert list(parameters)[:2] == ["type", "properties"]
        walk(parameters)
