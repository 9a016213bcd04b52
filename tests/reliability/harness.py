"""Shared pieces of the reliability suite.

* :class:`WorkspaceModel`: a scripted model that answers every kind of call the agent makes
  (chat turns, tool turns, consolidation, both Dream phases) from the request alone, so a
  worker can be killed and restarted at any point without a queue getting out of step. It
  checks every request it receives for replay legality.
* :func:`request_violations`: what would make a provider reject a message list (orphan tool
  results, unanswered tool calls, a conversation that does not start with the user).
* :func:`check_workspace`: everything a user counts on after a crash, checked on the files.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import struct
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hippobot.memory.gitstore import CURSOR_PATH, GitStore
from hippobot.memory.history import parse_line
from hippobot.messages import content_text, public_text
from hippobot.session.keys import relpath_to_key
from hippobot.session.model import SYNTHETIC_TOOL_RESULT
from hippobot.session.store import JsonlSessionStore
from hippobot.testing.archivist import archivist, is_archive_request
from hippobot.testing.scripted import (
    Plan,
    RecordedRequest,
    ScriptedCall,
    ScriptedModel,
    _Reply,
    estimate_usage,
)

from .child_driver import FACT_END, MEMORY_SEED, TOOLS_FLAG

__all__ = [
    "Findings",
    "ResettingProxy",
    "WorkspaceModel",
    "check_workspace",
    "read_journal",
    "request_violations",
]

_MARKER = re.compile(r"<<M:[A-Za-z0-9_.-]+>>")
_ENTRY = re.compile(r"^\[#(\d+) ", re.M)
_FINDING = re.compile(r"^\[MEMORY\] (remembered entry #\d+(?:: .*)?)$", re.M)
_FACT_LINE = re.compile(r"^- remembered entry #(\d+)(?:: .*)?$")
_DURABLE = re.compile(r"^\s*(?:\[#\d+ [^\]]*\] )?- \[(?:permanent|durable|correction)\] (.+)$", re.M)
PHASE1 = "## Task: analysis"
PHASE2 = "## Task: apply the findings"


# --- replay legality -----------------------------------------------------------------------


def request_violations(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Why this message list is not a legal chat request ([] when it is).

    Legal: optional system messages first, then a user message; every ``tool`` message
    answers a call declared by the nearest preceding assistant message, within the run of
    tool messages right after it, at most once; every declared call is answered.
    """
    problems: list[str] = []
    start = 0
    while start < len(messages) and messages[start].get("role") == "system":
        start += 1
    if start < len(messages) and messages[start].get("role") != "user":
        problems.append(f"conversation starts with a {messages[start].get('role')} message")
    pending: dict[str, bool] = {}
    in_group = False
    for i, msg in enumerate(messages):
        role = msg.get("role")
        problems += [f"message {i}: {p}" for p in _shape_problems(msg)]
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if not in_group or call_id not in pending:
                problems.append(f"message {i}: tool result {call_id!r} without its call")
            elif pending[call_id]:
                problems.append(f"message {i}: second result for {call_id!r}")
            else:
                pending[call_id] = True
            continue
        unanswered = [c for c, done in pending.items() if not done]
        if unanswered:
            problems.append(f"message {i}: tool calls {unanswered} were never answered")
        pending, in_group = {}, False
        if role == "assistant" and msg.get("tool_calls"):
            pending = {c["id"]: False for c in msg["tool_calls"]}
            in_group = True
    unanswered = [c for c, done in pending.items() if not done]
    if unanswered:
        problems.append(f"end: tool calls {unanswered} were never answered")
    return problems


def _shape_problems(msg: dict[str, Any]) -> list[str]:
    """What a chat-completions endpoint would reject in one message's fields."""
    role, content = msg.get("role"), msg.get("content")
    if role not in ("system", "user", "assistant", "tool"):
        return [f"unknown role {role!r}"]
    blocks_ok = isinstance(content, list) and all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in content
    )
    if role == "assistant":
        ok = content is None or isinstance(content, str) or blocks_ok
        if content is None and not msg.get("tool_calls"):
            ok = False
    else:
        ok = isinstance(content, str) or (blocks_ok and role == "user")
    problems = [] if ok else [f"{role} content of type {type(content).__name__}"]
    for call in msg.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments"), str) and isinstance(call.get("id"), str)):
            problems.append(f"malformed tool call {str(call)[:60]}")
    return problems


