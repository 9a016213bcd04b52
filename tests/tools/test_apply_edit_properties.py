"""Properties of the exact-match edit that every file edit relies on."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hippobot.errors import ToolError
from hippobot.tools import apply_edit

MARK_OLD = "§"  # appears exactly once in the edited text, inside old
MARK_NEW = "¤"  # appears nowhere except inside new

plain = st.text(alphabet=st.characters(blacklist_characters=MARK_OLD + MARK_NEW), max_size=40)
nonempty = st.text(
    alphabet=st.characters(blacklist_characters=MARK_OLD + MARK_NEW), min_size=1, max_size=20
)

fast = settings(max_examples=100, deadline=None)


@fast
@given(before=plain, after=plain, o1=plain, o2=plain, n1=plain, n2=plain)
def test_an_edit_with_unique_markers_round_trips(before, after, o1, o2, n1, n2):
    old = o1 + MARK_OLD + o2
    new = n1 + MARK_NEW + n2
    text = before + old + after
    edited = apply_edit(text, old, new)
    assert edited == before + new + after
    assert apply_edit(edited, new, old) == text


@fast
@given(a=plain, b=plain, c=plain, old=nonempty, new=plain)
def test_two_occurrences_are_always_ambiguous(a, b, c, old, new):
    assume(old != new)
    text = a + old + b + old + c
    with pytest.raises(ToolError, match="matches"):
        apply_edit(text, old, new)


@fast
@given(a=plain, b=plain, c=plain, old=nonempty, new=plain)
def test_replace_all_leaves_no_occurrence_it_did_not_create(a, b, c, old, new):
    assume(old != new)
    text = a + old + b + old + c
    assert apply_edit(text, old, new, replace_all=True) == text.replace(old, new)


@fast
@given(text=plain, old=nonempty, new=plain)
def test_missing_text_always_raises_and_never_guesses(text, old, new):
    assume(old not in text and old != new)
    with pytest.raises(ToolError, match="not found"):
        apply_edit(text, old, new)


@fast
@given(text=plain, new=plain)
def test_empty_old_text_is_always_refused(text, new):
    with pytest.raises(ToolError, match="empty"):
        apply_edit(text, "", new)


def test_overlapping_occurrences_count_as_ambiguous():
    with pytest.raises(ToolError, match="matches 2 places"):
        apply_edit("xaaax", "aa", "b")
