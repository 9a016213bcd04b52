"""Lifecycle code stays in small pieces: no class in ``lifecycle/`` over ~250 lines (Dream
and the consolidator are phase functions over small values, not one class each)."""

from __future__ import annotations

import ast
from pathlib import Path

import hippobot

LIFECYCLE = Path(hippobot.__file__).parent / "lifecycle"
MAX_CLASS_LINES = 250


def class_sizes(folder: Path) -> dict[str, int]:
    sizes = {}
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def test_no_lifecycle_class_is_over_250_lines() -> None:
    sizes = class_sizes(LIFECYCLE)
    assert sizes  # the folder was found and parsed
    assert {k: n for k, n in sizes.items() if n > MAX_CLASS_LINES} == {}
