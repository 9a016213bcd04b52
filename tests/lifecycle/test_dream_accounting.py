"""Dream accounts for every durable fact: written, already known, or rejected with a reason;
anything else stays pending, and nothing of an unaccounted batch is half-written."""

from __future__ import annotations

import json

from hippobot.lifecycle.accounting import Fact, account
from hippobot.lifecycle.autodream import dream_due
from hippobot.memory.history import HistorySource
from hippobot.providers.factory import make_provider
from hippobot.providers.retry import RetryPolicy
from hippobot.testing.archivist import dreamer

CAT = "- [permanent] User has a cat named Luna"


def plant(agent, *contents: str, key: str = "cli:direct") -> None:
    for i, content in enumerate(contents):
        agent.memory.append_history(content, session_key=key, source=HistorySource(key, 2 * i, 2 * i + 2))


def user_md(agent) -> str:
    return (agent.workspace / "USER.md").read_text()


def pending_file(agent) -> dict:
    return json.loads((agent.workspace / ".hippobot" / "dream" / "pending.json").read_text())


async def test_a_dream_that_answers_nothing_leaves_the_facts_pending_and_visible(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, CAT)
    before = user_md(agent)
    scripted_model.reply("")
    scripted_model.reply("")  # asked once more
    result = await agent.dream.run()
    assert len(scripted_model.requests) == 2
    assert agent.memory.pending_count() == 1 and agent.memory.dream_cursor() == 0
    assert user_md(agent) == before
    text = result.describe()
    assert "stay pending" in text and "empty or followed no known format" in text
    assert pending_file(agent)["held"][0]["facts"] == ["User has a cat named Luna"]
    # Dream does not start itself again at once on what it just could not account for
    assert dream_due(agent.memory, history_tokens=1) is None
    # the fact is still in front of the model
    scripted_model.reply("Luna")
    await agent.turn("cli:other", "what is my cat called?")
    assert "cat named Luna" in scripted_model.requests[-1].messages[0]["content"]


async def test_an_unparseable_analysis_is_retried_once(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, CAT)
    scripted_model.reply("Sure! Cats are lovely.")  # no finding format at all
    scripted_model.fallback = dreamer  # the retry is answered properly
    result = await agent.dream.run()
    assert result.status == "done" and not result.held
    assert "Luna" in user_md(agent)
    assert agent.memory.pending_count() == 0
    [outcome] = result.outcomes
    assert outcome.status == "written" and outcome.where.startswith("USER.md:")


async def test_edits_that_do_not_apply_still_land_every_finding_once(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, CAT + "\n- [permanent] User is allergic to peanuts")
    scripted_model.reply("[USER] Has a cat named Luna\n[USER] Allergic to peanuts")
    # one edit applies, the other does not: the code places what the model's edits missed
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "- Name:", "new_text": "- Name:\n- Has a cat named Luna"})
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "no such text", "new_text": "- Allergic to peanuts"})
    scripted_model.reply("Done.")
    result = await agent.dream.run()
    text = user_md(agent)
    assert text.count("Has a cat named Luna") == 1 and "- Allergic to peanuts" in text
    assert [o.status for o in result.outcomes] == ["written", "written"]
    assert agent.memory.pending_count() == 0 and not result.held
    assert agent.git.log(limit=1)[0].subject.startswith("dream: ")


async def test_a_timeout_leaves_entries_pending_with_one_clear_line(make_agent, scripted_model, scripted_server):
    agent = make_agent()
    agent.llm.use(make_provider(
        "openai", api_key="sk-test-key-000000000000", api_base=scripted_server.base_url, timeout=0.5,
        retry=RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0, jitter=0.0),
    ))
    plant(agent, CAT)
    scripted_model.hang(5)
    scripted_model.hang(5)
    before = user_md(agent)
    result = await agent.dream.run()
    assert result.status == "failed"
    assert user_md(agent) == before and agent.memory.pending_count() == 1
    headline = result.describe().splitlines()[0]
    assert "Dream failed" in headline and "stay pending" in headline
    assert "Dream failed" in pending_file(agent)["held"][0]["reason"]


