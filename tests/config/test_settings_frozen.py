"""Settings are resolved once and never change afterwards: a variant is a new object."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

from hippobot.config import load_settings


def test_loaded_settings_cannot_be_changed(tmp_path):
    env = {"HIPPOBOT_HOME": str(tmp_path), "HIPPOBOT_MODEL": "m",
           "HIPPOBOT_API_BASE": "http://127.0.0.1:9/v1", "HIPPOBOT_API_KEY": "sk-x"}
    settings = load_settings(env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.workspace = tmp_path / "elsewhere"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        settings.defaults.model = "other"
    with pytest.raises(pydantic.ValidationError):
        settings.config.agents.defaults.dream.batch_size = 1
    with pytest.raises(TypeError):
        settings.env["HIPPOBOT_MODEL"] = "other"  # type: ignore[index]
    with pytest.raises(TypeError):
        settings.flags["model"] = "other"  # type: ignore[index]
    assert settings.model_target().model == "m"


def test_a_variant_is_a_new_object_and_the_original_stays(tmp_path):
    settings = load_settings({"HIPPOBOT_HOME": str(tmp_path)})
    other = settings.with_defaults(max_tokens=1234)
    moved = dataclasses.replace(settings, workspace=tmp_path / "w2")
    assert other.defaults.max_tokens == 1234 and settings.defaults.max_tokens != 1234
    assert moved.workspace == tmp_path / "w2" and settings.workspace != moved.workspace
    assert moved.defaults is settings.defaults  # frozen parts are shared, not copied


def test_a_model_preset_is_applied_to_the_loaded_copy(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"agents": {"defaults": {"modelPreset": "small", "dream": {"modelOverride": "small"}}},'
        ' "modelPresets": {"small": {"model": "tiny-1", "maxTokens": 100, "contextWindowTokens": 1000}}}'
    )
    settings = load_settings({"HIPPOBOT_HOME": str(tmp_path)})
    assert settings.defaults.model == "tiny-1" and settings.defaults.max_tokens == 100
    assert settings.defaults.dream.model_override == "tiny-1"
