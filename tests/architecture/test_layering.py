"""The layers import one way: front ends (cli, server) → agent (and the nanobot import) →
lifecycle → context / session / memory / providers / tools / recall / loop → base modules
(messages, errors, config, workspace, lazy_regex, ...). Every package has a layer, and no import cycle
joins two hippobot modules.

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
BASE = {"messages", "errors", "redact", "locks", "workspace", "safeio", "atomic", "factmatch", "lazy_regex",
        "config", "prompts", "usage_ledger", "schema_build", ""}  # "": the hippobot package itself
# Each package's layer, top first: a module imports only from its own layer or below.
LAYER = {
    **dict.fromkeys(FRONT | {"__main__"}, 4),
    # the nanobot import is an application operation beside the agent (only the CLI runs it)
    **dict.fromkeys({"agent", "migrate"}, 3),
    "lifecycle": 2,
    **dict.fromkeys(LOWER, 1),
    **dict.fromkeys(BASE, 0),
}


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
            if target in LAYER and LAYER[target] > LAYER.get(pkg, 0):
                bad.append(where + f" ({target or 'hippobot'} sits above {pkg or 'hippobot'})")
            if pkg == "providers" and target == "memory":
                bad.append(where + " (providers know nothing of memory)")
            if pkg == "server" and target == "cli":
                bad.append(where + " (the server is a front end of its own, not the CLI's)")
    return bad


def test_every_package_has_a_layer() -> None:
    unplaced = {package_of(p) for p in SRC.rglob("*.py")} - set(LAYER) - {"testing"}
    assert unplaced == set(), f"add {sorted(unplaced)} to LAYER (and docs/architecture.md)"


def test_imports_follow_the_layers() -> None:
    assert layer_violations() == []


STORES = {"memory", "session", "recall", "lifecycle"}
# What a front end may still import from them, and why (everything else goes through the
# application API, hippobot.agent.api).
FRONT_END_EXCEPTIONS = {
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


# --- import cycles -----------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """The hippobot modules ``path`` imports at run time: relative imports resolved, and
    ``from hippobot.pkg import name`` pointing at ``hippobot.pkg.name`` when that is a
    module (else at the package, whose ``__init__`` defines the name)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in MODULES and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle's modules (strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    graph = {name: imported_modules(path) for name, path in MODULES.items()}
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_relative_and_function_level_imports(tmp_path: Path) -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    recall_init = SRC / "recall" / "__init__.py"  # `from .index import ...`
    assert "hippobot.recall.index" in imported_modules(recall_init)
    users = SRC / "server" / "users.py"  # an import inside a function
    assert "hippobot.agent.api" in imported_modules(users)