async def test_every_fact_is_accounted_in_the_result_and_the_commit(make_agent, scripted_model):
    agent = make_agent()
    user = agent.workspace / "USER.md"
    user.write_text(user.read_text() + "\n- Speaks Welsh\n")
    agent.git.commit("manual: welsh")
    plant(agent, CAT + "\n- [durable] User speaks Welsh\n- [durable] User is tired of rain this week")
    scripted_model.reply('[USER] Has a cat named Luna\n[SKIP] "User is tired of rain this week" — transient mood')
    scripted_model.reply_tool_call("edit_file", {"path": "USER.md", "old_text": "- Name:", "new_text": "- Name:\n- Has a cat named Luna"})
    scripted_model.reply("Added the cat.")
    result = await agent.dream.run()
    status = {o.fact.text: (o.status, o.where, o.reason) for o in result.outcomes}
    assert status["User has a cat named Luna"][0] == "written"
    assert status["User speaks Welsh"][:1] == ("known",) and status["User speaks Welsh"][1].startswith("USER.md:")
    assert status["User is tired of rain this week"] == ("rejected", "", "transient mood")
    text = result.describe()
    assert "written to USER.md:" in text and "already known (USER.md:" in text and "rejected: transient mood" in text
    assert agent.memory.pending_count() == 0
    message = agent.git.log(limit=1)[0].message
    assert "Accounting:" in message and "rejected: transient mood" in message


