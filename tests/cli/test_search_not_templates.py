"""Nothing that is not memory competes with memory: untouched templates, bare headings and
empty template bullets are never search hits; what the user said, or wrote into a template
file, is."""

from __future__ import annotations

import json

from hippobot.config import load_settings
from hippobot.testing.cli import run_cli


def _hits(home, query: str) -> list[dict]:
    out = run_cli(["memory", "search", query, "--json"], home)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_which_animal_lives_with_me_finds_the_message_not_the_templates(
    hippobot_home, scripted_server, scripted_model
) -> None:
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    config = {"recall": {"embeddings": {"provider": "local"}}}  # the offline model
    (hippobot_home / "config.json").write_text(json.dumps(config))
    scripted_model.reply("Nice, Luna is a lovely name.")
    chat = run_cli(["agent", "-m", "by the way, my cat is named Luna"], hippobot_home, scripted_server)
    assert chat.returncode == 0, chat.stderr

    hits = _hits(hippobot_home, "which animal lives with me")

    assert hits, "the message should be found by meaning"
    assert "my cat is named Luna" in hits[0]["snippet"]
    assert all(h["kind"] != "memory" for h in hits)  # no template prose, heading or slot
    # The templates' own words do not find them either.
    assert all(h["kind"] != "memory" for h in _hits(hippobot_home, "Edit this file User Profile"))


def test_what_the_user_wrote_into_a_template_file_is_found(hippobot_home) -> None:
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    workspace = load_settings({"HIPPOBOT_HOME": str(hippobot_home)}).workspace
    user = workspace / "USER.md"
    user.write_text(user.read_text().replace("- Location / timezone:", "- Location / timezone: Lisbon"))

    assert _hits(hippobot_home, "Edit this file to change its personality") == []
    hits = _hits(hippobot_home, "timezone")

    assert [h["citation"] for h in hits] == ["USER.md:8"]  # the filled-in slot only
    assert "Lisbon" in hits[0]["snippet"]
