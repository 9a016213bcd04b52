"""Text that is not valid Unicode: refused in one line, and never able to wedge a session.

A command-line argument with bytes that are not UTF-8 reaches Python as a lone surrogate
(``surrogateescape``), as does JSON's ``"\\ud800"``. Stored, it used to fail every later
request of the session (a 502 blamed on the endpoint) and crash ``sessions list/show``.
"""

from __future__ import annotations

from hippobot.testing.cli import run_cli as run

OLD_SESSION = (
    '{"_type":"session","format":1,"key":"cli:old","created_at":"2026-01-01T00:00:00+00:00"}\n'
    '{"role":"user","content":"emoji half \\ud83d here","timestamp":"2026-01-01T10:00:00+00:00"}\n'
    '{"role":"assistant","content":"noted \\udc00","timestamp":"2026-01-01T10:00:01+00:00"}\n'
)


def test_a_message_with_bytes_that_are_not_utf8_is_refused_in_one_line(
    hippobot_home, scripted_server, scripted_model
):
    assert run(["onboard"], hippobot_home).returncode == 0
    bad = "x \udcff y"  # what Python makes of the argument bytes b"x \xff y"
    done = run(["agent", "-m", bad], hippobot_home, scripted_server)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: the message cannot be sent: it holds a lone surrogate (U+DCFF")
    assert len(done.stderr.strip().splitlines()) == 1
    assert scripted_model.requests == []
    assert not (hippobot_home / "workspace" / "sessions" / "cli" / "direct.jsonl").exists()


def test_a_session_file_that_already_holds_one_lists_shows_and_chats(
    hippobot_home, scripted_server, scripted_model
):
    assert run(["onboard"], hippobot_home).returncode == 0
    path = hippobot_home / "workspace" / "sessions" / "cli" / "old.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(OLD_SESSION)
    for args in (["sessions", "list"], ["sessions", "show", "cli:old"]):
        done = run(args, hippobot_home, scripted_server)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "emoji half \ufffd here" in done.stdout, done.stdout
    scripted_model.reply("still fine")
    chat = run(["agent", "-s", "cli:old", "-m", "go on"], hippobot_home, scripted_server)
    assert chat.returncode == 0 and chat.stdout == "still fine\n", chat.stderr
    sent = scripted_model.requests[-1].messages
    assert [m["content"] for m in sent[1:3]] == ["emoji half \ufffd here", "noted \ufffd"]
