"""Reading ``locomo10.json``: conversations, their sessions and the questions about them.

LoCoMo (Maharana et al., ACL 2024; ``data/locomo10.json`` in the public GitHub repository
snap-research/LoCoMo, licence CC BY-NC 4.0, so the file is never part of this project) is a
list of conversations::

    {"sample_id": "conv-26",
     "conversation": {"speaker_a": "Caroline", "speaker_b": "Melanie",
                      "session_1_date_time": "1:56 pm on 8 May, 2023",
                      "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "..."}, ...],
                      ...},
     "qa": [{"question": "...", "answer": "...", "evidence": ["D1:3"], "category": 2}, ...]}

Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (no answer).
A few evidence lists are malformed (``"D8:6; D9:17"``) or name turns that do not exist;
they are split and cleaned here, and a question left with no evidence turn is skipped and
counted, never guessed.

Shared by every LoCoMo mode of the benchmark (retrieval now, question answering later):
this module knows the file format and nothing about hippobot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "Conversation",
    "DatasetError",
    "Question",
    "Session",
    "Turn",
    "load",
    "parse_date",
    "select",
]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D\d+:\d+")


class DatasetError(ValueError):
    """The data file is missing or not LoCoMo-shaped; the message names file and problem."""


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str  # "D3:7": session 3, turn 7 (1-based)
    speaker: str
    text: str


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    started: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # dia_ids of the turns that hold the answer (cleaned)
    answer: str | None


@dataclass(slots=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[Question]
    # questions whose evidence names no turn of this conversation: skipped, counted
    no_evidence: dict[int, int] = field(default_factory=dict)

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


def parse_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → ``datetime(2023, 5, 8, 13, 56)``; ValueError if not."""
    cleaned = " ".join(text.replace(",", " ").split())
    for fmt in ("%I:%M %p on %d %B %Y", "%H:%M on %d %B %Y", "%I:%M %p on %d %b %Y"):
        try:
            return datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
    raise ValueError(f"unreadable session date {text!r}")


def _evidence(raw: Any, known: set[str]) -> tuple[str, ...]:
    """Evidence ids as a clean tuple: malformed entries split, unknown turns dropped."""
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    found: list[str] = []
    for item in items:
        for dia_id in _DIA_ID.findall(str(item)):
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def _conversation(raw: Any, where: str) -> Conversation:
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: expected an object, got {type(raw).__name__}")
    conv = raw.get("conversation")
    if not isinstance(conv, dict):
        raise DatasetError(f"{where}: no 'conversation' object")
    sample_id = str(raw.get("sample_id") or where)
    speakers = [conv.get("speaker_a"), conv.get("speaker_b")]
    if not all(isinstance(s, str) and s for s in speakers):
        raise DatasetError(f"{where} ({sample_id}): 'speaker_a' and 'speaker_b' must be names")
    sessions: list[Session] = []
    for key, turns in conv.items():
        m = _SESSION_KEY.fullmatch(key)
        if m is None:
            continue
        number = int(m.group(1))
        if not isinstance(turns, list):
            raise DatasetError(f"{where} ({sample_id}): {key} is not a list of turns")
        date = conv.get(f"{key}_date_time")
        try:
            started = parse_date(date) if isinstance(date, str) else None
        except ValueError as exc:
            raise DatasetError(f"{where} ({sample_id}): {key}_date_time: {exc}") from None
        if started is None:
            raise DatasetError(f"{where} ({sample_id}): {key} has no {key}_date_time")
        parsed = []
        for i, turn in enumerate(turns):
            if not (
                isinstance(turn, dict)
                and isinstance(turn.get("dia_id"), str)
                and isinstance(turn.get("speaker"), str)
                and isinstance(turn.get("text"), str)
            ):
                raise DatasetError(
                    f"{where} ({sample_id}): {key} turn {i} needs 'speaker', 'dia_id' and 'text'"
                )
            parsed.append(Turn(turn["dia_id"], turn["speaker"], turn["text"]))
        sessions.append(Session(number, started, tuple(parsed)))
    if not sessions:
        raise DatasetError(f"{where} ({sample_id}): no session_N lists of turns")
    sessions.sort(key=lambda s: s.number)
    known = {t.dia_id for s in sessions for t in s.turns}
    qa = raw.get("qa", [])
    if not isinstance(qa, list):
        raise DatasetError(f"{where} ({sample_id}): 'qa' is not a list")
    questions: list[Question] = []
    no_evidence: dict[int, int] = {}
    for i, item in enumerate(qa):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise DatasetError(f"{where} ({sample_id}): qa {i} has no 'question' text")
        try:
            category = int(item.get("category", 0))
        except (TypeError, ValueError):
            raise DatasetError(f"{where} ({sample_id}): qa {i} has a non-numeric category") from None
        evidence = _evidence(item.get("evidence"), known)
        if not evidence:
            no_evidence[category] = no_evidence.get(category, 0) + 1
            continue
        answer = item.get("answer")
        questions.append(
            Question(item["question"], category, evidence, None if answer is None else str(answer))
        )
    return Conversation(sample_id, speakers[0], speakers[1], sessions, questions, no_evidence)


def load(path: Path | str) -> list[Conversation]:
    """All conversations of a LoCoMo file; :class:`DatasetError` (one line) if it is not one."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(
            f"{path}: no such file (get data/locomo10.json from the GitHub repository "
            "snap-research/LoCoMo)"
        ) from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, expected locomo10.json") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text, expected LoCoMo JSON") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, list) or not raw:
        raise DatasetError(f"{path}: expected a non-empty list of conversations")
    try:
        return [_conversation(item, f"conversation {i + 1}") for i, item in enumerate(raw)]
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None


def select(conversations: list[Conversation], spec: str) -> list[Conversation]:
    """Conversations by 1-based position: ``"1-5"``, ``"6-10"``, ``"1,3,7"``."""
    chosen: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise DatasetError(f"--conversations {spec!r}: expected numbers like 1-5 or 1,3") from None
        if not 1 <= first <= last <= len(conversations):
            raise DatasetError(
                f"--conversations {spec!r}: the file has conversations 1-{len(conversations)}"
            )
        chosen.extend(n for n in range(first, last + 1) if n not in chosen)
    if not chosen:
        raise DatasetError(f"--conversations {spec!r}: selects nothing")
    return [conversations[n - 1] for n in chosen]
