"""Memory recalled for a message rides on it as runtime context; an archive of that
conversation must not file it as something the user said again (a weak model's summary
restates what it was shown: an undone line would come back, tests/cli/test_undo_cli.py)."""

from __future__ import annotations

from hippobot.context.runtime import attach_runtime_context
from hippobot.lifecycle.stated_facts import without_recalled
from hippobot.lifecycle.summaries import ParsedSummary


def _user(text: str, recalled: str) -> dict:
    content, marker = attach_runtime_context(text, f"[Runtime Context]\nRecalled memory:\n{recalled}")
    return {"role": "user", "content": content, "_runtime_context": marker}


def test_a_summary_line_only_the_recalled_memory_states_is_dropped() -> None:
    chunk = [
        _user("I drink green tea now", "- [durable] Owns a boat called Marlin (history#1)"),
        {"role": "assistant", "content": "Noted, green tea."},
    ]
    parsed = ParsedSummary(("- [durable] Owns a boat called Marlin", "- [durable] User drinks green tea"))
    assert without_recalled(parsed, chunk).lines == ("- [durable] User drinks green tea",)


def test_a_line_the_conversation_states_again_stays() -> None:
    chunk = [_user("I sold my boat called Marlin", "- [durable] Owns a boat called Marlin (history#1)")]
    parsed = ParsedSummary(("- [correction] Sold the boat called Marlin",))
    assert without_recalled(parsed, chunk) == parsed
    assert without_recalled(ParsedSummary(("- [durable] x",)), [{"role": "user", "content": "x"}]).lines == (
        "- [durable] x",
    )
