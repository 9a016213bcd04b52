"""Recall and the session reader share one codec: a message's number is the same for both,
whatever the file holds (rejected lines included), and no line makes search fail."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hippobot.recall import RecallIndex
from hippobot.recall.query import parse_citation
from hippobot.recall.sources import SessionState, session_docs
from hippobot.session.store import JsonlSessionStore

KEY = "cli:direct"
REL = Path("sessions/cli/direct.jsonl")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=8))
contents = st.one_of(
    scalars,
    st.lists(st.one_of(scalars, st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)})), max_size=3),
)
roles = st.sampled_from(["user", "assistant", "tool", "system", "narrator", "", "USER"])
tool_calls = st.one_of(
    st.none(),
    st.integers(),
    st.lists(st.one_of(scalars, st.fixed_dictionaries({"function": st.one_of(scalars, st.fixed_dictionaries({"name": st.text(max_size=5), "arguments": st.one_of(st.text(max_size=5), st.integers())}))})), max_size=2),
)


@st.composite
def message_lines(draw: st.DrawFn) -> bytes:
    record: dict[str, object] = {"role": draw(st.one_of(roles, scalars)), "content": draw(contents)}
    if draw(st.booleans()):
        record["tool_calls"] = draw(tool_calls)
    if draw(st.booleans()):
        record["timestamp"] = draw(st.one_of(scalars, st.just("2026-04-03T10:00:00+00:00")))
    if draw(st.booleans()):
        del record["content"]
    return json.dumps(record).encode()


other_lines = st.one_of(
    st.just(b'{"_type":"meta","last_consolidated":0,"updated_at":"2026-04-03T10:00:00+00:00"}'),
    st.just(b'{"_type":"session","format":1,"key":"cli:direct","created_at":"2026-04-03T10:00:00+00:00"}'),
    st.just(b'{"_type":"future","x":1}'),
    st.just(b"[1, 2]"),
    st.just(b"not json"),
    st.just(b"   "),
    st.just(b"[" * 5000),  # nesting deeper than the parser allows
    st.binary(max_size=12).filter(lambda b: b"\n" not in b),
)
files = st.lists(st.one_of(message_lines(), other_lines), max_size=25)


def _write(root: Path, lines: list[bytes]) -> None:
    path = root / REL
    path.parent.mkdir(parents=True, exist_ok=True)
    header = b'{"_type":"session","format":1,"key":"cli:direct","created_at":"2026-04-03T10:00:00+00:00"}'
    path.write_bytes(b"".join(line + b"\n" for line in [header, *lines]))


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=files)
def test_recall_numbers_messages_as_the_session_reader_does(tmp_path: Path, lines: list[bytes]) -> None:
    _write(tmp_path, lines)
    session = JsonlSessionStore(tmp_path).load(KEY)
    assert session is not None
    data = (tmp_path / REL).read_bytes().split(b"\n")
    state = SessionState(None)
    docs = list(session_docs(data, state))
    assert state.next_num == len(session.messages)  # every message counted, nothing else
    for doc in docs:
        assert session.messages[doc.num]["role"] == doc.role


def test_lines_the_reader_rejects_do_not_shift_or_break_search(tmp_path: Path) -> None:
    lines = [
        b'{"role":"user","content":"first question about zebras"}',
        b'{"role":"narrator","content":"meanwhile, elsewhere"}',
        b'{"role":"assistant","content":12345}',
        b'{"role":"assistant","content":"lions roar","tool_calls":7}',
        b'{"role":"assistant","content":"zebras have stripes","tool_calls":null}',
        b'{"role":"user","content":"and giraffes?"}',
    ]
    _write(tmp_path, lines)
    session = JsonlSessionStore(tmp_path).load(KEY)
    assert session is not None
    numbers = {m["content"]: i for i, m in enumerate(session.messages)}
    index = RecallIndex(tmp_path)
    try:
        for text in ("stripes", "giraffes"):
            (hit,) = [h for h in index.search(text) if h.kind == "session"]
            cited = parse_citation(hit.citation)
            assert cited is not None and cited.session_key == KEY
            expected = next(n for c, n in numbers.items() if text in c)
            assert cited.number == expected
        assert index.search("meanwhile") == []  # a quarantined line is not a message
        assert index.search("lions") == []  # nor is one whose tool calls no endpoint takes
    finally:
        index.close()


history_lines = st.one_of(
    st.fixed_dictionaries(
        {"cursor": st.one_of(st.integers(-2, 50), st.booleans(), st.text(max_size=2)),
         "timestamp": st.one_of(st.just("2026-04-03 10:00"), scalars),
         "content": st.one_of(st.text(max_size=10), scalars)},
        optional={"session_key": scalars, "source": st.one_of(scalars, st.fixed_dictionaries({"session": scalars, "from": scalars, "to": scalars}))},
    ).map(lambda d: json.dumps(d).encode()),
    other_lines,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=st.lists(history_lines, max_size=15))
def test_recall_reads_the_history_entries_the_store_reads(tmp_path: Path, lines: list[bytes]) -> None:
    from hippobot.memory.history import parse_chunk
    from hippobot.recall.sources import history_docs

    path = tmp_path / "memory" / "history.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    # parse_chunk is what the memory store's reader (hippobot memory history) parses with
    entries = [(e.cursor, e.content) for e in parse_chunk(path.read_bytes()).entries]
    docs = [(d.num, d.text) for d in history_docs(path.read_bytes().split(b"\n"))]
    assert docs == entries
