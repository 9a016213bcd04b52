"""Concurrent writers of memory files lose nothing: chat sessions' edit_file calls, chat
commits and restores all take the same per-file lock."""

from __future__ import annotations

import asyncio
import re
import threading

from hippobot.memory.gitstore import GitStore
from hippobot.testing.scripted import FallbackReply, RecordedRequest

SESSIONS, TURNS = 8, 5


def _fact_editor(scripted_model):
    """Each user message "remember s-r" gets one edit_file adding FACT-s-r, then "ok"."""

    def answer(request: RecordedRequest):
        if request.messages and request.messages[-1].get("role") == "tool":
            return "ok"
        tag = re.search(r"remember (\d+-\d+)", request.last_user_words()).group(1)
        return FallbackReply(tool_calls=((
            "edit_file",
            {"path": "memory/MEMORY.md", "old_text": "### Decisions",
             "new_text": f"### Decisions\n- FACT-{tag}"},
        ),))

    return answer


async def test_eight_sessions_editing_memory_at_once_lose_no_edit(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.fallback = _fact_editor(scripted_model)

    async def session(s: int) -> None:
        for r in range(TURNS):
            result = await agent.turn(f"api:s{s}", f"remember {s}-{r}")
            assert result.reply == "ok"
            assert "Edited" in result.run.messages[-2]["content"]  # the tool said it worked

    await asyncio.gather(*(session(s) for s in range(SESSIONS)))
    await agent.aclose()
    text = (agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    missing = [f"{s}-{r}" for s in range(SESSIONS) for r in range(TURNS) if f"FACT-{s}-{r}\n" not in text + "\n"]
    assert missing == [], f"{len(missing)} acknowledged edits were lost"
    # ...and every one of them is in a version, so an undo cannot lose it either
    git = GitStore(agent.workspace)
    assert git.commit("test: anything left?") is None


async def test_chat_edits_survive_a_restore_loop(make_agent, scripted_model):
    """A user undoing an unrelated change over and over while the model keeps adding facts:
    each restore rewrites MEMORY.md from a merge, and must not drop a fact added meanwhile."""
    agent = make_agent()
    git = GitStore(agent.workspace)
    user_md = agent.workspace / "USER.md"
    user_md.write_text(user_md.read_text(encoding="utf-8") + "\n- likes tea\n", encoding="utf-8")
    tea = git.commit("manual: tea")
    assert tea is not None
    scripted_model.fallback = _fact_editor(scripted_model)
    stop = threading.Event()

    def restores() -> None:
        sha = tea
        while not stop.is_set():
            result = git.revert(sha)  # undo the last undo, and so on
            sha = result.new_sha or sha

    worker = threading.Thread(target=restores)
    worker.start()
    try:
        for r in range(30):
            await agent.turn("cli:direct", f"remember 0-{r}")
    finally:
        stop.set()
        worker.join(30)
    await agent.aclose()
    text = (agent.workspace / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert [r for r in range(30) if f"FACT-0-{r}\n" not in text + "\n"] == []
