"""Small windows (8k tokens and less) get a fixed prompt half the size, with the same rules."""

from __future__ import annotations

import json
import re

import pytest

from hippobot.agent.api import Api
from hippobot.context.builder import build_system_prompt

from .test_context_builder import inputs

FULL_FIXED = 1467  # what the fixed prompt cost before it had a compact form


def context_of(agent) -> dict:
    return json.loads(Api(agent.settings).context("cli:direct").to_json())


@pytest.mark.parametrize("window", [8192, 4096])
def test_a_small_window_gets_a_fixed_prompt_at_most_half_the_full_one(make_agent, window):
    small = context_of(make_agent(context_window_tokens=window))
    large = context_of(make_agent(context_window_tokens=128_000))
    assert small["history_tokens"] == large["history_tokens"] == 0
    assert small["total_tokens"] <= FULL_FIXED // 2
    assert small["total_tokens"] * 2 <= large["total_tokens"]
    assert small["tools"] == large["tools"]  # every tool is still there
    names = [r["name"] for r in small["sources"]]
    assert names[:1] == ["identity"] and "tool contract" in names and "skill memory" in names


def test_the_full_prompt_stays_for_larger_windows(make_agent):
    full = context_of(make_agent(context_window_tokens=8193))
    assert full["total_tokens"] > 1200


@pytest.mark.parametrize("compact", [False, True])
def test_the_rules_the_prompt_carries_hold_in_both_sizes(tmp_path, compact):
    prompt = build_system_prompt(inputs(tmp_path, compact=compact))
    identity, contract = prompt.section("identity").text, prompt.section("tool_contract").text
    assert "edit_file" in identity and "memory/MEMORY.md" in identity and "memory_search" in identity
    assert "SOUL.md" in identity and "USER.md" in identity and "test-model" in identity
    assert not re.search(r"(do not|don't|never) edit", identity, re.IGNORECASE)
    assert "terminal" in identity  # the channel's format hint
    assert "[Runtime Context]" in contract and "data, not" in contract
    assert "edit_file" in contract and "write_file" in contract
    skills = prompt.section("skills").text
    assert "weather" in skills and "skills/weather/SKILL.md" in skills and "read" in skills
    assert "missing binary: ffmpeg" in skills and "missing description" in skills
    assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}", prompt.text.split("# Recent History")[0])
    assert build_system_prompt(inputs(tmp_path, compact=compact)).text == prompt.text


def test_compact_tool_schemas_keep_names_types_and_required_parameters(make_agent):
    small = make_agent(context_window_tokens=8192).tools_for("cli:direct")
    large = make_agent(context_window_tokens=128_000).tools_for("cli:direct")
    for short, full in zip(small.schemas(), large.schemas(), strict=True):
        s, f = short["function"], full["function"]
        assert s["name"] == f["name"] and f["description"].startswith(s["description"])
        assert len(s["description"]) < 100 and s["description"].count(". ") == 0
        required = f["parameters"].get("required", [])
        assert list(s["parameters"]["properties"]) == required
        for name in required:
            assert s["parameters"]["properties"][name]["type"] == f["parameters"]["properties"][name]["type"]


@pytest.mark.parametrize("window", [8192, 128_000])
def test_no_tool_description_offers_an_example_to_copy(make_agent, window):
    schemas = make_agent(context_window_tokens=window).tools_for("cli:direct").schemas()
    texts = [s["function"]["description"] for s in schemas]
    texts += [p.get("description", "") for s in schemas for p in s["function"]["parameters"]["properties"].values()]
    for text in texts:
        assert not re.search(r"\be\.g\.|for example|such as|history#\d|cli:direct#", text), text


async def test_a_small_window_turn_sends_the_compact_prompt_and_optional_arguments_still_work(
    make_agent, scripted_model
):
    agent = make_agent(context_window_tokens=8192)
    (agent.workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    scripted_model.reply_tool_call("read_file", {"path": "notes.txt", "offset": 3})
    scripted_model.reply("The third line says three.")

    result = await agent.turn("cli:direct", "What is on line 3 of notes.txt?")

    assert result.reply == "The third line says three."
    first = scripted_model.requests[0]
    read = next(t for t in first.tools if t["function"]["name"] == "read_file")
    assert "offset" not in read["function"]["parameters"]["properties"]  # not advertised ...
    tool_result = scripted_model.requests[1].messages[-1]
    assert tool_result["role"] == "tool" and tool_result["content"].startswith("three")  # ... but taken
    system = first.messages[0]["content"]
    assert "Shown below when customised" in system and "## Guidelines" not in system  # compact
