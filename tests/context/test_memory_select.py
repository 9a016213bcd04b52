"""Memory over its budget is selected by relevance, with a visible note; never cut mid-file."""

from __future__ import annotations

from hippobot.context.memory_select import ALWAYS_MARK, relevance_terms, select_memory, split_budget
from hippobot.context.tokens import count_text

FILLER_TOPICS = ["gardening", "chess openings", "tax forms", "bread baking", "bird songs"]


def long_memory(extra: str = "") -> str:
    lines = ["# Long-term Memory", "", "## Preferences", f"- Prefers short answers {ALWAYS_MARK}"]
    for topic in FILLER_TOPICS:
        lines += ["", f"## Notes on {topic}"]
        lines += [f"- {topic} detail number {i}: lorem ipsum dolor sit amet" for i in range(12)]
    lines += ["", "## Pets", "- Has a cat named Luna who hates the vacuum cleaner"]
    lines += ["", "## Work", "- Works at Initech as a nurse on night shifts"]
    return "\n".join(lines) + extra + "\n"


def select(text: str, budget: int, anchor: str):
    return select_memory(
        text, budget_tokens=budget, anchor=anchor, file_label="memory/MEMORY.md", count_tokens=count_text
    )


def test_a_file_that_fits_is_shown_whole_byte_for_byte() -> None:
    text = "# Memory\n\n- Has a cat named Luna\n"
    view = select(text, 1000, "anything")
    assert view.text == text and view.complete


def test_over_budget_keeps_the_relevant_and_the_always_items_and_says_what_is_left_out() -> None:
    text = long_memory()
    budget = count_text(text) // 5
    view = select(text, budget, "What is my cat called? Does she like the vacuum?")
    assert count_text(view.text) <= budget
    assert "Has a cat named Luna" in view.text
    assert "## Pets" in view.text  # the item keeps its heading
    assert "Prefers short answers" in view.text  # marked always
    assert not view.complete
    note = view.text.splitlines()[-1]
    assert "left out" in note and "memory_get(" in note and "read_file(" in note
    assert any("Notes on" in h for h in view.omitted_headings)


def test_the_anchor_decides_what_is_shown() -> None:
    text = long_memory()
    budget = count_text(text) // 5
    about_work = select(text, budget, "which hospital shifts do I work")
    about_pets = select(text, budget, "my cat")
    assert "Initech" in about_work.text
    assert "Luna" in about_pets.text
    assert select(text, budget, "my cat").text == about_pets.text  # deterministic


def test_items_keep_file_order_and_continuation_lines() -> None:
    text = "## A\n- first fact about rockets\n  continued here\n- unrelated\n## B\n- second fact about rockets\n"
    text += "\n".join(f"- filler {i} about nothing much at all" for i in range(40)) + "\n"
    view = select(text, 120, "rockets")
    body = view.text
    assert body.index("first fact") < body.index("second fact")
    assert "  continued here" in body


def test_split_budget_lets_a_small_file_keep_its_size() -> None:
    assert split_budget(1000, [100, 5000]) == [100, 900]
    assert split_budget(1000, [600, 5000]) == [500, 500]
    assert split_budget(1000, [100, 200]) == [100, 200]


def test_relevance_terms_fold_plurals_and_drop_stop_words() -> None:
    assert set(relevance_terms("What are my cats called?")) == {"cat", "called"}


# --- in the prompt, through the agent and the scripted model over HTTP ------------------


async def test_a_long_memory_file_is_selected_stays_in_budget_and_keeps_the_prefix(make_agent, scripted_model):
    agent = make_agent(context_window_tokens=8192, max_tokens=512)
    budget = agent.prompts.builder.memory_budget
    assert budget > 0
    filler = []
    for topic in FILLER_TOPICS * 12:
        filler += ["", f"## Notes on {topic}"]
        filler += [f"- {topic} detail {i}: lorem ipsum dolor sit amet consectetur" for i in range(12)]
    text = "# Long-term Memory\n" + "\n".join(filler) + "\n\n## Pets\n- Has a cat named Luna who hates the vacuum\n"
    assert count_text(text) > 5 * budget
    (agent.workspace / "memory" / "MEMORY.md").write_text(text, encoding="utf-8")
    scripted_model.reply("Luna.")
    scripted_model.reply("She hates the vacuum.")
    await agent.turn("cli:direct", "What is my cat called?")
    await agent.turn("cli:direct", "And what does my cat hate?")
    first, second = scripted_model.requests[-2:]
    system = first.messages[0]["content"]
    assert "Has a cat named Luna" in system
    assert "left out" in system and "memory_get(" in system
    assert count_text(system) < agent.budget.input
    # The selection is anchored to the first replayed message: the next request extends this one.
    assert second.messages[: len(first.messages)] == first.messages
    await agent.aclose()
