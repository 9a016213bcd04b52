"""What a streaming client ends up reading, for every way a turn's text can unfold.

Streamed text cannot be taken back, so :class:`ReplyText` decides what to send; the client's
accumulated text must end up being the reply (plus any earlier model call's text).
"""

from __future__ import annotations

from hippobot.server.app import ReplyText


def play(script: list[tuple[str, str]], reply: str) -> str:
    text, shown = ReplyText(), []
    for kind, value in script:
        if kind == "delta":
            shown.append(text.delta(value))
        elif kind == "restart":
            text.restart()
        elif kind == "tool":
            text.tool_step()
    shown.append(text.finish(reply))
    return "".join(shown)


def test_a_plain_stream_is_passed_through():
    assert play([("delta", "Hel"), ("delta", "lo.")], "Hello.") == "Hello."


def test_a_reply_that_was_never_streamed_is_sent_whole():
    assert play([], "Commands answer without streaming.") == "Commands answer without streaming."


def test_a_retry_that_repeats_the_sent_start_only_adds_the_rest():
    script = [("delta", "The quick"), ("restart", ""), ("delta", "The qu"), ("delta", "ick brown fox")]
    assert play(script, "The quick brown fox") == "The quick brown fox"


def test_a_retry_that_says_something_else_starts_over_after_a_blank_line():
    script = [("delta", "Maybe"), ("restart", ""), ("delta", "Certainly.")]
    assert play(script, "Certainly.") == "Maybe\n\nCertainly."


def test_a_retry_shorter_than_what_was_sent_still_ends_with_the_reply():
    script = [("delta", "Yes, indeed"), ("restart", ""), ("delta", "Yes")]
    assert play(script, "Yes") == "Yes, indeed\n\nYes"


def test_text_before_and_after_tool_steps_is_separated():
    script = [("delta", "Let me check."), ("tool", ""), ("delta", "It is 42.")]
    assert play(script, "It is 42.") == "Let me check.\n\nIt is 42."


def test_a_final_note_after_tool_steps_is_sent_even_when_the_model_streamed_nothing():
    script = [("delta", "Working."), ("tool", ""), ("tool", "")]
    assert play(script, "I stopped after 2 tool steps.") == "Working.\n\nI stopped after 2 tool steps."


def test_a_restart_of_a_call_that_sent_nothing_changes_nothing():
    script = [("delta", "First."), ("tool", ""), ("restart", ""), ("delta", "Second.")]
    assert play(script, "Second.") == "First.\n\nSecond."
