"""Prompt templates shipped as package data, rendered with explicit variables."""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

__all__ = ["load", "render"]


@cache
def load(name: str) -> str:
    """The text of ``prompts/<name>`` (cached: templates do not change while running)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(name: str, **variables: object) -> str:
    """Render a ``$variable`` template; a missing variable is an error, not a silent blank."""
    return Template(load(name)).substitute({k: str(v) for k, v in variables.items()})
