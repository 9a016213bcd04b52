"""A recalled "last Saturday" comes with the Saturday it meant: relative times in a recalled
message are made absolute from the message's own date, so a small model asked "when?" can
answer with a date instead of repeating "last Saturday"."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from hippobot.agent.agent import Agent
from hippobot.messages import RUNTIME_CONTEXT_HEADER
from hippobot.recall.relative_dates import annotate_relative_dates, relative_dates
from hippobot.testing import ScriptedModel

THURSDAY = datetime(2023, 5, 25, 13, 56)


@pytest.mark.parametrize(("said", "meant"), [
    ("I ran a charity race last Saturday", "Saturday 20 May 2023"),
    ("last Thursday", "Thursday 18 May 2023"),  # a week back, not today
    ("see you next Monday", "Monday 29 May 2023"),
    ("yesterday", "24 May 2023"),
    ("last night", "24 May 2023"),
    ("tomorrow", "26 May 2023"),
    ("this morning", "25 May 2023"),
    ("3 days ago", "22 May 2023"),
    ("two weeks ago", "around 11 May 2023"),
    ("a few days ago", "a few days before 25 May 2023"),
    ("last weekend", "the weekend of 20-21 May 2023"),
    ("next weekend", "the weekend of 27-28 May 2023"),
    ("last week", "the week of 15 May 2023"),
    ("last month", "April 2023"),
    ("next year", "2024"),
])  # fmt: skip
def test_each_relative_time_names_its_date_from_the_day_it_was_said(said: str, meant: str) -> None:
    assert [m for _, m in relative_dates(said, THURSDAY)] == [meant]


def test_the_phrase_stays_and_the_date_follows_it() -> None:
    text = "We went camping last weekend and yesterday I rested."
    assert annotate_relative_dates(text, THURSDAY) == (
        "We went camping last weekend (= the weekend of 20-21 May 2023) "
        "and yesterday (= 24 May 2023) I rested."
    )


def test_a_phrase_the_speaker_dated_already_and_plain_words_are_left_alone() -> None:
    assert relative_dates("yesterday, 24 May, we met", THURSDAY) == []
    assert relative_dates("The past is past; a week of rest; next to me", THURSDAY) == []


async def test_a_recalled_message_carries_the_date_its_relative_time_meant(
    make_agent: Callable[..., Agent], scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent()
    said = THURSDAY.astimezone().isoformat(timespec="milliseconds")
    monkeypatch.setattr("hippobot.session.model.now_iso", lambda: said)
    scripted_model.reply("Well done!")
    await agent.turn("cli:earlier", "I ran a charity race for mental health last Saturday.")
    monkeypatch.undo()

    scripted_model.reply("On Saturday 20 May 2023.")
    await agent.turn("cli:fresh", "When did I run the charity race?")
    block = scripted_model.requests[-1].last_user_text().split(RUNTIME_CONTEXT_HEADER, 1)[1]
    line = next(ln for ln in block.splitlines() if "charity race" in ln)
    assert "Thu 25 May 2023 13:56" in line
    assert "last Saturday (= Saturday 20 May 2023)" in line
