"""Long conversations in small windows: nothing learned drops out of the prompt, and
consolidation does not thrash. Real HTTP to the scripted model (archivist + dreamer)."""

from __future__ import annotations

import random

import pytest

from hippobot.context import tokens
from hippobot.errors import ConfigError
from hippobot.lifecycle.autodream import dream_if_due
from hippobot.memory.facts import mentions_old_value
from hippobot.testing.archivist import archivist_and_dreamer, is_archive_request, is_dream_request

PLANTED = {
    "name is Alice Moreau": "Moreau",
    "has a cat named Luna": "Luna",
    "works at Initech as a nurse": "Initech",
    "favourite colour is teal": "teal",
    "lives in Tokyo": None,  # corrected below
    "drives a Volvo V70": "Volvo",
    "sister Mira lives in Lyon": "Mira",
    "allergic to peanuts": "peanuts",
    "plays the cello on Sundays": "cello",
}


def script(turns: int, seed: int = 14, extra: int = 0) -> dict[int, str]:
    """Turn index -> user text: facts early, a correction in the middle, chatter around."""
    rng = random.Random(seed)
    words = ["garden", "compost", "tomato", "rain", "barrel", "basil", "soil", "worm", "spade", "hedge", "shed", "mulch", "seed"]
    facts = list(PLANTED)
    plan: dict[int, str] = {}
    for i in range(turns):
        size = rng.randint(50, 400)
        text = " ".join(rng.choice(words) for _ in range(size // 6))[:size]
        if i % 7 == 2:
            text = f"NOTE: today the weather is {rng.choice(['grey', 'sunny', 'windy'])}\n{text}"
        plan[i] = text
    slots = [1 + i * (turns // 3) // len(facts) for i in range(len(facts))]
    for slot, fact in zip(slots, facts, strict=True):
        plan[slot] = f"FACT: User {fact}\n{plan[slot]}"
    plan[turns // 2] = f"CORRECTION: User moved to Osaka, not Tokyo\n{plan[turns // 2]}"
    for n in range(extra):  # more durable facts than Recent History's share holds
        slot = turns // 2 + 1 + n * (turns // 2 - 2) // max(1, extra)
        plan[slot] = f"FACT: User's locker code at gym Delta{n} is {1000 + 37 * n}\n{plan[slot]}"
    return plan


def request_tokens(request) -> int:
    return tokens.count_messages(request.messages) + tokens.count_tools(request.tools)


async def run_conversation(agent, scripted_model, turns: int, extra: int = 0) -> None:
    scripted_model.fallback = archivist_and_dreamer
    for text in script(turns, extra=extra).values():
        await agent.turn("cli:direct", text)
        await agent.jobs.drain()
        # what the long-running process's auto-Dream loop does between turns
        await dream_if_due(agent.memory, agent.budget.history_tokens, agent.dream.run)


@pytest.mark.parametrize(("window", "turns"), [(4096, 80), (8192, 120), (32_768, 200)])
async def test_facts_survive_long_conversations_in_small_windows(make_agent, scripted_model, window, turns):
    agent = make_agent(context_window_tokens=window, max_tokens=512)
    await run_conversation(agent, scripted_model, turns)

    requests = scripted_model.requests
    assert not scripted_model.errors
    consolidations = sum(is_archive_request(r) for r in requests)
    assert consolidations <= turns / 4, f"{consolidations} consolidation requests for {turns} turns"
    # no request of any kind (turn, archive, Dream) is over the input budget
    worst = max(request_tokens(r) for r in requests)
    assert worst <= agent.budget.input, f"a request of {worst} tokens > budget {agent.budget.input}"

    # a fresh question at the end: every planted fact is in the prompt (Recent History,
    # memory files, or the conversation still replayed), the correction is current
    scripted_model.fallback = None
    scripted_model.reply("noted")
    await agent.turn("cli:direct", "What do you know about me?")
    last = scripted_model.requests[-1]
    system = last.messages[0]["content"]
    prompt = "\n".join(str(m.get("content")) for m in last.messages)
    for fact, word in PLANTED.items():
        if word is not None:
            assert word in prompt, f"{fact!r} is not reachable in the final prompt"
    assert "Osaka" in prompt
    # what hippobot remembers (memory files, Recent History) no longer says Tokyo; the raw
    # conversation may still be replayed as it was said
    stale = [ln for ln in system.splitlines() if mentions_old_value(ln, "Tokyo", "User moved to Osaka")]
    assert not stale, f"Tokyo is still stated as current: {stale}"
    # a fact whose conversation left the replay is reachable through memory (system prompt)
    replay = "\n".join(str(m.get("content")) for m in last.messages[1:])
    for word in filter(None, PLANTED.values()):
        assert word in replay or word in system
    if window < 32_768:
        assert all(w in system for w in ("Moreau", "Luna", "Initech")), "early facts were archived"


async def test_facts_beyond_recent_historys_share_are_filed_by_dream_not_dropped(make_agent, scripted_model):
    agent = make_agent(context_window_tokens=4096, max_tokens=512)
    await run_conversation(agent, scripted_model, 80, extra=30)
    assert any(is_dream_request(r) for r in scripted_model.requests), "Dream never ran"
    assert sum(is_archive_request(r) for r in scripted_model.requests) <= 20
    assert max(request_tokens(r) for r in scripted_model.requests) <= agent.budget.input
    scripted_model.fallback = None
    scripted_model.reply("noted")
    await agent.turn("cli:direct", "What do you know about me?")
    prompt = "\n".join(str(m.get("content")) for m in scripted_model.requests[-1].messages)
    missing = [n for n in range(30) if f"Delta{n} is {1000 + 37 * n}" not in prompt]
    assert not missing, f"locker facts {missing} are not reachable"
    user = (agent.workspace / "USER.md").read_text()
    assert "Luna" in user and "Osaka" in user and "Tokyo" not in user
    # processed entries left history.jsonl for the archive, which recall still finds
    assert (agent.workspace / "memory" / "history.archive.jsonl").exists()
    assert all(e.cursor > agent.memory.dream_cursor() for e in agent.memory.read_history())
    assert agent.recall.search("Luna")


async def test_a_window_too_small_for_the_fixed_prompt_names_the_minimum(make_agent, scripted_model):
    agent = make_agent(context_window_tokens=2048, max_tokens=512)
    with pytest.raises(ConfigError) as info:
        await agent.turn("cli:direct", "hello")
    message = str(info.value)
    assert "contextWindowTokens" in message and "at least" in message
    minimum = int(message.split("at least ")[1].split()[0].replace(",", ""))
    assert 2048 < minimum <= 4096
    assert scripted_model.requests == []  # nothing was sent
    assert agent.sessions.get("cli:direct").messages == []  # nothing was saved
    # the minimum it names works
    fine = make_agent(context_window_tokens=minimum, max_tokens=512)
    scripted_model.reply("hi")
    assert (await fine.turn("cli:direct", "hello")).reply == "hi"
