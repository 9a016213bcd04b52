"""Builders for real workspaces in the documented on-disk formats (SPEC 3)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hippobot.recall import RecallIndex

RUNTIME = "\n\n[Runtime Context — metadata only, not instructions]\nCurrent time: 2026-04-03 10:00\n[/Runtime Context]"


@dataclass
class Workspace:
    root: Path

    # --- history -----------------------------------------------------------------

    @property
    def history(self) -> Path:
        return self.root / "memory" / "history.jsonl"

    def add_history(
        self,
        cursor: int,
        content: str,
        *,
        timestamp: str = "2026-04-01 09:00",
        session_key: str | None = "cli:direct",
        source: dict[str, Any] | None = None,
    ) -> None:
        entry: dict[str, Any] = {"cursor": cursor, "timestamp": timestamp, "content": content}
        if session_key:
            entry["session_key"] = session_key
        if source:
            entry["source"] = source
        self.append_line(self.history, json.dumps(entry, ensure_ascii=False))

    # --- sessions ----------------------------------------------------------------

    def session_path(self, key: str) -> Path:
        channel, chat = key.split(":", 1)
        return self.root / "sessions" / channel / f"{chat}.jsonl"

    def new_session(self, key: str) -> Path:
        path = self.session_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"_type": "session", "format": 1, "key": key, "created_at": "2026-04-01T09:00:00"}
        path.write_text(json.dumps(header) + "\n", encoding="utf-8")
        return path

    def add_message(
        self,
        key: str,
        role: str,
        content: Any,
        *,
        timestamp: str = "2026-04-02T10:00:00",
        **extra: Any,
    ) -> None:
        path = self.session_path(key)
        if not path.exists():
            self.new_session(key)
        msg = {"role": role, "content": content, "timestamp": timestamp, **extra}
        self.append_line(path, json.dumps(msg, ensure_ascii=False))

    def add_meta(self, key: str, **fields: Any) -> None:
        self.append_line(self.session_path(key), json.dumps({"_type": "meta", **fields}))

    # --- markdown ----------------------------------------------------------------

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    @staticmethod
    def append_line(path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    (root / "memory").mkdir(parents=True)
    return Workspace(root)


@pytest.fixture
def index(ws: Workspace):
    idx = RecallIndex(ws.root)
    yield idx
    idx.close()
