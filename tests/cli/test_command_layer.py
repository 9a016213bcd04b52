"""The command layer (``hippobot.cli._app``): what a user or a script sees of it, namely
values read as their declared types, usage errors as one line with exit status 2, help when
no command is given, and declarations it refuses."""

# No ``from __future__ import annotations``: the commands declared below are read by the
# command layer, which takes real annotations only.

from pathlib import Path
from typing import Annotated

import pytest

from hippobot import __version__
from hippobot.cli._app import Argument, Group, Option, build_parser, confirm, run
from hippobot.cli.main import app
from hippobot.testing.cli import run_cli


def _parsed(argv: list[str]) -> dict[str, object]:
    namespace, extras = build_parser(app, "hippobot").parse_known_args(argv)
    assert extras == []
    return {k: v for k, v in vars(namespace).items() if ":" in k}


def test_values_are_read_as_their_declared_types():
    agent = _parsed(["agent", "-m", "hi", "--image", "a.png", "--image", "b.png", "-w", "ws", "--json"])
    assert agent["agent:message"] == "hi" and agent["agent:json_out"] is True
    assert agent["agent:image"] == [Path("a.png"), Path("b.png")]
    assert agent["agent:workspace"] == Path("ws") and agent["agent:project"] is None
    assert agent["agent:session"] == "cli:direct" and agent[":verbose"] is False
    history = _parsed(["-v", "memory", "history", "-n", "5"])
    assert history["memory history:limit"] == 5 and history[":verbose"] is True
    assert history["memory history:session"] is None
    assert _parsed(["doctor", "--timeout", "2"])["doctor:timeout"] == 2.0
    assert _parsed(["import", "nanobot"])["import nanobot:path"] == Path("~/.nanobot")
    assert _parsed(["sessions", "delete", "--yes", "api:x"])["sessions delete:key"] == "api:x"


@pytest.mark.parametrize(("argv", "names", "where"), [
    (["agent", "--bogus"], "--bogus", "hippobot agent --help"),
    (["agent", "-m"], "-m/--message", "hippobot agent --help"),
    (["agent", "-m", "hi", "extra"], "extra", "hippobot agent --help"),
    (["memory", "search"], "QUERY", "hippobot memory search --help"),
    (["memory", "history", "-n", "abc"], "'abc' is not an integer", "hippobot memory history --help"),
    (["usage", "--days", "0"], "less than the minimum, 1", "hippobot usage --help"),
    (["doctor", "--timeout", "nan"], "not a finite number", "hippobot doctor --help"),
    (["nosuch"], "'nosuch'", "hippobot --help"),
    (["memory", "show", "--message", "x"], "--message", "hippobot memory show --help"),
    (["agent", "--mess", "hi"], "--mess", "hippobot agent --help"),  # no abbreviations
])
def test_a_usage_error_is_one_line_naming_it_and_where_help_is(hippobot_home, argv, names, where):
    out = run_cli(argv, hippobot_home)
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("error: ") and names in line and f"(see `{where}`)" in line


@pytest.mark.parametrize("argv", [[], ["-v"], ["sessions"], ["memory"], ["import"]])
def test_a_group_without_a_command_prints_its_help_and_exits_2(hippobot_home, argv):
    out = run_cli(argv, hippobot_home)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"usage: hippobot {' '.join(a for a in argv if a != '-v')}".rstrip())
    assert "Commands:" in out.stderr


def test_version(hippobot_home):
    for argv in (["--version"], ["-v", "--version"], ["--version", "status"]):
        out = run_cli(argv, hippobot_home)
        assert (out.returncode, out.stdout) == (0, f"hippobot {__version__}\n")


def test_a_command_s_exit_status_is_the_process_s(hippobot_home):
    # `sessions delete` without --yes and without a terminal refuses: a HippobotError, 1
    out = run_cli(["sessions", "delete", "api:x"], hippobot_home)
    assert out.returncode == 1 and "pass --yes" in out.stderr


@pytest.mark.parametrize(("answers", "goes_on"), [
    (["y"], True), (["YES"], True), (["n"], False), ([""], False), (["maybe", "y"], True),
])
def test_confirm(monkeypatch, capsys, answers, goes_on):
    feed = iter(answers)
    monkeypatch.setattr("builtins.input", lambda: next(feed))
    if goes_on:
        confirm("Delete?")
    else:
        with pytest.raises(SystemExit) as exit_:
            confirm("Delete?")
        assert exit_.value.code == 1
    out = capsys.readouterr()
    assert out.out.startswith("Delete? [y/N]: ")
    assert ("Aborted!" in out.err) is not goes_on


def test_confirm_at_end_of_input_aborts(monkeypatch, capsys):
    def eof() -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    with pytest.raises(SystemExit):
        confirm("Delete?")
    assert capsys.readouterr().err == "Aborted!\n"


def test_the_callback_and_the_command_get_their_values():
    group = Group(help="Test.")
    seen: list[object] = []

    @group.callback
    def _root(invoked: str | None, loud: Annotated[bool, Option("--loud", help="Loud.")] = False) -> None:
        seen.append(("root", invoked, loud))

    sub = group.group("things", help="Things.")

    @sub.command("add")
    def add(name: Annotated[str, Argument(help="Its name.")],
            count: Annotated[int, Option("--count", "-c", help="How many.")] = 1) -> None:
        seen.append(("add", name, count))

    run(group, ["--loud", "things", "add", "-c", "3", "pen"], prog="t")
    assert seen == [("root", "things", True), ("add", "pen", 3)]


def test_declarations_it_cannot_parse_are_refused_when_made():
    group = Group(help="Test.")
    with pytest.raises(TypeError, match="Annotated"):
        @group.command()
        def plain(name: str) -> None: ...

    def stringly(name: str) -> None: ...

    stringly.__annotations__["name"] = "Annotated[str, Argument(help='x')]"  # as the import makes it
    with pytest.raises(TypeError, match="string"):
        group.command()(stringly)

    with pytest.raises(TypeError, match="flag"):
        @group.command()
        def flag(on: Annotated[bool, Option("--on", help="x")] = True) -> None: ...

    with pytest.raises(ValueError, match="twice"):
        group.group("plain", help="x")
        group.group("plain", help="x")
