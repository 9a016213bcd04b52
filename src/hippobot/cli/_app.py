"""The command layer of ``hippobot``: commands declared on groups, parsed with argparse.

A command is a plain function registered on a :class:`Group`; each of its parameters is
declared ``Annotated[type, Option(...)]`` or ``Annotated[type, Argument(...)]``, and its
docstring is its help (the first paragraph is its summary in the group's list). The types
say how a value is read: ``bool`` is a flag, ``str``/``int``/``float``/``Path`` take a
value (``X | None`` defaults to None), ``list[X] | None`` is a repeatable option.

:func:`run` builds the whole parser from the declarations, parses, runs the group
callbacks and then the command. It replaced typer, which every ``hippobot`` start paid for:
its import, and a pydantic adapter per parameter of the command run (25-35 ms of CPU per
start on the project's 2-core machine); argparse imports in ~3 ms and the whole command
tree's parser builds in ~4 ms. Declaring a command only reads its function's annotations,
which are real objects: command modules do not use ``from __future__ import annotations``
(a string annotation is refused, with that hint, rather than evaluated on every start).
"""

import argparse
import sys
import types
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar, Union, get_args, get_origin

__all__ = ["Argument", "Command", "Group", "Option", "Param", "build_parser", "confirm", "run"]

F = TypeVar("F", bound=Callable[..., object])

# What each value type is called in help (argparse would otherwise name it after the
# parameter, e.g. ``--workspace WORKSPACE``).
_METAVARS: dict[type, str] = {str: "TEXT", Path: "PATH", int: "INT", float: "NUMBER"}
# Namespace keys of the layer itself; a parameter's key is "<command path>:<name>", so no
# two levels (the root's -v, a command's options) can overwrite each other's values.
_PARSER = "<parser>"


class Option:
    """An option's flags (``"--session", "-s"``) and help; ``min`` bounds a number."""

    __slots__ = ("flags", "help", "min")

    def __init__(self, *flags: str, help: str, min: float | None = None) -> None:
        if not flags or not all(f.startswith("-") for f in flags):
            raise TypeError(f"option flags must start with '-': {flags!r}")
        self.flags = flags
        self.help = help
        self.min = min


class Argument:
    """A positional argument's help; it is optional when its parameter has a default."""

    __slots__ = ("help",)

    def __init__(self, *, help: str) -> None:
        self.help = help


class Param:
    """One parameter of a command as the parser sees it (made from its declaration)."""

    __slots__ = ("convert", "default", "flags", "help", "kind", "metavar", "minimum", "name", "required")

    def __init__(self, func: Callable[..., object], name: str, annotation: object,
                 default: object, required: bool) -> None:
        where = f"parameter {name!r} of {func.__qualname__}"
        if isinstance(annotation, str):
            raise TypeError(f"{where}: the annotation is a string (from __future__ import "
                            "annotations?); the command layer reads real annotations")
        if get_origin(annotation) is not Annotated:
            raise TypeError(f"{where}: declare it Annotated[type, Option(...) or Argument(...)]")
        value_type, *extras = get_args(annotation)
        decl = next((e for e in extras if isinstance(e, Option | Argument)), None)
        if decl is None:
            raise TypeError(f"{where}: Annotated[...] names no Option or Argument")
        self.name = name
        self.default = default
        self.required = required
        self.flags: tuple[str, ...] = decl.flags if isinstance(decl, Option) else ()
        self.minimum = decl.min if isinstance(decl, Option) else None
        base, optional = _without_none(value_type)
        if optional and default is not None:
            raise TypeError(f"{where}: an optional value defaults to None")
        if base is bool:
            if not isinstance(decl, Option) or default is not False:
                raise TypeError(f"{where}: a bool is a flag: an Option defaulting to False")
            self.kind = "flag"
        elif get_origin(base) is list:
            (base,) = get_args(base)
            if not isinstance(decl, Option) or default is not None:
                raise TypeError(f"{where}: a list is a repeatable Option defaulting to None")
            self.kind = "append"
        else:
            self.kind = "value" if isinstance(decl, Option) else "positional"
        if base not in _METAVARS and self.kind != "flag":
            raise TypeError(f"{where}: {base!r} is not one of {sorted(t.__name__ for t in _METAVARS)}")
        self.metavar = name.upper() if self.kind == "positional" else _METAVARS.get(base, "")
        self.convert: Callable[[str], Any] = (
            _number(base, self.minimum) if base in (int, float) else str if base is bool else base
        )
        self.help = decl.help + _notes(self)


class Command:
    """A registered command: its function, name and help (the function's docstring)."""

    __slots__ = ("func", "help", "name", "params")

    def __init__(self, func: Callable[..., object], name: str, *, skip: int = 0) -> None:
        self.func = func
        self.name = name
        self.help = _cleandoc(func.__doc__ or "")
        self.params = _params(func, skip)

    @property
    def summary(self) -> str:
        return _summary(self.help)


