"""Dream with a model that cannot copy text exactly: the findings still reach the files.

The model decides what (its finding lines); the code decides how (where, replace, remove),
so an ``edit_file`` whose ``old_text`` is not in the file, a heading that does not exist or a
loosely written tag does not decide whether a fact survives. Driven over HTTP by the
scripted model, as a small local model behaves (edits that miss, prose, forgotten lines).
"""

from __future__ import annotations

from hippobot.config.schema import DreamConfig
from hippobot.memory.history import HistorySource


def plant(agent, *contents: str, key: str = "cli:direct") -> None:
    for i, content in enumerate(contents):
        agent.memory.append_history(content, session_key=key, source=HistorySource(key, 2 * i, 2 * i + 2))


def read(agent, name: str = "USER.md") -> str:
    return (agent.workspace / name).read_text()


def last_commit(agent):
    return agent.git.log(limit=1)[0]


async def test_an_edit_whose_old_text_does_not_match_still_lands_the_fact_committed(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [permanent] User is allergic to peanuts")
    scripted_model.reply("[USER] Allergic to peanuts")
    # What Qwen2.5-Coder-1.5B did: an old_text the file does not contain.
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "## Health\n", "new_text": "## Health\n- Allergic to peanuts\n"})
    scripted_model.reply("I added the allergy.")
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    assert "- Allergic to peanuts" in read(agent)
    assert [o.status for o in result.outcomes] == ["written"]
    assert agent.memory.pending_count() == 0
    commit = last_commit(agent)
    assert commit.subject.startswith("dream: ") and "USER.md" in commit.files
    assert (result.edits.calls, result.edits.applied) == (1, 0)  # the model's edit did not apply
    assert any("added 'Allergic to peanuts'" in line for line in result.placed)


async def test_a_finding_under_a_missing_heading_creates_it(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [durable] Project Apollo deploys on Fridays")
    scripted_model.reply("[MEMORY:Release process] Project Apollo deploys on Fridays")
    scripted_model.reply("Done.")  # the edit phase: prose, no edit
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    memory = read(agent, "memory/MEMORY.md")
    # created at the level of the file's other sections (### in the template), the fact under it
    assert "\n### Release process\n- Project Apollo deploys on Fridays\n" in memory
    assert agent.memory.pending_count() == 0
    # the next run puts a fact for the same section under the same heading, not a second one
    plant(agent, "- [durable] Project Apollo freezes releases in December")
    scripted_model.reply("[MEMORY: release Process] Project Apollo freezes releases in December")
    scripted_model.reply("Done.")
    await agent.dream.run()
    memory = read(agent, "memory/MEMORY.md")
    assert memory.count("Release process") == 1
    assert "- Project Apollo deploys on Fridays\n- Project Apollo freezes releases in December\n" in memory


async def test_a_fact_already_present_is_not_duplicated(make_agent, scripted_model):
    agent = make_agent()
    user = agent.workspace / "USER.md"
    user.write_text(user.read_text() + "\n## Pets\n- Cat: Luna (grey tabby)\n")
    agent.git.commit("manual: pets")
    plant(agent, "- [permanent] User has a cat named Luna")
    scripted_model.reply("[USER] User has a cat named Luna")  # the model repeats a known fact
    scripted_model.reply("Nothing to change.")
    result = await agent.dream.run()
    assert read(agent).count("Luna") == 1
    [outcome] = result.outcomes
    assert outcome.status == "known" and outcome.where.startswith("USER.md:")
    assert agent.memory.pending_count() == 0
    assert last_commit(agent).subject == "manual: pets"  # nothing to commit


async def test_a_batch_with_an_unplaceable_durable_fact_stays_pending(make_agent, scripted_model):
    agent = make_agent()
    user = agent.workspace / "USER.md"
    user.write_text(user.read_text() + "\n## Home\n- Lives in Tokyo with my partner Sam\n")
    agent.git.commit("manual: home")
    before = read(agent)
    plant(agent, "- [correction] User moved to Osaka, not Tokyo\n- [permanent] User is allergic to peanuts")
    # The correction's old value shares its line with another fact (Sam): replacing that line
    # would lose Sam, so the code leaves it, and the batch cannot be accounted for.
    scripted_model.reply("[USER] Lives in Osaka, not Tokyo\n[USER] Allergic to peanuts")
    scripted_model.reply("Done.")  # edit phase
    scripted_model.reply("[USER] Lives in Osaka, not Tokyo")  # asked about the missing fact
    result = await agent.dream.run()
    assert read(agent) == before, "nothing of a held batch is written"
    assert "Sam" in read(agent)
    assert agent.memory.pending_count() == 1 and agent.memory.dream_cursor() == 0
    [held] = result.held
    assert "still says the old value" in held.reason and "User moved to Osaka, not Tokyo" in held.facts
    assert "stay pending" in result.describe()


async def test_a_correction_replaces_the_old_line_though_the_edit_missed(make_agent, scripted_model):
    agent = make_agent()
    user = agent.workspace / "USER.md"
    user.write_text(user.read_text() + "\n## Home\n- Lives in Tokyo\n- Likes tea\n")
    agent.git.commit("manual: home")
    plant(agent, "- [correction] User moved to Osaka, not Tokyo")
    scripted_model.reply("[USER] Lives in Osaka")  # no old value named: the history has it
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "Lives in Tokio", "new_text": "Lives in Osaka"})
    scripted_model.reply("Done.")
    result = await agent.dream.run()
    text = read(agent)
    assert "## Home\n- Lives in Osaka\n- Likes tea\n" in text and "Tokyo" not in text
    assert [o.status for o in result.outcomes] == ["written"]


