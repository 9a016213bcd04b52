"""How the code applies Dream's findings to the file texts (pure, no model): the model's
spelling of a tag, a heading or an old line does not decide whether a fact lands."""

from __future__ import annotations

from hippobot.lifecycle.dream_apply import LEARNED_HEADING, apply_findings, as_memory_line
from hippobot.lifecycle.dream_findings import parse_finding, parse_findings

MEMORY = "# Memory\n\n### Preferences\n- Likes tea\n\n### Projects and context\n- Apollo is a web shop\n"
USER = "# User\n\n- Lives in Tokyo\n- Likes tea\n"


def apply(files: dict[str, str], *lines: str) -> dict[str, str]:
    findings = [parse_finding(line) for line in lines]
    assert all(findings), lines
    return apply_findings(files, [f for f in findings if f]).files


def test_loosely_written_findings_are_read() -> None:
    text = (
        "Here is what I found:\n- [User] Has a cat named Luna\n* [MEMORY.md] Uses PostgreSQL 16\n"
        "1. [memory: Projects] Apollo ships on Fridays\n[permanent] User is vegetarian\n"
        "[USER] None\n[USER] atomic fact for USER.md (not already there)\n[SKIP] the weather\n[FILE-REMOVE] USER.md > Home: \"Lives in Tokyo\" — moved\n"
    )
    findings, valid = parse_findings(text)
    assert valid
    assert findings == [
        "[USER] Has a cat named Luna", "[MEMORY] Uses PostgreSQL 16", "[MEMORY:Projects] Apollo ships on Fridays",
        "[USER] User is vegetarian", '[FILE-REMOVE] USER.md > Home: "Lives in Tokyo" — moved',
    ]
    removal = parse_finding(findings[-1])
    assert removal is not None and (removal.action, removal.file, removal.heading, removal.text) == (
        "remove", "USER.md", "Home", "Lives in Tokyo")
    assert parse_findings("Sure, happy to help!") == ([], False)


def test_a_fact_goes_to_the_section_it_fits_or_to_the_learned_one() -> None:
    out = apply({"memory/MEMORY.md": MEMORY}, "[MEMORY] Project Apollo uses PostgreSQL 16", "[MEMORY] Owns a bike")
    assert "### Projects and context\n- Apollo is a web shop\n- Project Apollo uses PostgreSQL 16\n" in out["memory/MEMORY.md"]
    assert out["memory/MEMORY.md"].endswith(f"\n\n{LEARNED_HEADING}\n- Owns a bike\n")


def test_a_named_heading_is_matched_forgivingly_or_created_at_the_files_level() -> None:
    out = apply({"memory/MEMORY.md": MEMORY}, "[MEMORY:preference] Drinks oat milk", "[MEMORY:Health] Allergic to peanuts")
    text = out["memory/MEMORY.md"]
    assert "### Preferences\n- Likes tea\n- Drinks oat milk\n\n### Projects" in text
    assert text.endswith("\n\n### Health\n- Allergic to peanuts\n")


def test_a_correction_replaces_the_old_line_in_place_and_its_removal_finds_nothing_more() -> None:
    out = apply({"USER.md": USER}, '[FILE-REMOVE] USER.md: "Lives in Tokyo" — moved', "[USER] Lives in Osaka, not Tokyo")
    assert out["USER.md"] == "# User\n\n- Lives in Osaka\n- Likes tea\n"


def test_a_line_that_says_more_than_the_old_value_is_never_replaced_or_removed() -> None:
    files = {"USER.md": "# User\n\n- Lives in Tokyo with my partner Sam\n"}
    out = apply(files, "[USER] Lives in Osaka, not Tokyo", '[FILE-REMOVE] "Lives in Tokyo"')
    assert "- Lives in Tokyo with my partner Sam" in out["USER.md"]


