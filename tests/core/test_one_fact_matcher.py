"""One way to match facts: a single tokeniser and stop-word list (``hippobot.factmatch``),
and corrections that say which fact they replace instead of leaving it to shared words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import hippobot
from hippobot.factmatch import covers, heading_matches, same_line, states
from hippobot.lifecycle.accounting import Fact, account
from hippobot.lifecycle.summaries import summary_from_tool_call
from hippobot.memory.facts import split_correction
from hippobot.testing.archivist import dreamer

SRC = Path(hippobot.__file__).parent
# recall/query.py splits a search query the way the search index splits text (its own CJK
# segments, the index's stop words, which the fitted ranking was tuned with): that is search,
# not deciding whether a text states a fact, and changing it would change every ranking.
SEARCH_NOT_MATCHING = {"recall/query.py"}


def test_no_module_but_the_matcher_keeps_its_own_stop_words_or_word_pattern() -> None:
    own = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "factmatch.py" or rel in SEARCH_NOT_MATCHING or rel.startswith("testing/"):
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"^_?(STOP|STOPWORDS|COMMON)\w* = frozenset", text, re.M):
            own.append(f"{rel}: a stop-word list")
        if re.search(r"re\.compile\(r\"\[\^\\W_\]\+|re\.compile\(r\"\\w\+\"|\[a-z0-9\]\{4,\}", text):
            own.append(f"{rel}: a word pattern")
    assert own == []


def test_the_matcher_reads_a_rewording_as_the_same_fact() -> None:
    assert states("- Cat: Luna (grey tabby)", "User has a cat named Luna")
    assert not states("- Has a dog named Rex", "User has a cat named Luna")
    assert same_line("- Owns a boat called Marlin", "* owns a boat called **Marlin**")
    assert covers("- [permanent] User's boat is still called Marlin", "- Owns a boat called Marlin")
    assert heading_matches("### Release process", "release Process")
    assert heading_matches("## Pets and animals", "Pets")
    assert not heading_matches("## Work", "Pets")


def test_a_permanent_fact_cannot_be_declined_because_a_later_line_shares_a_word() -> None:
    # Before: any later fact sharing a word of four letters ("nurse") let the model decline it.
    facts = [Fact(1, "permanent", "User works at Initech as a nurse"),
             Fact(2, "durable", "User's nurse friend Sam visits on Sundays")]
    rejections = [("User works at Initech as a nurse", "not lasting")]
    work, _sam = account(facts, {}, {"USER.md": "- Friend Sam, a nurse, visits on Sundays\n"}, rejections=rejections)
    assert work.status == "missing"


def test_a_correction_that_names_the_entry_it_replaces_supersedes_that_fact() -> None:
    facts = [Fact(1, "permanent", "User lives in Tokyo"), Fact(1, "permanent", "User has a cat named Luna"),
             Fact(3, "correction", "User lives in Osaka (replaces #1)")]
    tokyo, cat, osaka = account(facts, {}, {"USER.md": "- Lives in Osaka\n- Has a cat named Luna\n"})
    assert (tokyo.status, tokyo.reason) == ("rejected", "superseded by the correction in #3")
    assert cat.status == "written" and osaka.status == "written"
    # ... and the file may not keep the old value next to the new one
    [_, _, stale] = account(facts, {}, {"USER.md": "- Lives in Tokyo\n- Lives in Osaka\n- Has a cat named Luna\n"})
    assert stale.status == "stale"


def test_save_summary_records_which_fact_a_correction_replaces() -> None:
    parsed = summary_from_tool_call(json.dumps({"facts": [
        {"kind": "correction", "text": "User lives in Osaka", "replaces": "User lives in Tokyo"},
        {"kind": "durable", "text": "User plays chess", "replaces": ""},
    ]}))
    assert parsed.lines == ("- [correction] User lives in Osaka (replaces: User lives in Tokyo)",
                            "- [durable] User plays chess")
    assert split_correction("User lives in Osaka (replaces: User lives in Tokyo)") == ("User lives in Osaka", "Tokyo")
    assert split_correction("User moved to Osaka, not Tokyo") == ("User moved to Osaka", "Tokyo")  # older entries
    assert split_correction("Switched from PostgreSQL to SQLite") == ("Switched to SQLite", "PostgreSQL")
    # Seen from Qwen2.5-Coder-1.5B's consolidation: corrections that replace nothing
    assert split_correction('I mistakenly mentioned "basil" instead of "basil".')[1] is None
    assert split_correction('Old text "I live in Tokyo now, not in Osaka now." was not found')[1] is None
    assert split_correction("User does not eat meat", strict=True) == ("User does not eat meat", None)
    # ... and one whose "not" denies its verb: "The weather was" had become the new fact
    weather = "The weather was not awful today, it was sunny"
    assert split_correction(weather) == (weather, None)
    assert split_correction("The meeting is on Friday, not Monday") == ("The meeting is on Friday", "Monday")


async def test_a_correction_archived_through_save_summary_replaces_the_old_fact(make_agent, scripted_model):
    agent = make_agent()
    session_key = "cli:direct"
    scripted_model.reply("noted")
    await agent.turn(session_key, "I live in Tokyo")
    session = agent.sessions.get(session_key)
    scripted_model.reply_tool_call("save_summary", {"facts": [{"kind": "permanent", "text": "User lives in Tokyo"}]})
    await agent.consolidator.archive_until(session, len(session.messages))
    scripted_model.reply("noted")
    await agent.turn(session_key, "Actually I moved: Osaka now")
    scripted_model.reply_tool_call("save_summary", {"facts": [
        {"kind": "correction", "text": "User lives in Osaka", "replaces": "#1"}]})
    await agent.consolidator.archive_until(session, len(session.messages))
    assert agent.memory.read_history()[-1].content == "- [correction] User lives in Osaka (replaces #1)"
    scripted_model.fallback = dreamer
    result = await agent.dream.run()
    user = (agent.workspace / "USER.md").read_text()
    assert "Osaka" in user and "Tokyo" not in user, user
    statuses = {o.fact.text: o.status for o in result.outcomes}
    assert statuses == {"User lives in Tokyo": "rejected", "User lives in Osaka (replaces #1)": "written"}