class Group:
    """Commands and sub-groups under one name; the root group is the program itself.

    A callback (:meth:`callback`) runs before any command of the group, with the name of
    the command or sub-group invoked (None when none was) and the options it declares.
    """

    def __init__(self, help: str) -> None:
        self.help = _cleandoc(help)
        self.commands: dict[str, Command] = {}
        self.groups: dict[str, Group] = {}
        self.on_invoke: Command | None = None

    @property
    def summary(self) -> str:
        return _summary(self.help)

    def entries(self) -> list[tuple[str, "Command | Group"]]:
        """Commands, then sub-groups, each in the order they were registered: the order
        ``--help`` has always listed them in."""
        return [*self.commands.items(), *self.groups.items()]

    def command(self, name: str | None = None) -> Callable[[F], F]:
        """Register the decorated function as a command, named ``name`` or after the
        function (``list_all`` -> ``list-all``)."""

        def register(func: F) -> F:
            key = name or func.__name__.replace("_", "-")
            self._claim(key)
            self.commands[key] = Command(func, key)
            return func

        return register

    def group(self, name: str, *, help: str) -> "Group":
        """A new sub-group registered under ``name``."""
        self._claim(name)
        sub = self.groups[name] = Group(help)
        return sub

    def callback(self, func: F) -> F:
        """Register the decorated function as this group's callback: its first parameter
        gets the name invoked, the others are the group's own options."""
        self.on_invoke = Command(func, "", skip=1)
        return func

    def _claim(self, name: str) -> None:
        if name in self.commands or name in self.groups:
            raise ValueError(f"{name!r} is registered twice")


# --- running -----------------------------------------------------------------------------


def run(root: Group, argv: Sequence[str], prog: str) -> None:
    """Parse ``argv`` and run what it names: usage errors exit 2 with one line on stderr;
    a group invoked without a command prints its help on stderr and exits 2 (as ``hippobot``
    always did); the command's own exceptions and exits pass through."""
    parser = build_parser(root, prog)
    namespace, extras = parser.parse_known_args(list(argv))
    values = vars(namespace)
    deepest: _Parser = values[_PARSER]  # the last (sub)parser that parsed: errors are its own
    if extras:
        deepest.error(_unrecognized(extras, deepest))
    group, path = root, ""
    while True:
        invoked = values.get(_choice_key(path))
        if group.on_invoke is not None:
            group.on_invoke.func(invoked, **_kwargs(group.on_invoke, path, values))
        if invoked is None:
            deepest.print_help(sys.stderr)
            sys.exit(2)
        path = f"{path} {invoked}".strip()
        if invoked in group.commands:
            command = group.commands[invoked]
            command.func(**_kwargs(command, path, values))
            return
        group = group.groups[invoked]


def build_parser(root: Group, prog: str) -> argparse.ArgumentParser:
    """The argparse parser of the whole command tree (a few ms: no help is formatted)."""
    parser = _new_parser(prog, root.help, root.on_invoke, "")
    _add_entries(parser, root, prog, "")
    return parser


def confirm(question: str) -> None:
    """Ask ``question [y/N]`` on the terminal; anything but yes ends the command with
    ``Aborted!`` and exit status 1 (what the confirmation prompt has always done)."""
    while True:
        sys.stdout.write(f"{question} [y/N]: ")
        sys.stdout.flush()
        try:
            answer = input().strip().lower()
        except (EOFError, KeyboardInterrupt):
            answer = "n"
        if answer in ("y", "yes"):
            return
        if answer in ("", "n", "no"):
            sys.stderr.write("Aborted!\n")
            sys.exit(1)
        sys.stderr.write("Error: invalid input\n")


def _kwargs(command: Command, path: str, values: dict[str, Any]) -> dict[str, Any]:
    return {p.name: values[_key(path, p.name)] for p in command.params}


def _key(path: str, name: str) -> str:
    return f"{path}:{name}"


def _choice_key(path: str) -> str:
    return f"{path}>"


# --- building the parser -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the problem and where help is, exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see `{self.prog} --help`)\n")
        sys.exit(2)


def _new_parser(prog: str, help_text: str, own: Command | None, path: str,
                parent: "argparse._SubParsersAction[_Parser] | None" = None, name: str = "",
                summary: str = "") -> _Parser:
    settings: dict[str, Any] = dict(
        prog=prog, description=help_text, formatter_class=_Formatter, add_help=False,
        allow_abbrev=False,  # --mess is not --message: a script's typo fails, as it did
    )
    if parent is None:
        parser = _Parser(**settings)
    else:
        parser = parent.add_parser(name, help=_escape(summary), **settings)
    parser.set_defaults(**{_PARSER: parser})
    # argparse's own two sections, renamed (two new ones per parser: +1 ms to the build)
    positionals, options = parser._positionals, parser._optionals
    positionals.title, options.title = "Arguments", "Options"
    params = own.params if own is not None else []
    for p in params:
        _add_param(positionals if p.kind == "positional" else options, p, _key(path, p.name))
    options.add_argument("--help", action="help", help="Show this message and exit.")
    args = "".join(f" {p.metavar}" if p.required else f" [{p.metavar}]"
                   for p in params if p.kind == "positional")
    parser.usage = f"{prog} [OPTIONS]{args}"
    return parser