# --- the model --------------------------------------------------------------------------------


class WorkspaceModel(ScriptedModel):
    """Answers from the request alone (queued steps still win, for fault injection).

    * consolidation requests: :func:`hippobot.testing.archivist.archivist`;
    * Dream phase 1: one ``[MEMORY] remembered entry #N: <its durable facts>`` finding per
      entry shown (Dream only moves its cursor past facts a file states);
    * Dream phase 2: one ``edit_file`` that inserts the findings before :data:`FACT_END` in
      memory/MEMORY.md, then a one-line answer;
    * a user message carrying :data:`TOOLS_FLAG`: ``write_file`` + ``read_file`` of a note
      named after the turn's marker, then a reply; any other turn: ``ok <marker>``.

    Every request is checked with :func:`request_violations`; problems are kept in
    :attr:`violations`. Requests are counted by kind but not stored (a crash run makes
    thousands).
    """

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []
        self.kinds: Counter[str] = Counter()
        self.synthetic = 0  # requests replaying a tool call without its real result
        self._count_lock = threading.Lock()

    def take(self, request: RecordedRequest) -> Plan:
        if self.pending():
            return super().take(request)
        kind, reply = self.answer(request)
        problems = request_violations(request.messages)
        stand_in = any(
            m.get("role") == "tool" and m.get("content") == SYNTHETIC_TOOL_RESULT
            for m in request.messages
        )
        with self._count_lock:
            self.kinds[kind] += 1
            self.synthetic += stand_in
            if problems:
                self.violations.append(f"{kind} request: {'; '.join(problems)}")
        return Plan(reply, reply, estimate_usage(request, reply))

    def forget_queue(self) -> None:
        """Drop the queued steps nobody consumed."""
        with self._lock:
            self._queue.clear()

    def answer(self, request: RecordedRequest) -> tuple[str, _Reply]:
        messages = request.messages
        first_user = next(
            (content_text(m.get("content")) for m in messages if m.get("role") == "user"), ""
        )
        if is_archive_request(request):
            return "consolidate", _Reply(text=archivist(request))
        if first_user.startswith(PHASE1) or PHASE1 in first_user:
            history = first_user.split("## Conversation history", 1)[-1]
            # the entry's facts go with it: Dream must write what it consumes
            lines = []
            for block in re.split(r"(?m)^(?=\[#\d+ )", history):
                m = _ENTRY.match(block)
                if m is not None:
                    facts = "; ".join(_DURABLE.findall(block))
                    lines.append(f"[MEMORY] remembered entry #{m.group(1)}" + (f": {facts}" if facts else ""))
            return "dream-analyse", _Reply(text="\n".join(lines) or "[SKIP] nothing new")
        if PHASE2 in first_user:
            if messages[-1].get("role") == "tool":
                return "dream-edit", _Reply(text="Applied the findings.")
            findings = _FINDING.findall(first_user.split("## Current memory files", 1)[0])
            new_text = "".join(f"- {f}\n" for f in findings) + FACT_END
            args = {"path": "memory/MEMORY.md", "old_text": FACT_END, "new_text": new_text}
            return "dream-edit", _Reply(tool_calls=(self._tool("edit_file", args),))
        last_user = request.last_user_words()
        found = _MARKER.search(last_user)
        tag = found.group(0) if found else "<<M:none>>"
        if messages and messages[-1].get("role") == "tool":
            return "turn", _Reply(text=f"done {tag}")
        if TOOLS_FLAG in last_user:
            note = "notes/" + re.sub(r"[^A-Za-z0-9_-]", "_", tag) + ".txt"
            calls = (
                self._tool("write_file", {"path": note, "content": f"note for {tag}\n"}),
                self._tool("read_file", {"path": note}),
            )
            return "turn", _Reply(text="", tool_calls=calls)
        return "turn", _Reply(text=f"ok {tag}")

    def _tool(self, name: str, args: dict[str, Any]) -> ScriptedCall:
        return self._call(name, args, None)


# --- the journal ---------------------------------------------------------------------------


def read_journal(home: Path) -> list[dict[str, Any]]:
    path = home / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# --- the workspace check -----------------------------------------------------------------------


@dataclass
class Findings:
    """What :func:`check_workspace` found: ``problems`` must be empty; the rest is figures."""

    problems: list[str] = field(default_factory=list)
    sessions: int = 0
    messages: int = 0
    history_entries: int = 0
    dream_cursor: int = 0
    facts: int = 0
    completed_turns: int = 0

    def add(self, problem: str) -> None:
        self.problems.append(problem)


