"""The registry turns every kind of failure into a result the model can read."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Literal

import pytest

from hippobot.errors import ToolError
from hippobot.tools import Tool, ToolRegistry, ToolResult, tool


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers.

    Args:
        a: First number.
        b: Second number.
    """
    return a + b


@tool
async def shout(text: str) -> str:
    """Upper-case the text."""
    await asyncio.sleep(0)
    return text.upper()


@tool
def refuse(reason: str) -> str:
    """Always refuses."""
    raise ToolError(f"refused because {reason}")


@tool
def crash() -> str:
    """Always crashes."""
    raise KeyError("boom")


@tool
def thread_name() -> str:
    """Which thread runs me."""
    return threading.current_thread().name


@tool
def structured() -> dict[str, int]:
    """Return a dict."""
    return {"n": 1}


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([add, shout, refuse, crash, thread_name, structured])


async def test_sync_and_async_tools_return_their_text(registry):
    assert await registry.execute("add", '{"a": 2, "b": 3}') == ToolResult("5")
    assert await registry.execute("shout", '{"text": "hi"}') == ToolResult("HI")
    assert await registry.execute("structured", "") == ToolResult('{"n": 1}')


async def test_sync_tools_run_off_the_event_loop_thread(registry):
    result = await registry.execute("thread_name", "{}")
    assert result.text != threading.current_thread().name


async def test_empty_arguments_mean_no_arguments(registry):
    assert (await registry.execute("add", "")).text.startswith("Error: missing required")
    assert not (await registry.execute("thread_name", "   ")).is_error


async def test_unknown_tool_names_the_available_ones(registry):
    result = await registry.execute("delete_everything", "{}")
    assert result.is_error
    assert "unknown tool 'delete_everything'" in result.text
    assert "add, crash, refuse, shout, structured, thread_name" in result.text


async def test_invalid_json_is_reported_with_a_preview(registry):
    garbage = '{"a": 1,' + "x" * 500
    result = await registry.execute("add", garbage)
    assert result.is_error
    assert result.text.startswith("Error: arguments for add are not valid JSON (")
    assert result.text.endswith(garbage[:200])


async def test_arguments_that_are_not_an_object_are_rejected(registry):
    result = await registry.execute("add", "[1, 2]")
    assert result.is_error and "not valid JSON (expected an object, got array)" in result.text


async def test_missing_unknown_and_wrong_typed_arguments_say_which(registry):
    missing = await registry.execute("add", '{"b": 2}')
    assert missing.is_error and "missing required argument(s) for add: a" in missing.text
    unknown = await registry.execute("add", '{"a": 1, "c": 2}')
    assert unknown.is_error and "unknown argument(s) for add: c" in unknown.text
    wrong = await registry.execute("add", '{"a": "one"}')
    assert wrong.is_error and "'a'" in wrong.text and "must be an integer" in wrong.text
    boolean = await registry.execute("add", '{"a": true}')
    assert boolean.is_error and "must be an integer" in boolean.text


async def test_lenient_where_meaning_is_unambiguous(registry):
    # 4.0 is the integer 4, and null for an optional argument means "use the default".
    assert await registry.execute("add", '{"a": 4.0, "b": null}') == ToolResult("5")


async def test_tool_errors_and_crashes_become_error_results(registry):
    refused = await registry.execute("refuse", '{"reason": "policy"}')
    assert refused == ToolResult("Error: refused because policy", is_error=True)
    crashed = await registry.execute("crash", "{}")
    assert crashed == ToolResult("Error: KeyError: 'boom'", is_error=True)


async def test_enum_values_are_checked():
    def paint(colour: Literal["red", "blue"]) -> str:
        """Paint."""
        return colour

    reg = ToolRegistry([Tool.from_function(paint)])
    assert (await reg.execute("paint", '{"colour": "blue"}')).text == "blue"
    bad = await reg.execute("paint", '{"colour": "green"}')
    assert bad.is_error and '"red", "blue"' in bad.text


async def test_list_items_are_checked():
    def total(values: list[int]) -> int:
        """Sum."""
        return sum(values)

    reg = ToolRegistry([Tool.from_function(total)])
    assert (await reg.execute("total", '{"values": [1, 2, 3]}')).text == "6"
    bad = await reg.execute("total", '{"values": [1, "2"]}')
    assert bad.is_error and "item" in bad.text


def test_schemas_are_stable_and_cached_until_the_registry_changes(registry):
    first = registry.schemas()
    assert registry.schemas() is first
    assert [s["function"]["name"] for s in first] == registry.names()
    text = json.dumps(first)
    registry.unregister("crash")
    second = registry.schemas()
    assert second is not first and "crash" not in registry.names()
    registry.register(crash)
    assert json.dumps(registry.schemas()) == text


def test_registration_order_does_not_change_the_schemas():
    a = ToolRegistry([add, shout, crash])
    b = ToolRegistry([crash, add, shout])
    assert json.dumps(a.schemas()) == json.dumps(b.schemas())


def test_duplicate_names_are_a_bug_unless_replacing(registry):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(add)
    registry.register(add, replace=True)
    assert registry.names().count("add") == 1


def test_subset_keeps_only_the_named_tools(registry):
    sub = registry.subset(["shout", "add"])
    assert sub.names() == ["add", "shout"]
    assert "crash" in registry and "crash" not in sub
    with pytest.raises(ValueError, match="nope"):
        registry.subset(["nope"])
