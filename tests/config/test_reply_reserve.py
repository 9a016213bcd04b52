"""``maxTokens`` unset or null follows the window, so a small local window just works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hippobot.config import load_settings
from hippobot.config.loader import load_config
from hippobot.errors import ConfigError
from hippobot.testing.cli import run_cli


def write(home: Path, defaults: dict) -> Path:
    path = home / "config.json"
    path.write_text(json.dumps({"agents": {"defaults": defaults}}))
    return path


@pytest.mark.parametrize(("defaults", "reserve"), [
    ({"contextWindowTokens": 8192}, 2048),
    ({"contextWindowTokens": 8192, "maxTokens": None}, 2048),
    ({"contextWindowTokens": 4096}, 1024),
    ({"contextWindowTokens": 4096, "maxTokens": None}, 1024),
    ({"contextWindowTokens": 4096, "maxTokens": 700}, 700),
    ({"contextWindowTokens": 8192, "maxTokens": 1500}, 1500),
    ({"contextWindowTokens": 200_000}, 8192),
    ({}, 8192),
], ids=str)
def test_an_unset_reply_reserve_is_a_quarter_of_the_window_at_most_8192(tmp_path, defaults, reserve):
    config, _ = load_config(write(tmp_path, defaults))
    assert config.agents.defaults.reply_tokens == reserve


@pytest.mark.parametrize(("window", "works"), [(8192, 2048), (4096, 1024)])
def test_an_impossible_reply_reserve_names_one_that_works(tmp_path, window, works):
    path = write(tmp_path, {"contextWindowTokens": window, "maxTokens": 8192})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert f"set maxTokens to {works} " in message and "null" in message
    fixed = write(tmp_path, {"contextWindowTokens": window, "maxTokens": works})
    assert load_config(fixed)[0].agents.defaults.reply_tokens == works


def test_a_preset_without_max_tokens_follows_its_own_window(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "agents": {"defaults": {"modelPreset": "local"}},
        "modelPresets": {"local": {"model": "qwen", "contextWindowTokens": 4096}},
    }))
    settings = load_settings({"HIPPOBOT_HOME": str(tmp_path)})
    assert settings.defaults.context_window_tokens == 4096
    assert settings.defaults.reply_tokens == 1024


@pytest.mark.parametrize("window", [8192, 4096])
def test_the_onboard_config_with_a_small_window_runs(hippobot_home, window):
    """The issue's newcomer path: onboard, set the window of a local server, run a command."""
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    path = hippobot_home / "config.json"
    text = path.read_text()
    assert '"maxTokens": null' in text
    path.write_text(text.replace('"contextWindowTokens": 128000', f'"contextWindowTokens": {window}'))
    out = run_cli(["context", "--json"], hippobot_home)
    assert out.returncode == 0, out.stderr
    split = json.loads(out.stdout)["budget"]
    assert split["context_window"] == window and split["reply_reserve"] == window // 4