def _strict_jsonl(path: Path, found: Findings) -> list[dict[str, Any]]:
    records = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            found.add(f"{path.name}:{number} is not JSON: {raw[:80]!r}")
            continue
        if not isinstance(record, dict):
            found.add(f"{path.name}:{number} is not an object")
            continue
        records.append(record)
    return records


def _check_sessions(workspace: Path, found: Findings, settled: bool) -> dict[str, list[dict[str, Any]]]:
    sessions: dict[str, list[dict[str, Any]]] = {}
    root = workspace / "sessions"
    if not root.exists():
        return sessions
    for corrupt in root.rglob("*.corrupt"):
        found.add(f"{corrupt.relative_to(workspace)} exists: a session had unreadable lines")
    seen_markers: Counter[str] = Counter()
    for path in sorted(root.rglob("*.jsonl")):
        key = relpath_to_key(path.relative_to(workspace))
        records = _strict_jsonl(path, found)
        if key is None:
            found.add(f"{path} does not map back to a session key")
            continue
        if not records or records[0].get("_type") != "session" or records[0].get("key") != key:
            found.add(f"{path.name}: first line is not the header of {key!r}")
        messages = [r for r in records if "_type" not in r]
        metas = [r for r in records if r.get("_type") == "meta"]
        sessions[key] = messages
        found.sessions += 1
        found.messages += len(messages)
        meta = metas[-1] if metas else {}
        if not 0 <= meta.get("last_consolidated", 0) <= len(messages):
            found.add(f"{key}: last_consolidated {meta['last_consolidated']} out of range")
        fresh = (meta.get("metadata") or {}).get("fresh_start", 0)
        if settled and fresh > meta.get("last_consolidated", 0):
            found.add(f"{key}: /new at message {fresh} was never archived")
        for msg in messages:
            if msg.get("role") == "user":
                seen_markers.update(set(_MARKER.findall(public_text(msg))))
        loaded = JsonlSessionStore(workspace).load(key)
        if loaded is None or len(loaded.messages) != len(messages):
            found.add(f"{key}: the session reader disagrees with the file")
            continue
        wire = [{k: v for k, v in m.items() if not k.startswith("_")} for m in loaded.get_history()]
        for problem in request_violations(wire):
            found.add(f"{key}: replay is not legal: {problem}")
    for tag, count in seen_markers.items():
        if count > 1:
            found.add(f"user message {tag} is stored {count} times")
    return sessions


def _check_history(workspace: Path, sessions: dict[str, list], found: Findings) -> list[int]:
    path = workspace / "memory" / "history.jsonl"
    cursors: list[int] = []
    ranges: dict[str, list[tuple[int, int, int]]] = {}
    if path.exists():
        for number, raw in enumerate(path.read_bytes().split(b"\n"), 1):
            if not raw.strip():
                continue
            entry = parse_line(raw.decode("utf-8", "strict"))
            if entry is None:
                found.add(f"history.jsonl:{number} is not a valid entry: {raw[:80]!r}")
                continue
            if cursors and entry.cursor <= cursors[-1]:
                found.add(f"history.jsonl:{number}: cursor {entry.cursor} after {cursors[-1]}")
            cursors.append(entry.cursor)
            if entry.source is not None:
                src = entry.source
                ranges.setdefault(src.session, []).append((src.start, src.end, entry.cursor))
    found.history_entries = len(cursors)
    for key, spans in ranges.items():
        spans.sort()
        for (a0, a1, ca), (b0, b1, cb) in itertools.pairwise(spans):
            if b0 < a1:
                found.add(f"{key}: history #{ca} ({a0}-{a1}) and #{cb} ({b0}-{b1}) overlap")
        if key in sessions and spans[-1][1] > len(sessions[key]):
            found.add(f"{key}: history names messages past the end of the session")
    for name in (".cursor", ".dream_cursor"):
        counter = workspace / "memory" / name
        if counter.exists() and not re.fullmatch(r"\d+\s*", counter.read_text()):
            found.add(f"memory/{name} holds {counter.read_text()[:40]!r}")
    return cursors


