"""``--help`` lists every command with its whole summary, on any terminal width."""

from __future__ import annotations

import inspect

import pytest

from hippobot.cli.main import app
from hippobot.testing.cli import run_cli

GROUPS = {"": app, **{g.name: g.typer_instance for g in app.registered_groups if g.name}}


def _summaries(group) -> dict[str, str]:
    out = {}
    for command in group.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        doc = inspect.cleandoc(command.help or inspect.getdoc(command.callback) or "")
        out[name] = " ".join(doc.split("\n\n")[0].split())
    for sub in group.registered_groups:
        out[sub.name] = " ".join(sub.typer_instance.info.help.split())
    return out


@pytest.mark.parametrize("columns", ["50", "80"])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_help_shows_each_summary_whole(hippobot_home, group, columns):
    out = run_cli([*([group] if group else []), "--help"], hippobot_home, COLUMNS=columns)
    assert out.returncode == 0, out.stderr
    listing = out.stdout.split("Commands:", 1)[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    for name, summary in _summaries(GROUPS[group]).items():
        assert f"{name} {summary}" in flat, (name, summary)
