"""``--help`` lists every command with its whole summary, on any terminal width."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from hippobot.cli._app import Command, Group
from hippobot.cli.main import app
from hippobot.testing.cli import run_cli


def _groups(group: Group, path: str = "") -> dict[str, Group]:
    out = {path: group}
    for name, sub in group.groups.items():
        out.update(_groups(sub, f"{path} {name}".strip()))
    return out


GROUPS = _groups(app)


def _summaries(group: Group) -> dict[str, str]:
    """What each entry's summary must read: the first paragraph of its docstring (a
    command) or help (a group), on one line; worked out here, not by the command layer."""
    out = {}
    for name, entry in group.entries():
        doc = inspect.getdoc(entry.func) if isinstance(entry, Command) else inspect.cleandoc(entry.help)
        out[name] = " ".join((doc or "").split("\n\n")[0].split())
    return out


def test_every_command_and_group_is_listed_in_registration_order():
    assert list(_summaries(app)) == [
        "onboard", "agent", "status", "context", "dream", "serve", "doctor", "usage",
        "sessions", "memory", "import",
    ]
    assert all(_summaries(group) for group in GROUPS.values())


@pytest.mark.parametrize("columns", ["50", "80"])
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_help_shows_each_summary_whole(hippobot_home, group, columns):
    out = run_cli([*group.split(), "--help"], hippobot_home, COLUMNS=columns)
    assert out.returncode == 0, out.stderr
    listing = out.stdout.split("Commands:", 1)[1]
    assert "..." not in listing
    flat = " ".join(listing.split())
    for name, summary in _summaries(GROUPS[group]).items():
        assert f"{name} {summary}" in flat, (name, summary)


def test_the_command_line_loads_without_asyncio() -> None:
    # --help and the read-only commands never run an event loop; asyncio and what it loads
    # (ssl, concurrent.futures, logging) were ~36 ms of every start
    code = "import sys, hippobot.cli.main; print('asyncio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