def test_a_correction_replaces_an_old_value_written_with_its_country() -> None:
    # The local model archived "I live in Tokyo" as "I live in Tokyo, Japan"; "Japan" only
    # qualifies the old value, so the move to Osaka replaces the line instead of holding the
    # batch on it ("USER.md:16 still says the old value"). A name after other words stays.
    files = {"USER.md": "# User\n\n- I live in Tokyo, Japan\n- Lives in Tokyo with my partner Sam\n"}
    out = apply(files, "[USER] User lives in Osaka now, not in Tokyo")["USER.md"]
    assert out == "# User\n\n- User lives in Osaka now\n- Lives in Tokyo with my partner Sam\n"
    # and a removal of the old value takes the line with its country, not the one with Sam
    out = apply(files, '[FILE-REMOVE] USER.md: "Lives in Tokyo"')["USER.md"]
    assert out == "# User\n\n- Lives in Tokyo with my partner Sam\n"


def test_recalled_lines_copied_into_a_file_are_replaced_by_the_correction() -> None:
    # A small model pasted recalled memory into MEMORY.md in chat; the correction must still
    # take the old value's place, or the batch holds itself on the stale line for ever.
    files = {"memory/MEMORY.md": (
        "- [session cli:session-3#8, Tue 1 December 2026 10:16] user: By the way, I live in Tokyo.\n"
        "- [session cli:session-3#9, Tue 1 December 2026 10:16] assistant: Yes, you live in Tokyo.\n"
        "- [history#4, Tue 1 December 2026 10:20] Has a cat named Luna\n"
    )}
    out = apply(files, "[MEMORY] User lives in Osaka now, not in Tokyo")["memory/MEMORY.md"]
    assert "Tokyo" not in out
    assert out.splitlines() == ["- User lives in Osaka now", "- [history#4, Tue 1 December 2026 10:20] Has a cat named Luna"]


def test_a_copied_recalled_line_that_says_more_is_still_kept() -> None:
    files = {"memory/MEMORY.md": "- [session cli:s#8, Tue 1 December 2026 10:16] user: I live in Tokyo with Sam.\n"}
    out = apply(files, "[MEMORY] User lives in Osaka now, not in Tokyo")["memory/MEMORY.md"]
    assert "Tokyo with Sam" in out


def test_a_removal_takes_one_clear_line_only() -> None:
    files = {"USER.md": "# User\n\n## Old\n- Uses Vim 8\n\n## Now\n- Uses Vim 9\n- Uses Emacs 29\n"}
    assert apply(files, '[FILE-REMOVE] USER.md > Old: "Uses Vim 8"')["USER.md"] == (
        "# User\n\n## Old\n\n## Now\n- Uses Vim 9\n- Uses Emacs 29\n")
    assert apply(files, '[USER-REMOVE] "Vim"')["USER.md"] == files["USER.md"]  # two candidates: none


def test_nothing_is_added_twice_whatever_the_wording() -> None:
    files = {"USER.md": "# User\n\n## Pets\n- Cat: Luna (grey tabby)\n"}
    out = apply(files, "[USER] User has a cat named Luna", "[MEMORY] has a cat called Luna")
    assert out == files


def test_a_history_fact_reads_as_a_memory_line_about_the_user() -> None:
    assert as_memory_line("User said: my locker code at work is 4417.") == "User's locker code at work is 4417"
    assert as_memory_line("Remember that I'm vegetarian") == "User is vegetarian"
    assert as_memory_line("I moved. I live in Osaka now, not in Tokyo") == "User moved. User lives in Osaka now, not in Tokyo"
    assert as_memory_line("User's cat is called Luna, she is a grey tabby") == "User's cat is called Luna, she is a grey tabby"
    assert as_memory_line("User's favourite song is 'I Will Survive'") == "User's favourite song is 'I Will Survive'"


def test_the_users_own_words_are_not_placed_beside_the_same_fact() -> None:
    # A remembered message came back verbatim ("Hi! I'm Maya. Please remember that I work
    # at Initech as a nurse") next to the summary's line for it, in another voice.
    files = {"memory/MEMORY.md": "# Memory\n\n## About the user\n- User works at Initech as a nurse\n",
             "USER.md": "# User Profile\n\n- Name: Maya\n"}
    fact = as_memory_line("Hi! I'm Maya. Please remember that I work at Initech as a nurse")
    assert fact == "User's name is Maya. User works at Initech as a nurse"
    assert apply(files, f"[USER] {fact}") == files  # each sentence is stated by a line
    assert apply(files, "[USER] Hi! I'm Maya. Please remember that I work at Initech as a nurse") == files
    moved = apply(files, "[MEMORY] " + as_memory_line("I live in Osaka now"))
    assert moved["memory/MEMORY.md"].endswith("- User works at Initech as a nurse\n- User lives in Osaka now\n")
    assert apply(moved, "[MEMORY] I live in Osaka now") == moved  # "lives" states "live"