def _check_memory(workspace: Path, cursors: list[int], found: Findings, settled: bool) -> None:
    dream_file = workspace / "memory" / ".dream_cursor"
    dream = int(dream_file.read_text()) if dream_file.exists() else 0
    found.dream_cursor = dream
    if cursors and dream > cursors[-1]:
        found.add(f".dream_cursor {dream} is past the last history entry #{cursors[-1]}")
    text = (workspace / "memory" / "MEMORY.md").read_bytes().decode("utf-8")
    if not (text.startswith(MEMORY_SEED.split(FACT_END)[0]) and text.endswith(FACT_END + "\n")):
        found.add(f"MEMORY.md is not whole: {text[-120:]!r}")
        return
    body = text[len(MEMORY_SEED.split(FACT_END)[0]) : -len(FACT_END) - 1]
    facts: list[int] = []
    for line in body.splitlines():
        m = _FACT_LINE.match(line)
        if m is None:
            found.add(f"MEMORY.md has a line no edit wrote: {line!r}")
        else:
            facts.append(int(m.group(1)))
    found.facts = len(facts)
    for n, count in Counter(facts).items():
        if count > 1:
            found.add(f"MEMORY.md applies entry #{n} {count} times")
    manifest = workspace / ".hippobot" / "dream" / "manifest.json"
    if not manifest.exists() and any(n > dream for n in facts):
        found.add(f"MEMORY.md has facts past .dream_cursor {dream} and no run to roll forward")
    if settled:
        missing = sorted(set(c for c in cursors if c <= dream) - set(facts))
        if missing:
            found.add(f"entries {missing[:10]} are behind .dream_cursor but not in MEMORY.md")


def _check_git(workspace: Path, found: Findings, settled: bool) -> None:
    git = GitStore(workspace)
    if not git.available:
        found.add(f"memory versions unavailable: {git.broken_reason}")
        return
    git.log(limit=5)
    if not settled:
        return
    summary = git.diff_summary()
    # A Dream run that changes no memory file still moves .dream_cursor and, by design, makes
    # no commit for that alone; any other difference is an edit no version holds.
    if any(f.path != CURSOR_PATH for f in summary.files):
        found.add(f"the memory files differ from the last version: {summary}")


def _check_journal(journal: list[dict[str, Any]], sessions: dict[str, list], found: Findings,
                   dream: int) -> None:
    for record in journal:
        if record.get("state") != "done":
            continue
        if record["op"] == "turn":
            found.completed_turns += 1
            messages = sessions.get(record["key"], [])
            index = next(
                (i for i, m in enumerate(messages)
                 if m.get("role") == "user" and record["marker"] in public_text(m)),
                None,
            )
            if index is None:
                found.add(f"completed turn {record['marker']} is missing from {record['key']}")
                continue
            replies = [
                m.get("content") for m in messages[index + 1 :]
                if m.get("role") == "assistant" and not m.get("tool_calls")
            ]
            if record["reply"] not in replies:
                found.add(f"completed turn {record['marker']}: reply {record['reply']!r} missing")
        elif record["op"] == "dream" and record.get("cursor", 0) > dream:
            found.add(f"a completed Dream reached cursor {record['cursor']}; now {dream}")


def check_workspace(workspace: Path, journal: list[dict[str, Any]] = (), *,  # type: ignore[assignment]
                    settled: bool = False) -> Findings:
    """Check everything SPEC 5 promises about the files of ``workspace``.

    ``settled``: no operation is half-done any more (a clean run followed the last crash),
    so memory must also be complete and versioned.
    """
    found = Findings()
    sessions = _check_sessions(workspace, found, settled)
    cursors = _check_history(workspace, sessions, found)
    _check_memory(workspace, cursors, found, settled)
    _check_git(workspace, found, settled)
    _check_journal(list(journal), sessions, found, found.dream_cursor)
    return found


# --- network faults ---------------------------------------------------------------------------


class ResettingProxy:
    """A TCP proxy on 127.0.0.1 whose first ``resets`` connections are reset (RST) once the
    client has sent its request; later connections are forwarded to ``target_port``.

    Used as a context manager; every thread it starts ends when the proxy stops.
    """

    def __init__(self, target_port: int, resets: int) -> None:
        self.target_port = target_port
        self.resets = resets
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def __enter__(self) -> ResettingProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._listener.close()
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            self._open.append(conn)
            number, self.connections = self.connections, self.connections + 1
            if number < self.resets:
                conn.recv(65536)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._open.append(upstream)
            self._spawn(self._pump, conn, upstream)
            self._spawn(self._pump, upstream, conn)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
