"""What search weighs besides a message's own words: the turns around it, the period a
question names, and who speaks in a transcript line (keyword search, no embedder)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from hippobot.recall import RecallIndex
from hippobot.recall.periods import named_periods

from .conftest import Workspace

NOW = datetime(2026, 4, 3, 10, 0).timestamp()


def test_an_answer_is_found_by_the_words_of_the_turns_before_it(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:direct", "user", "I finally signed up for the pottery workshop!")
    ws.add_message("cli:direct", "assistant", "Great! Where?")
    ws.add_message("cli:direct", "user", "The workshop is downtown, by the old library.")
    # Elsewhere, a message as long with the same one word of the search, and no more.
    ws.add_message("cli:work", "user", "The workshop at headquarters was tedious and long.")
    ws.add_message("cli:work", "assistant", "At least it is over for this year.")

    cited = [h.citation for h in index.search("Where is the pottery workshop?", now=NOW)]

    # The answer holds "workshop" and two turns before it "pottery": it ranks first of
    # the two messages with "workshop" alone.
    assert cited[0] == "session cli:direct#0"
    assert cited.index("session cli:direct#2") < cited.index("session cli:work#0"), cited


def test_a_question_naming_a_day_finds_what_was_said_that_day(ws: Workspace, index: RecallIndex) -> None:
    ws.add_message("cli:march", "user", "We planted tomatoes in the garden.", timestamp="2026-03-02T18:00:00")
    ws.add_message("cli:later", "user", "We planted basil in the garden.", timestamp="2026-03-20T18:00:00")
    ws.add_message("cli:later", "user", "The garden needs water again.", timestamp="2026-03-28T18:00:00")

    for question in ("What did we plant in the garden on March 2, 2026?",
                     "what did we plant in the garden on 2 March 2026"):  # fmt: skip
        hits = index.search(question, now=NOW)
        assert hits[0].citation == "session cli:march#0", [h.snippet for h in hits]
    # Without a date the newer of two equal matches leads, as before.
    assert index.search("what did we plant in the garden", now=NOW)[0].citation == "session cli:later#0"


def test_a_question_naming_a_speaker_finds_that_persons_line(ws: Workspace, index: RecallIndex) -> None:
    # An imported transcript: each line says who spoke. Ben's line is shorter, so by its
    # words alone ("adopted", and the name Ana's line begins with) it would come first.
    ws.add_message("import:chat", "user", "Ana: Ben, guess what, I adopted a cat named Miso from the shelter!")
    ws.add_message("import:chat", "assistant", "Ben: I adopted a dog!")

    hits = index.search("What pet did Ana adopt?", now=NOW, explain=True)

    assert hits[0].citation == "session import:chat#0"
    assert hits[0].explain is not None and hits[0].explain["speaker"] == 1
    assert hits[1].explain is not None and hits[1].explain["speaker"] == 0


def test_an_index_of_the_previous_layout_is_rebuilt_on_open(ws: Workspace) -> None:
    ws.add_message("import:chat", "user", "Ana: the spare key is under the blue pot")
    with RecallIndex(ws.root) as index:
        index.sync()
        path = index.path
    # What the previous release left: no speaker column, schema 2.
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE docs DROP COLUMN speaker")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")

    with RecallIndex(ws.root) as index:
        hits = index.search("where is the key, Ana?", now=NOW, explain=True)

    assert [h.citation for h in hits] == ["session import:chat#0"]
    assert hits[0].explain is not None and hits[0].explain["speaker"] == 1


def _days(text: str) -> list[tuple[str, str]]:
    def day(ts: float) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d")

    return [(day(a), day(b)) for a, b in named_periods(text, NOW)]


def test_the_periods_a_question_names() -> None:
    assert _days("What did Ana show Ben on October 13, 2023?") == [("2023-10-13", "2023-10-14")]
    assert _days("the film we saw on 1st May, 2022") == [("2022-05-01", "2022-05-02")]
    assert _days("notes from 2025-12-24") == [("2025-12-24", "2025-12-25")]
    assert _days("Where did we travel in July 2022?") == [("2022-07-01", "2022-08-01")]
    assert _days("anything from 2024") == [("2024-01-01", "2025-01-01")]  # a year alone
    assert _days("what did I say yesterday") == [("2026-04-02", "2026-04-03")]
    assert _days("what did I say last week about the garden") == [("2026-03-23", "2026-03-30")]
    assert _days("3 days ago") == [("2026-03-31", "2026-04-01")]
    assert ("2025-06-01", "2025-07-01") in _days("when did we go camping in June?")
    # "may" and "march" are words too; a number is not a year
    assert _days("May I ask what we decided? We march on. Call 2023-99-99 or 12345") == []