def test_an_empty_template_field_is_filled_in() -> None:
    files = {"USER.md": "# User Profile\n\n- Name:\n- Location / timezone:\n- Languages:\n"}
    out = apply(files, "[USER] Name: Maya", "[USER] location/timezone: Osaka (JST)")
    assert out["USER.md"] == "# User Profile\n\n- Name: Maya\n- Location / timezone: Osaka (JST)\n- Languages:\n"


def test_a_sentence_of_a_longer_fact_fills_its_field_and_the_rest_gets_a_line() -> None:
    # "Name: Maya. User works at Initech as a nurse" had filled the name field.
    files = {"USER.md": "# User Profile\n\n- Name:\n- Languages:\n\n## Work\n- User works at Initech as a nurse\n"}
    out = apply(files, "[USER] User's name is Maya. User works at Initech as a nurse")
    assert out["USER.md"] == files["USER.md"].replace("- Name:", "- Name: Maya")
    out = apply(files, "[USER] User's name is Maya. User plays chess")
    assert "- Name: Maya\n" in out["USER.md"] and out["USER.md"].endswith("\n- User plays chess\n")
    titled = apply(files, "[USER] User's name is Dr. Jane Smith")["USER.md"]  # a title is no sentence end
    assert "- Name: Dr. Jane Smith\n" in titled and "Learned" not in titled


def test_a_fact_about_a_field_of_the_user_fills_that_field() -> None:
    # "User's name is Maya" went under "Learned in conversation" while "- Name:" stayed
    # empty; the field is where "What is my name?" is read from.
    files = {"USER.md": "# User Profile\n\n- Name:\n- Work / role:\n\n## Learned in conversation\n"}
    out = apply(files, "[USER] User's name is Maya", "[USER] User's locker code at work is 4417")
    assert out["USER.md"] == (
        "# User Profile\n\n- Name: Maya\n- Work / role:\n\n## Learned in conversation\n"
        "- User's locker code at work is 4417\n"
    )
    # a field already filled is not overwritten: the fact goes in as a line of its own
    again = apply({"USER.md": "# User\n\n- Name: Mia\n"}, "[USER] My name is Maya")["USER.md"]
    assert "- Name: Mia" in again and "Maya" in again


def test_a_self_introduction_fills_the_name_field_too() -> None:
    # The archive kept the user's own words "Hi! I'm Maya. Please remember that I work at
    # Initech as a nurse."; placed as a line, they left "- Name:" empty for "What is my name?".
    files = {"USER.md": "# User Profile\n\n- Name:\n\n## Learned in conversation\n"}
    out = apply(files, "[USER] Hi! I'm Maya. Please remember that I work at Initech as a nurse")["USER.md"]
    assert out == (
        "# User Profile\n\n- Name: Maya\n\n## Learned in conversation\n"
        "- Hi! I'm Maya. Please remember that I work at Initech as a nurse\n"
    )
    # "I'm" without a greeting says something else; and a filled field stays as it is
    assert "- Name:\n" in apply(files, "[USER] I'm Japanese")["USER.md"]
    assert "- Name: Mia\n" in apply({"USER.md": "- Name: Mia\n"}, "[USER] Call me Maya")["USER.md"]


def test_a_history_tag_copied_into_a_finding_is_not_written_into_the_file() -> None:
    # The local model wrote "[USER] [permanent] I live in Osaka now, not in Tokyo", and the
    # line placed read "- [permanent] I live in Osaka now".
    out = apply({"USER.md": USER}, "[USER] [permanent] I live in Osaka now, not in Tokyo")["USER.md"]
    assert out == "# User\n\n- I live in Osaka now\n- Likes tea\n"