async def test_a_correction_replaces_the_old_fact(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.fallback = dreamer
    plant(agent, "- [permanent] User lives in Tokyo")
    await agent.dream.run()
    assert "Tokyo" in user_md(agent)
    plant(agent, "- [correction] User moved to Osaka, not Tokyo")
    result = await agent.dream.run()
    assert "Osaka" in user_md(agent) and "Tokyo" not in user_md(agent)
    assert [o.status for o in result.outcomes] == ["written"]


async def test_a_correction_whose_edit_leaves_the_old_fact_is_completed_by_the_code(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.fallback = dreamer
    plant(agent, "- [permanent] User lives in Tokyo")
    await agent.dream.run()
    plant(agent, "- [correction] User moved to Osaka, not Tokyo")
    scripted_model.fallback = lambda r: dreamer(r, sloppy=True)  # adds Osaka, keeps Tokyo
    result = await agent.dream.run()
    assert "Osaka" in user_md(agent) and "Tokyo" not in user_md(agent)
    assert agent.memory.pending_count() == 0
    assert [o.status for o in result.outcomes] == ["written"]
    assert any("removed '- User lives in Tokyo'" in line for line in result.placed)


async def test_a_fact_superseded_in_the_same_batch_is_rejected_not_written(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.fallback = dreamer
    plant(agent, "- [permanent] User lives in Tokyo", "- [correction] User moved to Osaka, not Tokyo")
    result = await agent.dream.run()
    outcomes = {o.fact.text: o for o in result.outcomes}
    assert outcomes["User lives in Tokyo"].status == "rejected"
    assert "superseded" in outcomes["User lives in Tokyo"].reason
    assert outcomes["User moved to Osaka, not Tokyo"].status == "written"
    assert "Tokyo" not in user_md(agent)


async def test_lines_the_user_reverted_are_not_required_or_re_added(make_agent, scripted_model, monkeypatch):
    agent = make_agent()
    monkeypatch.setattr(agent.dream, "do_not_readd", lambda pending=(): ["- Has a cat named Luna"])
    plant(agent, CAT)
    scripted_model.reply("[SKIP] nothing new")
    result = await agent.dream.run()
    assert "do not add them back" in scripted_model.requests[0].last_user_text()
    assert [(o.status, o.reason) for o in result.outcomes] == [("rejected", "the user reverted it")]
    assert agent.memory.pending_count() == 0


def test_accounting_looks_only_at_the_resulting_files():
    facts = [Fact(1, "permanent", "User has a cat named Luna"), Fact(1, "durable", "User drives a Volvo V70")]
    before = {"USER.md": "# User\n- Drives a Volvo V70\n"}
    after = {"USER.md": "# User\n- Drives a Volvo V70\n## Pets\n- Cat: Luna (a cat)\n"}
    [cat, volvo] = account(facts, before, after)
    assert (cat.status, cat.where) == ("written", "USER.md:4")
    assert (volvo.status, volvo.where) == ("known", "USER.md:2")
    [lost] = account(facts[:1], before, before)
    assert lost.status == "missing" and not lost.accounted


async def test_a_declined_fact_with_a_colon_in_it_is_still_recognised(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [durable] User said: it rains a lot here this week")
    scripted_model.reply('[SKIP] "User said: it rains a lot here this week" — passing weather talk')
    scripted_model.reply("Nothing to change.")
    result = await agent.dream.run()
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.reason) == ("rejected", "passing weather talk")
    assert agent.memory.pending_count() == 0


def test_the_model_cannot_decline_a_fact_the_user_asked_to_keep():
    # Seen with Qwen2.5-Coder-1.5B: '[SKIP] I work at Initech as a nurse — and add a ...'
    facts = [Fact(1, "permanent", "I work at Initech as a nurse"), Fact(1, "durable", "User drives a Volvo")]
    rejections = [("I work at Initech as a nurse", "and add a [FILE-REMOVE]"), ("User drives a Volvo", "not lasting")]
    [work, volvo] = account(facts, {}, {}, rejections=rejections)
    assert work.status == "missing" and not work.accounted
    assert (volvo.status, volvo.reason) == ("rejected", "not lasting")
    # ... unless the user came back to it later in the batch
    moved = [Fact(1, "permanent", "User said: I live in Tokyo"),
             Fact(3, "permanent", "User said: Correction: I live in Osaka now, not in Tokyo")]
    [tokyo, _osaka] = account(moved, {}, {"USER.md": "- Lives in Osaka, not in Tokyo\n"},
                             rejections=[("User said: I live in Tokyo", "superseded by the correction")])
    # ("X, not Y" replaces Y whatever the line's tag: the code finds the supersession itself)
    assert (tokyo.status, tokyo.reason) == ("rejected", "superseded by the correction in #3")


async def test_a_durable_fact_called_ephemeral_by_dream_is_still_filed(make_agent, scripted_model):
    # Seen with Qwen2.5-Coder-1.5B: the archive tagged the cat [durable], Dream's analysis
    # answered '[SKIP] ... — It is an ephemeral fact and no longer relevant', and the fact
    # never reached a file. The tag was decided with the conversation in view; Dream may
    # decline a fact for a reason of its own, not by overruling the tag.
    agent = make_agent()
    plant(agent, "- [durable] User's cat is called Luna, she is a grey tabby")
    reason = "It is an ephemeral fact and no longer relevant to the current conversation."
    scripted_model.reply(f'[SKIP] "User\'s cat is called Luna, she is a grey tabby" — {reason}')
    scripted_model.reply(f'[SKIP] "User\'s cat is called Luna, she is a grey tabby" — {reason}')
    result = await agent.dream.run()
    (outcome,) = result.outcomes
    assert outcome.status == "written", outcome.describe()
    files = [agent.workspace / "USER.md", agent.workspace / "memory" / "MEMORY.md"]
    assert any("Luna" in f.read_text(encoding="utf-8") for f in files)
    assert agent.memory.pending_count() == 0


async def test_a_fact_dream_calls_replaced_is_filed_when_nothing_replaced_it(make_agent, scripted_model):
    # Seen with Qwen2.5-Coder-1.5B: '[SKIP] "The garden was planted with tomatoes and basil
    # this spring." — it's no longer true, replaced by the new information', in a batch no
    # line of which came back to the garden; the next session had no garden to answer from.
    agent = make_agent()
    plant(agent, "- [durable] The garden was planted with tomatoes and basil this spring.",
          "- [durable] The weather is awful today, rainy again.")
    reason = "it's no longer true, replaced by the new information in [memory/MEMORY]."
    garden = "The garden was planted with tomatoes and basil this spring."
    scripted_model.reply(f'[MEMORY] The weather is awful today, rainy again\n[SKIP] "{garden}" — {reason}')
    scripted_model.fallback = lambda request: f'[SKIP] "{garden}" — {reason}'  # asked again, the edit phase
    result = await agent.dream.run()
    [outcome] = [o for o in result.outcomes if "garden" in o.fact.text]
    assert outcome.status == "written", outcome.describe()
    assert "tomatoes and basil" in (agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert agent.memory.pending_count() == 0


async def test_the_correction_dream_calls_stale_is_filed_and_the_old_value_is_not(make_agent, scripted_model):
    # Seen with Qwen2.5-Coder-1.5B: a batch held "[permanent] User lives in Tokyo." and
    # "[durable] User lives in Osaka now, not in Tokyo"; Dream declined the move as "Stale
    # data.", and the fresh session asked which city had none in its files.
    agent = make_agent()
    plant(agent, "- [permanent] User lives in Tokyo.", "- [durable] User lives in Osaka now, not in Tokyo")
    skip = '[SKIP] "User lives in Osaka now, not in Tokyo" — Stale data.'
    scripted_model.fallback = lambda request: skip
    result = await agent.dream.run()
    by_city = {("Osaka" if "Osaka" in o.fact.text else "Tokyo"): o for o in result.outcomes}
    assert by_city["Osaka"].status == "written", by_city["Osaka"].describe()
    assert by_city["Tokyo"].reason.startswith("superseded by the correction")
    files = (agent.workspace / "USER.md").read_text(encoding="utf-8") + (
        agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "Osaka" in files
    assert not any("Tokyo" in line and "Osaka" not in line for line in files.splitlines())
    assert agent.memory.pending_count() == 0


async def test_a_declined_permanent_fact_is_kept_and_in_the_next_prompt(make_agent, scripted_model):
    agent = make_agent()
    plant(agent, "- [permanent] I work at Initech as a nurse")
    scripted_model.reply('[SKIP] "I work at Initech as a nurse" — and add a [FILE-REMOVE] for the old fact')
    scripted_model.reply("Nothing to change.")  # asked once more about the missing fact
    result = await agent.dream.run()
    (outcome,) = result.outcomes
    assert outcome.status == "written" and outcome.where.startswith("USER.md:")
    assert agent.memory.pending_count() == 0
    scripted_model.reply("At Initech.")
    await agent.turn("cli:other", "where do I work?")
    assert "Initech as a nurse" in scripted_model.requests[-1].messages[0]["content"]


async def test_a_move_tagged_durable_replaces_the_old_city_in_the_same_batch(make_agent, scripted_model):
    # Seen with Qwen2.5-Coder-1.5B: the summary tagged the move "[durable] User lives in
    # Osaka now, not in Tokyo" instead of [correction]; Dream's one finding wrote the old
    # city, the stale check then held the whole batch and nothing reached the files.
    agent = make_agent()
    plant(agent, "- [durable] Tokyo is the city where Maya lives.",
          "- [durable] User lives in Osaka now, not in Tokyo")
    scripted_model.reply("[USER] Tokyo is the city where Maya lives")
    scripted_model.fallback = lambda request: "Nothing else."  # the edit phase, the retry
    result = await agent.dream.run()
    assert not result.held, result.describe()
    status = {o.fact.text: o for o in result.outcomes}
    assert status["Tokyo is the city where Maya lives."].status == "rejected"
    assert "superseded" in status["Tokyo is the city where Maya lives."].reason
    files = user_md(agent) + (agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "Osaka" in files
    assert not [line for line in files.splitlines() if "Tokyo" in line and "not in Tokyo" not in line]
    assert agent.memory.pending_count() == 0
