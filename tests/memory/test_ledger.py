"""The reverted-lines ledger: which re-added lines count as the one the user undid, and which
later history entries count as the user saying it again."""

from __future__ import annotations

from hippobot.memory.ledger import (
    RevertedLine,
    RevertLedger,
    content_lines,
    restates,
    same_line,
    serialize,
)


def test_a_rewording_of_an_undone_line_is_the_same_line():
    assert same_line("- Owns a boat called Marlin", "* owns a boat called **Marlin**")
    assert same_line("- Owns a boat called Marlin", "- Owns a boat named Marlin")
    assert not same_line("- Owns a boat called Marlin", "- Drinks green tea")
    assert not same_line("- Owns a boat called Marlin", "")


def test_a_later_entry_restates_a_line_when_it_carries_most_of_its_words():
    assert restates("- [permanent] User's boat is still called Marlin", "- Owns a boat called Marlin")
    assert not restates("- [permanent] User drinks green tea", "- Owns a boat called Marlin")
    assert restates("用户的船叫马林号", "- 船叫马林号")  # no spaces: the whole line is looked for


def test_headings_and_blank_lines_are_not_facts():
    assert content_lines("# User\n\n- Name: Ada\n### Pets\n- Cat: Luna\n") == ["- Name: Ada", "- Cat: Luna"]


def test_the_ledger_reads_back_what_was_appended_and_skips_garbage(tmp_path):
    line = RevertedLine("USER.md", "- Owns a boat called Marlin", "2026-04-03 10:12", 7, "abc")
    data = serialize(b'{"torn": ', [line])  # a torn last line from another writer
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "reverted.jsonl").write_bytes(data + b"not json\n")
    entries = RevertLedger(tmp_path).read()
    assert entries == [line]
    assert RevertLedger.matching(entries, "- owns a boat called Marlin") == line
    assert RevertLedger(tmp_path / "missing").read() == []
