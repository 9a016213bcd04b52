"""Session keys map to exactly one file and back."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippobot.errors import UserError
from hippobot.session import key_to_relpath, relpath_to_key, validate_key


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("cli:direct", "sessions/cli/direct.jsonl"),
        ("telegram:8281248569", "sessions/telegram/8281248569.jsonl"),
        ("a:b_c", "sessions/a/b_c.jsonl"),
        ("a_b:c", "sessions/a_b/c.jsonl"),
        ("slack:C1/thread:42", "sessions/slack/C1%2Fthread%3A42.jsonl"),
        ("heartbeat", "sessions/heartbeat/%.jsonl"),
        ("cli:", "sessions/cli/%%.jsonl"),
        (":x", "sessions/%%/x.jsonl"),
        ("../..:../etc", "sessions/%2E.%2F.%2E/%2E.%2Fetc.jsonl"),
        ("web:100%", "sessions/web/100%25.jsonl"),
        ("con:nul", "sessions/%63on/%6Eul.jsonl"),
        ("chat:  trailing. ", "sessions/chat/  trailing.%20.jsonl"),
        ("matrix:你好", "sessions/matrix/你好.jsonl"),
    ],
)
def test_documented_examples(key: str, path: str) -> None:
    assert key_to_relpath(key) == PurePosixPath(path)
    assert relpath_to_key(path) == key


def test_lossy_legacy_collision_is_gone() -> None:
    assert key_to_relpath("a:b_c") != key_to_relpath("a_b:c")
    assert key_to_relpath("heartbeat") != key_to_relpath("heartbeat:")


@pytest.mark.parametrize(
    "path",
    [
        "sessions/cli/%41.jsonl",  # "A" need not be escaped: not the canonical spelling
        "sessions/cli/dir/extra.jsonl",
        "sessions/cli_direct.jsonl",  # a nanobot legacy name
        "other/cli/direct.jsonl",
        "sessions/cli/direct.txt",
        "sessions/cli/bad%zz.jsonl",
        "sessions/cli/.hidden.jsonl",
        "sessions/cli/a:b.jsonl",
        "sessions/cli%+/x.jsonl",  # a continuation marker on a short part
    ],
)
def test_non_canonical_paths_have_no_key(path: str) -> None:
    assert relpath_to_key(path) is None


def test_very_long_parts_are_split_into_short_file_names() -> None:
    key = "chan:" + "长" * 500
    path = key_to_relpath(key)
    assert all(len(part.encode()) <= 255 for part in path.parts)
    assert len(path.parts) > 3
    assert relpath_to_key(path) == key


def test_validate_key_explains_what_is_wrong() -> None:
    assert validate_key("cli:direct") == "cli:direct"
    assert validate_key("x" * 512)
    with pytest.raises(UserError, match="empty"):
        validate_key("")
    with pytest.raises(UserError, match="513 characters") as err:
        validate_key("x" * 513)
    assert "\n" not in str(err.value)


# Full Unicode, including lone surrogates and control characters.
any_text = st.text(st.characters(codec=None, categories=None), max_size=80)
keys = st.one_of(any_text, st.builds(lambda a, b: f"{a}:{b}", any_text, any_text))


@settings(max_examples=250)
@given(keys)
def test_round_trip_and_safe_file_names(key: str) -> None:
    path = key_to_relpath(key)
    assert relpath_to_key(path) == key
    assert relpath_to_key(str(path)) == key
    assert path.parts[0] == "sessions" and path.name.endswith(".jsonl")
    for part in path.parts[1:]:
        assert not part.startswith(".")
        assert not part.endswith((".", " ")) or part.endswith(".jsonl")
        assert not any(ch in part for ch in '/\\:<>"|?*')
        assert all(ord(ch) >= 0x20 and not 0xD800 <= ord(ch) <= 0xDFFF for ch in part)
        assert len(part.encode("utf-8")) <= 220


@settings(max_examples=250)
@given(keys, keys)
def test_distinct_keys_never_share_a_file(a: str, b: str) -> None:
    if a != b:
        assert key_to_relpath(a) != key_to_relpath(b)


@given(st.lists(st.text(alphabet="%:+._/aA0 ", max_size=6), min_size=1, max_size=4))
def test_arbitrary_paths_decode_only_if_canonical(parts: list[str]) -> None:
    path = PurePosixPath("sessions", *[p or "x" for p in parts[:-1]], (parts[-1] or "y") + ".jsonl")
    key = relpath_to_key(path)
    if key is not None:
        assert key_to_relpath(key) == path


def test_a_folder_never_looks_like_a_session_file():
    # Found by fuzzing: the channel "0.jsonl" made a folder that globbing took for a session.
    for key in ("0.jsonl", "a.jsonl:b", "x.JSONL:y"):
        path = key_to_relpath(key)
        assert not any(part.endswith(".jsonl") for part in path.parts[:-1])
        assert relpath_to_key(path) == key