def _add_entries(parser: _Parser, group: Group, prog: str, path: str) -> None:
    parser.usage = f"{prog} [OPTIONS] COMMAND [ARGS]..."
    choices = parser.add_subparsers(title="Commands", metavar="COMMAND", dest=_choice_key(path),
                                    prog=prog, parser_class=_Parser)
    for name, entry in group.entries():
        sub_prog, sub_path = f"{prog} {name}", f"{path} {name}".strip()
        if isinstance(entry, Command):
            _new_parser(sub_prog, entry.help, entry, sub_path, choices, name, entry.summary)
        else:
            sub = _new_parser(sub_prog, entry.help, entry.on_invoke, sub_path, choices, name, entry.summary)
            _add_entries(sub, entry, sub_prog, sub_path)


def _add_param(into: argparse._ArgumentGroup, p: Param, key: str) -> None:
    help_text = _escape(p.help)
    if p.kind == "positional":
        if p.required:
            into.add_argument(key, metavar=p.metavar, type=p.convert, help=help_text)
        else:
            into.add_argument(key, metavar=p.metavar, type=p.convert, help=help_text, nargs="?",
                              default=p.default)
        return
    flags = sorted(p.flags, key=lambda f: f.startswith("--"))  # -s, --session: short first
    if p.kind == "flag":
        into.add_argument(*flags, dest=key, action="store_true", help=help_text)
    else:
        into.add_argument(*flags, dest=key, metavar=p.metavar, type=p.convert, default=p.default,
                          required=p.required, help=help_text,
                          action="append" if p.kind == "append" else "store")


def _params(func: Callable[..., object], skip: int) -> list[Param]:
    """The declared parameters, read from the function's code object and annotations
    (``inspect.signature`` would do the same, slower and importing more)."""
    code = func.__code__
    if code.co_kwonlyargcount or code.co_flags & 0x0C:  # keyword-only, *args, **kwargs
        raise TypeError(f"{func.__qualname__}: only plain parameters can be declared")
    names = code.co_varnames[: code.co_argcount]
    defaults = func.__defaults__ or ()
    first_default = len(names) - len(defaults)
    annotations = func.__annotations__
    return [
        Param(func, name, annotations.get(name),
              defaults[i - first_default] if i >= first_default else None,
              required=i < first_default)
        for i, name in enumerate(names) if i >= skip
    ]


def _without_none(annotation: object) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (it, False)."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return annotation, False


def _number(kind: type, minimum: float | None) -> Callable[[str], int | float]:
    noun = "an integer" if kind is int else "a number"

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value != value or value in (float("inf"), float("-inf")):  # nan, inf
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is less than the minimum, {minimum:g}")
        return value

    return convert


def _notes(p: Param) -> str:
    """The default and bounds, after the help text as ``[default: ...]``."""
    notes = []
    if p.kind in ("value", "positional") and p.default is not None:
        notes.append(f"default: {p.default}")
    if p.minimum is not None:
        notes.append(f"x>={p.minimum:g}")
    if p.kind == "positional" and p.required:
        notes.append("required")
    return f"  [{'; '.join(notes)}]" if notes else ""


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    message = f"unrecognized arguments: {' '.join(extras)}"
    unknown = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    if unknown is not None:
        import difflib  # only on this error's path

        close = difflib.get_close_matches(unknown, list(parser._option_string_actions), n=3)
        if close:
            message += f" (did you mean {' or '.join(close)}?)"
    return message


def _escape(text: str) -> str:
    return text.replace("%", "%%")  # argparse %-formats help strings


def _cleandoc(text: str) -> str:
    """A docstring without its indentation (as ``inspect.cleandoc``, which imports more)."""
    lines = text.expandtabs().strip().splitlines()
    if not lines:
        return ""
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents, default=0)
    return "\n".join([lines[0].strip(), *(line[margin:].rstrip() for line in lines[1:])])


def _summary(text: str) -> str:
    """A help text's first paragraph on one line: its entry in the group's list."""
    return " ".join(text.split("\n\n", 1)[0].split())


class _Formatter(argparse.HelpFormatter):
    """argparse's layout, with: paragraphs of a help text kept; lines broken only at spaces
    (never inside ``OpenAI-compatible`` or a path, so a summary reads whole at any width);
    ``-s, --session TEXT`` instead of ``-s TEXT, --session TEXT``; and a group's commands
    listed under "Commands:" without argparse's ``COMMAND`` line above them."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            "\n".join(indent + line for line in self._split_lines(paragraph, width - len(indent)))
            for paragraph in text.split("\n\n")
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap  # argparse imports it too, only when help is formatted

        return textwrap.wrap(" ".join(text.split()), max(width, 20),
                             break_on_hyphens=False, break_long_words=False)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        metavar = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{', '.join(action.option_strings)} {metavar}"

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(sub) for sub in action._get_subactions())
        return super()._format_action(action)

    def _iter_indented_subactions(self, action: argparse.Action) -> Generator[argparse.Action, None, None]:
        # The commands stand where the COMMAND line would: not indented below it.
        if isinstance(action, argparse._SubParsersAction):
            yield from action._get_subactions()
