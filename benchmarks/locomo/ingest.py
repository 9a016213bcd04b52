"""A LoCoMo conversation written as a hippobot workspace, through hippobot's own code.

The workspace is made the way ``hippobot onboard`` makes one (templates, folders, memory
versions), then each LoCoMo session becomes one session file written by
:class:`~hippobot.session.store.JsonlSessionStore`: speaker A is ``user``, speaker B is
``assistant``, each message reads ``Name: text``, and messages carry the session's date
(one minute apart, in turn order). Nothing else is added: no summaries, no memory facts,
so a search finds exactly what was said, or the untouched templates.

:class:`Ingested` maps each citation a search can return back to the LoCoMo turn
(``session locomo:conv-26-s3#6`` → ``D3:7``) and lists the documents for the plain
reference retrievers, which see the same texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hippobot.cli.onboard import ensure_workspace
from hippobot.messages import Message
from hippobot.session.model import Session
from hippobot.session.store import JsonlSessionStore

from .dataset import Conversation

__all__ = ["Ingested", "ingest", "session_key"]

_TURN_GAP = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Ingested:
    workspace: Path
    by_citation: dict[str, str]  # hippobot citation -> dia_id
    docs: list[tuple[str, str]]  # (dia_id, text as stored), in conversation order

    def dia_id(self, citation: str) -> str | None:
        """The LoCoMo turn a search hit cites; ``None`` for anything else (e.g. a template)."""
        return self.by_citation.get(citation)


def session_key(conv: Conversation, number: int) -> str:
    return f"locomo:{conv.sample_id}-s{number}"


def ingest(conv: Conversation, workspace: Path) -> Ingested:
    """Write ``conv`` into a new workspace at ``workspace`` (which must not exist yet)."""
    if workspace.exists():
        raise FileExistsError(f"{workspace} already exists")
    ensure_workspace(workspace)
    store = JsonlSessionStore(workspace)
    by_citation: dict[str, str] = {}
    docs: list[tuple[str, str]] = []
    for lsession in conv.sessions:
        key = session_key(conv, lsession.number)
        start = lsession.started.astimezone()
        session = Session(key=key, created_at=start.isoformat(timespec="milliseconds"))
        messages: list[Message] = []
        for i, turn in enumerate(lsession.turns):
            role = "user" if turn.speaker == conv.speaker_a else "assistant"
            text = f"{turn.speaker}: {turn.text}"
            stamp = (start + i * _TURN_GAP).isoformat(timespec="milliseconds")
            message: Message = {"role": role, "content": text, "timestamp": stamp}
            messages.append(session.add(message))
            by_citation[f"session {key}#{i}"] = turn.dia_id
            docs.append((turn.dia_id, text))
        store.append(session, messages)
    return Ingested(workspace, by_citation, docs)