async def test_a_fact_the_analysis_left_out_is_kept_as_the_history_states_it(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [permanent] User said: my locker code at work is 4417")
    scripted_model.reply("[SKIP] nothing new")  # a small model forgets the line
    scripted_model.reply("Nothing to add.")  # asked once more about it: still no finding
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    assert "- User's locker code at work is 4417" in read(agent)
    [outcome] = result.outcomes
    assert outcome.status == "written"
    assert agent.memory.pending_count() == 0


async def test_findings_with_loose_tags_and_no_edit_phase_take_one_request(make_agent, scripted_model):
    agent = make_agent(dream=DreamConfig(edit_phase=False))
    plant(agent, "- [permanent] User has a cat named Luna\n- [durable] Project Apollo uses PostgreSQL 16")
    scripted_model.reply("Here are my findings:\n- [User] Has a cat named Luna\n* [MEMORY.md] Project Apollo uses PostgreSQL 16")
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    assert "- Has a cat named Luna" in read(agent)
    assert "### Projects and context\n- Project Apollo uses PostgreSQL 16\n" in read(agent, "memory/MEMORY.md")
    assert len(scripted_model.requests) == 1


async def test_asked_again_a_model_that_echoes_the_prompt_removes_nothing(make_agent, scripted_model):
    agent = make_agent(dream=DreamConfig(edit_phase=False))
    soul = read(agent, "SOUL.md")
    plant(agent, "- [permanent] I work at Initech as a nurse.")
    scripted_model.reply("[SKIP] Luna is a cat named Luna, not Luna.")  # seen from Qwen2.5-Coder-1.5B
    # ... and asked about the missing fact, it echoed the prompt and removed a line of SOUL.md
    scripted_model.reply('[USER] the fact, for USER.md\n[FILE-REMOVE] SOUL.md: "Honest about uncertainty: says so plainly rather than guessing." — reason')
    result = await agent.dream.run()
    assert read(agent, "SOUL.md") == soul
    assert "- User works at Initech as a nurse\n" in read(agent) and "the fact, for USER.md" not in read(agent)
    assert [o.status for o in result.outcomes] == ["written"] and not result.held


async def test_an_archived_line_about_what_went_unsaid_does_not_hold_the_batch(make_agent, scripted_model):
    # Entries archived before such lines were filtered: Dream need not place them anywhere.
    agent = make_agent()
    plant(agent, "- [durable] User's cat is called Miso\n- [correction] The user's name was not mentioned")
    scripted_model.reply("[USER] Has a cat called Miso")
    scripted_model.reply("Done.")
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    assert "Miso" in read(agent)
    assert [o.fact.text for o in result.outcomes] == ["User's cat is called Miso"]
    assert agent.memory.pending_count() == 0


async def test_an_edit_that_fills_a_template_field_with_an_invented_fact_is_undone(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [permanent] User's name is Maya\n- [permanent] User works at Initech as a nurse")
    scripted_model.reply("[USER] Name: Maya\n[USER] Works at Initech as a nurse")
    # What Qwen2.5-Coder-1.5B did with USER.md's empty fields: a name and tools nobody said,
    # beside a field it filled from the conversation.
    scripted_model.reply_tool_call("edit_file", {
        "path": "USER.md",
        "old_text": "- Name:\n- What to call me:",
        "new_text": "- Name: Maya\n- My name is Hippobot.",
    })
    scripted_model.reply_tool_call("edit_file", {
        "path": "USER.md",
        "old_text": "- Tools and stack I use:",
        "new_text": "- I use Python, Git, and Jupyter Notebook for my work and projects.",
    })
    scripted_model.reply("Done.")
    result = await agent.dream.run()
    assert result.status == "done" and not result.held, result.describe()
    text = read(agent)
    assert "Hippobot" not in text and "Jupyter" not in text
    assert "- What to call me:\n" in text and "- Tools and stack I use:\n" in text  # the fields again
    assert "- Name: Maya\n" in text  # the grounded edit of the same call stays
    assert "Initech" in text  # the finding itself is placed
    assert result.edits.applied == 2
    assert result.ungrounded == [
        "USER.md: - My name is Hippobot.",
        "USER.md: - I use Python, Git, and Jupyter Notebook for my work and projects.",
    ]
    assert "Undid 2 edited line(s) the conversations did not say." in result.describe()
