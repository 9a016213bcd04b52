"""What Dream's edit phase may write: what the entries or the files already say."""

from __future__ import annotations

from hippobot.lifecycle.dream_grounding import keep_grounded

USER = "# User\n\n- Name:\n- What to call me:\n- How I like answers (short, detailed, with examples...):\n"
MEMORY = "# Memory\n\n### About the user\n- Lives in Tokyo\n- Works at Initech\n"
ENTRIES = ["- [permanent] Hi! I'm Maya.\n- [correction] User lives in Osaka now, not in Tokyo"]


def test_a_correction_a_merge_and_a_removal_stay() -> None:
    after = {"USER.md": USER, "memory/MEMORY.md": "# Memory\n\n### About the user\n- Lives in Osaka, works at Initech\n"}
    kept = keep_grounded({"USER.md": USER, "memory/MEMORY.md": MEMORY}, after, ENTRIES)
    assert kept.files == after and kept.reverted == []


def test_the_template_prose_does_not_ground_an_invented_preference() -> None:
    after = {"USER.md": USER.replace("- How I like answers (short, detailed, with examples...):",
                                     "- How I like answers: short and detailed, with examples"),
             "memory/MEMORY.md": MEMORY}
    kept = keep_grounded({"USER.md": USER, "memory/MEMORY.md": MEMORY}, after, ENTRIES)
    assert kept.files["USER.md"] == USER
    assert kept.reverted == ["USER.md: - How I like answers: short and detailed, with examples"]


def test_an_invented_line_added_among_grounded_ones_goes_alone() -> None:
    after = {"USER.md": USER + "\n## Learned\n- Name: Maya\n- Has two dogs named Rex and Bo\n- Moved to Osaka\n",
             "memory/MEMORY.md": MEMORY}
    kept = keep_grounded({"USER.md": USER, "memory/MEMORY.md": MEMORY}, after, ENTRIES)
    assert kept.files["USER.md"] == USER + "\n## Learned\n- Name: Maya\n- Moved to Osaka\n"
    assert kept.reverted == ["USER.md: - Has two dogs named Rex and Bo"]
