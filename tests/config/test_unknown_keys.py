"""Unknown and nanobot-only keys in config.json warn, one line each, and never crash."""

from __future__ import annotations

import json
from pathlib import Path

from hippobot.config.loader import load_config
from hippobot.testing.cli import run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_misspelt_key_warns_with_its_path_and_the_closest_key(tmp_path):
    path = write(tmp_path / "config.json", {"agents": {"defaults": {"maxTokenz": 100, "model": "m"}}})
    config, warnings = load_config(path)
    assert config.agents.defaults.model == "m"
    assert config.agents.defaults.max_tokens is None  # the misspelt key changed nothing
    assert warnings == [
        f"{path}: unknown key agents.defaults.maxTokenz ignored; did you mean maxTokens?"
    ]


def test_unknown_keys_at_every_level_each_get_one_line(tmp_path):
    path = write(tmp_path / "config.json", {
        "agnets": {},
        "agents": {"defaults": {"dream": {"intervalHours": 3}}},
        "providers": {"openai": {"apiBsae": "http://x", "apiKey": "sk-abc"}},
        "tools": {"exec": {"timeuot": 3}},
        "totallyUnrelated": 1,
    })
    _config, warnings = load_config(path)
    assert warnings == [
        f"{path}: unknown key agnets ignored; did you mean agents?",
        f"{path}: unknown key agents.defaults.dream.intervalHours ignored; did you mean intervalH?",
        f"{path}: unknown key providers.openai.apiBsae ignored; did you mean apiBase?",
        f"{path}: unknown key tools.exec.timeuot ignored; did you mean timeout?",
        f"{path}: unknown key totallyUnrelated ignored (check its spelling)",
    ]


def test_snake_case_spellings_are_known_keys(tmp_path):
    path = write(tmp_path / "config.json", {"agents": {"defaults": {"max_tokens": 100, "context_window_tokens": 9000}}})
    config, warnings = load_config(path)
    assert warnings == []
    assert config.agents.defaults.max_tokens == 100


def test_nanobot_only_sections_are_reported_once_as_not_used(tmp_path):
    path = write(tmp_path / "config.json", {
        "agents": {"defaults": {"botName": "nanobot", "dream": {"maxBatchSize": 20}}},
        "channels": {"telegram": {"enabled": False, "token": ""}, "sendProgress": True},
        "gateway": {"port": 18790, "heartbeat": {"enabled": True}},
        "tools": {"web": {"search": {"provider": "brave"}}, "restrictToWorkspace": False},
        "mcpServers": {},
        "providers": {"custom": {"apiType": "auto", "extraHeaders": None}},
    })
    config, warnings = load_config(path)
    assert config.tools.restrict_to_workspace is False
    assert len(warnings) == 1
    line = warnings[0]
    assert line.startswith(f"{path}: nanobot settings not used by hippobot")
    assert line.endswith(
        "agents.defaults.botName, agents.defaults.dream.maxBatchSize, channels, gateway, "
        "mcpServers, tools.web, providers.custom.apiType"
    )
    # Nested keys of an unused section are not listed one by one.
    assert "channels.telegram" not in line and "heartbeat" not in line


def test_a_config_with_unknown_keys_does_not_stop_any_command(tmp_path):
    home = tmp_path / "home"
    write(home / "config.json", {
        "agents": {"defaults": {"maxTokenz": 100}},
        "channels": {"telegram": {"token": "x"}},
    })
    notes = []
    for args in (["onboard"], ["sessions", "list"], ["context"], ["memory", "log"]):
        out = run_cli(args, home)
        assert out.returncode == 0, (args, out.stderr)
        assert "Traceback" not in out.stderr
        assert "unknown key agents.defaults.maxTokenz ignored; did you mean maxTokens?" in out.stderr
        notes.append(out.stderr.count("not used by hippobot"))
    assert notes == [1, 0, 0, 0]  # the nanobot note once per version of the file


def test_a_whole_nanobot_config_is_noted_once_per_change_in_one_short_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.json"
    config.write_bytes((FIXTURES / "nanobot-0.3.5" / "config.json").read_bytes())
    first = run_cli(["status"], home)
    assert first.returncode == 0, first.stderr
    note = [line for line in first.stderr.splitlines() if "not used by hippobot" in line]
    assert len(note) == 1 and len(note[0]) < 400 + len(str(config)), note
    assert "channels" in note[0] and "tools.{" in note[0]
    assert "not used by hippobot" not in run_cli(["status"], home).stderr
    config.write_text(config.read_text().replace('"botName": "nanobot"', '"botName": "nb"'))
    assert run_cli(["status"], home).stderr.count("not used by hippobot") == 1


def test_a_home_where_the_note_cannot_be_recorded_still_runs_and_shows_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_bytes((FIXTURES / "nanobot-0.3.5" / "config.json").read_bytes())
    (home / ".hippobot" / "config-noted").mkdir(parents=True)  # the record cannot be written
    for _ in range(2):
        out = run_cli(["status"], home)
        assert out.returncode == 0, out.stderr
        assert out.stderr.count("not used by hippobot") == 1  # shown each time, never lost


def test_nanobot_preset_and_provider_extras_are_known_and_collapsed(tmp_path):
    path = write(tmp_path / "config.json", {
        "modelPresets": {"a": {"model": "m", "reasoningEffort": "low"}, "b": {"model": "n", "reasoningEffort": None}},
        "providers": {"openai": {"apiType": "auto"}, "groq": {"apiType": "auto"}, "ollama": {"proxy": "x"}},
    })
    _config, warnings = load_config(path)
    assert warnings == [
        f"{path}: nanobot settings not used by hippobot (ignored): modelPresets.a.reasoningEffort, "
        "providers.*.apiType, providers.ollama.proxy"
    ]


def test_many_sibling_settings_are_grouped_on_the_line():
    from hippobot.config.keys import group_paths

    assert group_paths(["channels", "tools.web", "tools.file", "agents.defaults.botName", "api"]) == (
        "channels, api, tools.{web, file}, agents.defaults.botName"
    )
