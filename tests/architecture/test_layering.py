"""The layers import one way: front ends (cli, server) → agent → lifecycle → context /
session / memory / providers / tools / recall / loop → messages, errors.

Every runtime import in src/hippobot is checked (imports inside functions count; imports
under ``if TYPE_CHECKING:`` do not, they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import hippobot

SRC = Path(hippobot.__file__).parent
FRONT = {"cli", "server"}
LOWER = {"context", "session", "memory", "providers", "tools", "recall", "loop"}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return [(line, name) for line, name in found if name.split(".")[0] == "hippobot"]


def package_of(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py") if len(rel) > 1 or rel[0] != "__init__.py" else ""


def layer_violations() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        pkg = package_of(path)
        if pkg == "testing":
            continue  # test helpers may drive any layer
        for line, name in runtime_imports(path):
            parts = name.split(".")
            target = parts[1] if len(parts) > 1 else ""
            where = f"{path.relative_to(SRC)}:{line} imports {name}"
            if pkg in LOWER | {"lifecycle"} and target == "agent":
                bad.append(where + " (nothing below the agent imports it)")
            if pkg in LOWER | {"lifecycle", "agent"} and target in FRONT:
                bad.append(where + " (front ends sit on top)")
            if pkg in LOWER and target == "lifecycle":
                bad.append(where + " (lifecycle sits above its services)")
            if pkg == "providers" and target == "memory":
                bad.append(where + " (providers know nothing of memory)")
            if pkg in {"messages", "errors", "redact", "locks", "workspace", "atomic", "safeio", "factmatch"} and target in (
                LOWER | FRONT | {"agent", "lifecycle"}
            ):
                bad.append(where + " (a base module imports no layer)")
    return bad


def test_imports_follow_the_layers() -> None:
    assert layer_violations() == []


STORES = {"memory", "session", "recall", "lifecycle"}
# What a front end may still import from them, and why (everything else goes through the
# application API, hippobot.agent.api).
FRONT_END_EXCEPTIONS = {
    # onboarding creates the workspace's version history
    ("cli/onboard.py", "hippobot.memory.gitstore"),
    # the syntax of a session key, checked on the X-Session-Id header
    ("server/identity.py", "hippobot.session.keys"),
}


def front_end_store_imports() -> list[str]:
    """Runtime imports of the stores and lifecycle services by cli/ and server/."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if package_of(path) not in FRONT:
            continue
        rel = path.relative_to(SRC).as_posix()
        for line, name in runtime_imports(path):
            parts = name.split(".")
            if len(parts) > 1 and parts[1] in STORES and (rel, name) not in FRONT_END_EXCEPTIONS:
                bad.append(f"{rel}:{line} imports {name} (use hippobot.agent.api)")
    return bad


def test_front_ends_reach_the_stores_only_through_the_application_api() -> None:
    assert front_end_store_imports() == []


def test_the_check_sees_function_level_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hippobot.agent.agent import Agent\n"
        "def f():\n    from hippobot.agent import agent\n"
    )
    assert runtime_imports(sample) == [(5, "hippobot.agent")]
