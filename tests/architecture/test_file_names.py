"""Every file and folder name of a workspace or home is spelled in one module,
``hippobot/workspace.py``; every other module asks it (``Workspace``, ``Home``,
``NanobotFiles`` or the relative-name constants).

Two checks over the source, by its syntax tree (docstrings and prose never count: a text
with a space in it is prose, which may name files for the user):

* a path is never built from a name literal (``x / "memory"``, ``os.path.join(r, "sessions")``,
  ``Path(".hippobot")``, ``p.with_name("HISTORY.md.bak")``, a glob), outside a short list of
  paths that are not the workspace's (git's own files, package data, test helpers);
* no literal spells a name that ``workspace.py`` names (``"memory/MEMORY.md"``,
  ``".hippobot"``, ``"history.jsonl"``...), whatever it is used for (dict keys, comparisons).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import hippobot
from hippobot import workspace

SRC = Path(hippobot.__file__).parent
OWNER = SRC / "workspace.py"

# Calls whose string arguments are path components.
_PATH_CALLS = ("path.join", "Path", "PurePath", "PurePosixPath", "joinpath", "with_name",
               "with_suffix", "glob", "rglob")

# Literals that build paths which are not a workspace's or home's, and why.
ALLOWED: dict[tuple[str, str], str] = {
    **{("migrate/nanobot.py", name): "git's own layout, read without git (nanobot's repository)"
       for name in ("HEAD", "packed-refs", "refs", "objects", "pack", "*.idx")},
    **{(module, "templates"): "package data (importlib.resources), not a workspace path"
       for module in ("agent/onboarding.py", "context/loader.py", "migrate/nanobot.py")},
    ("context/skills.py", "skills"): "the skills shipped in the package",
    ("cli/import_cmd.py", "~/.nanobot"): "the --help default of `hippobot import nanobot`",
    ("errors.py", "~/.hippobot/config.json"): "wording of a message (callers pass the path)",
    **{("testing/cli.py", name): "a test helper's own temp files"
       for name in ("stdin", "stdout", "stderr")},
    ("testing/pytest_plugin.py", "home"): "a test helper's own temp homes",
    ("atomic.py", ".tmp"): "the temp file atomic writes rename (its own name)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(node: ast.AST) -> Iterator[ast.Constant]:
    """The literal text of ``node``: a string, or an f-string's fixed parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.JoinedStr):
        yield from (v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))


def _path_parts(tree: ast.AST) -> set[int]:
    """Literals that are operands of ``/`` or arguments of a path-building call."""
    parts: set[int] = set()
    for node in ast.walk(tree):
        operands: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(_PATH_CALLS):
            operands = list(node.args)
        parts.update(id(c) for op in operands for c in _strings(op))
    return parts


def _owned_names() -> set[str]:
    """The names workspace.py gives (its constants and every path its classes name, relative
    to their root), those with a dot or a slash: "memory/MEMORY.md", "MEMORY.md",
    ".hippobot", "recall.sqlite3", "nanobot-sync.json"..."""
    root = Path("/root-of-names")
    paths: list[Path] = []
    for cls, obj in ((workspace.Workspace, workspace.Workspace(root)),
                     (workspace.Home, workspace.Home(root)),
                     (workspace.NanobotFiles, workspace.NanobotFiles(root))):
        for attr in dir(cls):
            if isinstance(getattr(cls, attr), property):
                value = getattr(obj, attr)
                paths += [value] if isinstance(value, Path) else []
    files = workspace.NanobotFiles
    paths += [*files.workspace_marks(root), files.workspace_id(root), files.namespace_marker(root)]
    paths += workspace.Workspace(root).recall_index_files
    texts = {p.relative_to(root).as_posix() for p in paths}
    for value in (v for k, v in vars(workspace).items() if k.isupper()):  # the constants
        texts.update(v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, str))
    names = set()
    for text in texts:
        text = text.strip("/")
        names.add(text)
        names.update(part for part in text.split("/") if "." in part)
    return {n for n in names if re.search(r"[A-Za-z]", n) and re.search(r"[./]", n)}


def _spells(text: str, name: str) -> bool:
    """Whether ``name``'s path components appear, in order, among ``text``'s."""
    have, want = text.strip("/").split("/"), name.split("/")
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def name_violations(src: Path = SRC, owner: Path = OWNER) -> list[str]:
    owned = _owned_names()
    bad = []
    for path in sorted(src.rglob("*.py")):
        if path == owner:
            continue
        rel = path.relative_to(src).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = _docstrings(tree)
        building = _path_parts(tree)
        literals = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for node in sorted(literals, key=lambda n: (n.lineno, n.col_offset)):
            text = node.value
            if id(node) in prose or re.search(r"\s", text) or (rel, text) in ALLOWED:
                continue
            where = f"{rel}:{node.lineno}: {text!r}"
            if id(node) in building and re.search(r"[A-Za-z0-9]", text):
                bad.append(f"{where} builds a path (ask hippobot.workspace)")
            elif any(_spells(text, name) for name in owned):
                bad.append(f"{where} spells a name hippobot.workspace owns")
    return bad


def test_only_the_workspace_module_spells_file_names() -> None:
    assert name_violations() == []


def test_the_check_sees_built_paths_and_spelled_names(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(
        '"""Docs may say memory/MEMORY.md."""\n'
        "import os\n"
        "def f(ws, rel):\n"
        '    log = ws / ".hippobot" / "usage.jsonl"\n'
        '    os.path.join(ws, "sessions")\n'
        '    folder = ws / f"dream-{rel}"\n'
        '    files = {"memory/MEMORY.md": 1}\n'
        '    print("wrote SOUL.md and USER.md")  # prose\n'
        '    return ws / rel, ws.glob("*")\n'
    )
    found = [line.split(": ", 1)[1] for line in name_violations(tmp_path, tmp_path / "none.py")]
    assert found == [
        "'.hippobot' builds a path (ask hippobot.workspace)",
        "'usage.jsonl' builds a path (ask hippobot.workspace)",
        "'sessions' builds a path (ask hippobot.workspace)",
        "'dream-' builds a path (ask hippobot.workspace)",
        "'memory/MEMORY.md' spells a name hippobot.workspace owns",
    ]
