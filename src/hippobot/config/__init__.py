"""Configuration: the config.json schema and the loader that applies SPEC 2 precedence."""

from __future__ import annotations

from hippobot.schema_build import without_pydantic_plugins

with without_pydantic_plugins():  # the models are built as their classes are made
    from hippobot.config.loader import (
        KNOWN_ENDPOINTS,
        ModelTarget,
        Settings,
        load_config,
        load_settings,
    )
    from hippobot.config.schema import Config

__all__ = ["KNOWN_ENDPOINTS", "Config", "ModelTarget", "Settings", "load_config", "load_settings"]
