"""Whatever ends up after the valid lines of a session file, loading keeps working."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hippobot.session import JsonlSessionStore, Session

_serial = itertools.count()

junk_piece = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([
        b"\n",
        b'{"role":"user","content":"smuggled"}\n',
        b'{"_type":"meta","last_consolidated":99,"metadata":[1]}\n',
        b'{"_type":"session","format":7,"key":"other"}\n',
        b'{"role":5}', b"[1,2", b"\xff\xfe", b"null", b'"text"', b"{" * 3000,
    ]),
)  # fmt: skip
junk = st.lists(junk_piece, max_size=8).map(b"".join)


def valid_session(workspace: Path, key: str) -> tuple[JsonlSessionStore, Session]:
    store = JsonlSessionStore(workspace)
    session = Session(key=key)
    for n in range(3):
        store.append(session, [session.add({"role": "user", "content": f"m{n}"})])
    session.last_consolidated = 1
    store.save_meta(session)
    return store, session


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-workspace")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage=junk)
def test_loading_survives_any_appended_bytes(workspace: Path, garbage: bytes) -> None:
    key = f"fuzz:{next(_serial)}"  # a fresh session file per example, one shared workspace
    writer, original = valid_session(workspace, key)
    path = writer.path_for(key)
    with path.open("ab") as handle:
        handle.write(garbage)

    writer.refresh(original)  # a live process sees the junk arrive
    assert [m["content"] for m in original.messages[:3]] == ["m0", "m1", "m2"]

    store = JsonlSessionStore(workspace)
    loaded = store.load(key)
    assert loaded is not None
    assert loaded.messages[:3] == original.messages[:3]
    assert 0 <= loaded.last_consolidated <= len(loaded.messages)
    assert store.refresh(loaded) == 0

    before = path.read_bytes()
    store.append(loaded, [loaded.add({"role": "assistant", "content": "still writing"})])
    assert path.read_bytes().startswith(before)
    again = JsonlSessionStore(workspace).load(key)
    assert again is not None
    assert again.messages == loaded.messages
