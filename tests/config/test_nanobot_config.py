"""nanobot's own config.json files load as they are, and pick the endpoint nanobot would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hippobot.config import load_settings
from hippobot.config.loader import load_config
from hippobot.errors import ConfigError, UserError

FIXTURES = Path(__file__).parents[1] / "fixtures"


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def settings_for(tmp_path: Path, data: dict, **env: str):
    write(tmp_path, data)
    return load_settings({"HIPPOBOT_HOME": str(tmp_path), **env})


@pytest.mark.parametrize("version", ["0.2.2", "0.3.5"])
def test_a_config_nanobot_wrote_itself_loads_with_warnings_only(version):
    path = FIXTURES / f"nanobot-{version}" / "config.json"
    assert json.loads(path.read_text())["providers"]["custom"]["extraHeaders"] is None
    config, warnings = load_config(path)
    assert config.agents.defaults.model == "scripted-model"
    assert config.providers["custom"].api_key == "sk-fixture-not-a-real-key-0000"
    assert config.providers["custom"].extra_headers == {}
    assert config.agents.defaults.dream.interval_h == 2
    assert [w for w in warnings if "unknown key" in w] == []
    assert len(warnings) == 1 and "not used by hippobot" in warnings[0]


def test_nanobots_blank_sandbox_keeps_hippobots_safe_default_and_bwrap_means_bwrap(tmp_path):
    # nanobot writes "sandbox": "" unless the user chose bubblewrap; both share the key.
    config, _ = load_config(write(tmp_path, {"tools": {"exec": {"sandbox": ""}}}))
    assert config.tools.exec.sandbox == "auto"
    config, _ = load_config(write(tmp_path, {"tools": {"exec": {"sandbox": "bwrap"}}}))
    assert config.tools.exec.sandbox == "bwrap"
    with pytest.raises(ConfigError, match=r"tools\.exec\.sandbox"):
        load_config(write(tmp_path, {"tools": {"exec": {"sandbox": "docker"}}}))


def test_the_nanobot_fixture_config_selects_its_custom_endpoint(tmp_path):
    data = json.loads((FIXTURES / "nanobot-0.3.5" / "config.json").read_text())
    target = settings_for(tmp_path, data).model_target()
    assert (target.provider, target.kind, target.model) == ("custom", "openai", "scripted-model")
    assert target.api_base == "http://127.0.0.1:9/v1"


def test_model_preset_selects_model_provider_window_tokens_and_temperature(tmp_path):
    settings = settings_for(tmp_path, {
        "agents": {"defaults": {"modelPreset": "fast", "model": "anthropic/claude-opus-4-5",
                                "dream": {"modelOverride": "cheap"}}},
        "modelPresets": {
            "fast": {"model": "deepseek-chat", "provider": "deepseek", "maxTokens": 2000,
                     "contextWindowTokens": 64000, "temperature": 0.3},
            "cheap": {"model": "deepseek-lite"},
        },
        "providers": {"deepseek": {"apiKey": "sk-deepseek-000000"}},
    })
    d = settings.defaults
    assert (d.model, d.max_tokens, d.context_window_tokens, d.temperature) == ("deepseek-chat", 2000, 64000, 0.3)
    assert d.dream.model_override == "deepseek-lite"
    target = settings.model_target()
    assert (target.provider, target.api_base) == ("deepseek", "https://api.deepseek.com/v1")


def test_an_unknown_preset_is_a_config_error_naming_the_key(tmp_path):
    path = write(tmp_path, {"agents": {"defaults": {"modelPreset": "fsat"}}, "modelPresets": {"fast": {"model": "m"}}})
    with pytest.raises(ConfigError, match=r"config.json:\d+: key agents.defaults.modelPreset: no preset 'fsat'.*fast"):
        load_config(path)


@pytest.mark.parametrize(("model", "providers", "expected"), [
    # an explicit prefix naming a configured provider wins
    ("openrouter/anthropic/claude-3", {"openrouter": {"apiKey": "sk-or-1"}, "anthropic": {"apiKey": "a"}}, "openrouter"),
    # a keyword of the model name
    ("deepseek-chat", {"openrouter": {"apiKey": "k"}, "deepseek": {"apiKey": "d"}}, "deepseek"),
    ("claude-sonnet-4-5", {"anthropic": {"apiKey": "a"}, "openai": {"apiKey": "o"}}, "anthropic"),
    # a local server with an apiBase takes models without a keyword
    ("llama3.2", {"ollama": {"apiBase": "http://localhost:11434/v1"}, "openai": {}}, "ollama"),
    # otherwise the first provider with a key, gateways first
    ("some-model", {"deepseek": {"apiKey": "d"}, "openrouter": {"apiKey": "k"}}, "openrouter"),
    # a keyword match without a key does not count
    ("gpt-4o", {"openai": {"apiKey": ""}, "custom": {"apiBase": "http://127.0.0.1:1/v1"}}, "custom"),
    # custom entries: the one named by the prefix, and sent without it
    ("myproxy/gpt-4o", {"myproxy": {"apiBase": "http://127.0.0.1:2/v1"}}, "myproxy"),
])
def test_provider_auto_is_inferred_as_nanobot_does(tmp_path, model, providers, expected):
    settings = settings_for(tmp_path, {
        "agents": {"defaults": {"model": model, "provider": "auto"}}, "providers": providers,
    })
    assert settings.model_target().provider == expected


def test_the_model_name_is_sent_as_nanobot_sends_it(tmp_path):
    custom = settings_for(tmp_path, {
        "agents": {"defaults": {"model": "myproxy/gpt-4o"}},
        "providers": {"myproxy": {"apiBase": "http://127.0.0.1:2/v1"}},
    }).model_target()
    assert custom.model == "gpt-4o"
    gateway = settings_for(tmp_path, {
        "agents": {"defaults": {"model": "anthropic/claude-opus-4-5"}},
        "providers": {"openrouter": {"apiKey": "sk-or-v1-0000"}},
    }).model_target()
    assert (gateway.provider, gateway.model) == ("openrouter", "anthropic/claude-opus-4-5")
    direct = settings_for(tmp_path, {
        "agents": {"defaults": {"model": "anthropic/claude-opus-4-5"}},
        "providers": {"anthropic": {"apiKey": "sk-ant-0000"}},
    }).model_target()
    assert (direct.kind, direct.model) == ("anthropic", "claude-opus-4-5")


def test_camel_case_provider_names_and_unsupported_backends(tmp_path):
    lm = settings_for(tmp_path, {
        "agents": {"defaults": {"model": "qwen3", "provider": "lm_studio"}},
        "providers": {"lmStudio": {"apiBase": "http://localhost:1234/v1"}},
    }).model_target()
    assert (lm.provider, lm.api_base, lm.api_key) == ("lmStudio", "http://localhost:1234/v1", "not-needed")
    with pytest.raises(UserError, match="needs an API hippobot does not speak"):
        settings_for(tmp_path, {"agents": {"defaults": {"model": "m", "provider": "bedrock"}}}).model_target()


def test_the_env_still_overrides_a_nanobot_config(tmp_path):
    data = json.loads((FIXTURES / "nanobot-0.3.5" / "config.json").read_text())
    target = settings_for(tmp_path, data, HIPPOBOT_API_BASE="http://127.0.0.1:3/v1", HIPPOBOT_MODEL="other").model_target()
    assert (target.api_base, target.model) == ("http://127.0.0.1:3/v1", "other")


@pytest.mark.parametrize(("defaults", "message"), [
    ({"maxTokens": 8192, "contextWindowTokens": 8192}, r"key agents.defaults.maxTokens: 8192 leaves no room"),
    ({"maxTokens": 100000, "contextWindowTokens": 100}, r"key agents.defaults.maxTokens"),
    ({"idleCompactAfterMinutes": -5}, r"key agents.defaults.idleCompactAfterMinutes"),
    ({"sessionTtlMinutes": -1}, r"key agents.defaults.sessionTtlMinutes"),
    ({"dream": {"intervalH": 0}}, r"key agents.defaults.dream.intervalH"),
    ({"dream": {"intervalH": -2}}, r"key agents.defaults.dream.intervalH"),
    ({"dream": {"intervalH": "often"}}, r"key agents.defaults.dream.intervalH"),
    ({"dream": {"cron": "every tuesday"}}, r"key agents.defaults.dream.cron: 'every tuesday' is not a cron"),
    ({"timezone": "Mars/Olympus"}, r"key agents.defaults.timezone: unknown time zone"),
], ids=lambda v: str(v)[:40])
def test_values_that_cannot_work_are_config_errors_with_file_and_key(tmp_path, defaults, message):
    path = write(tmp_path, {"agents": {"defaults": defaults}})
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_nonsense_numbers_are_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"tools": {"exec": {"timeout": Infinity}}}')
    with pytest.raises(ConfigError):
        load_config(path)
    write(tmp_path, {"modelPresets": {"p": {"model": "m", "maxTokens": 9000, "contextWindowTokens": 4000}}})
    with pytest.raises(ConfigError, match=r"key modelPresets\.p\.maxTokens"):
        load_config(path)


def test_a_config_error_stops_a_command_with_one_line(tmp_path):
    from hippobot.testing.cli import run_cli

    write(tmp_path, {"agents": {"defaults": {"maxTokens": 5000, "contextWindowTokens": 4096}}})
    out = run_cli(["sessions", "list"], tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "maxTokens" in out.stderr and "Traceback" not in out.stderr
