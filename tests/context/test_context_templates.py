"""Packaged templates and prompts: present, parseable, small."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from hippobot.context import tokens
from hippobot.context.loader import bundled_template

WORKSPACE_TEMPLATES = ("AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md")


def starter_config_text() -> str:
    text = bundled_template("config.json")
    assert text is not None
    return text


def test_workspace_templates_exist_and_are_short():
    for name in WORKSPACE_TEMPLATES:
        text = bundled_template(name)
        assert text and text.strip(), name
        assert tokens.count_text(text) < 250, name


def test_memory_template_nests_under_the_memory_section():
    # The prompt wraps MEMORY.md in "# Memory / ## Long-term Memory": its own headings are level 3.
    text = bundled_template("memory/MEMORY.md") or ""
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings and all(h.startswith("### ") for h in headings)


def test_starter_config_has_only_whole_line_comments_and_parses():
    text = starter_config_text()
    assert any(line.lstrip().startswith("//") for line in text.splitlines())
    without = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    data = json.loads(without)
    defaults = data["agents"]["defaults"]
    for key in ("model", "workspace", "maxTokens", "contextWindowTokens", "temperature",
                "maxToolIterations", "timezone", "idleCompactAfterMinutes", "consolidationRatio"):
        assert key in defaults, key
    assert set(defaults["dream"]) == {"intervalH", "cron", "modelOverride"}
    assert set(data["providers"]) == {"openai", "anthropic", "openrouter", "deepseek", "ollama", "vllm"}
    for provider in data["providers"].values():
        assert set(provider) == {"apiKey", "apiBase", "extraHeaders"}
        assert not provider["apiKey"]  # a placeholder, never something that looks like a key
    assert data["tools"]["restrictToWorkspace"] is True and "timeout" in data["tools"]["exec"]
    assert set(data["serve"]) == {
        "host", "port", "apiKey", "users", "trustUserHeader", "corsOrigins", "allowedHosts",
        "maxBodyBytes",
    }


def test_starter_config_loads_without_warnings(tmp_path):
    from hippobot.config.loader import load_config

    path = tmp_path / "config.json"
    path.write_text(starter_config_text(), encoding="utf-8")
    _config, warnings = load_config(path)
    assert warnings == []


def test_starter_config_contains_no_secret_looking_values():
    assert not re.search(r"sk-[A-Za-z0-9]{8,}", starter_config_text())


@pytest.mark.parametrize("name", ["identity.md", "tool_contract.md"])
def test_prompts_are_packaged_and_tight(name):
    text = resources.files("hippobot").joinpath("prompts", name).read_text(encoding="utf-8")
    assert tokens.count_text(text) < 400
