"""Dream's optional edit phase: the model edits the staged copies with ``edit_file``.

With ``agents.defaults.dream.editPhase`` on, the model gets one conversation per chunk of
findings with ``read_file``/``edit_file`` confined to the three staged files (SPEC 4.4,
phase 2), or writes its edits as text blocks (:mod:`dream_text`) when it cannot call tools.
It runs *before* the code places the findings (:mod:`dream_apply`), which then adds only
what the files do not state yet: an edit that does not apply (``old_text`` not found), a
call written wrongly or a model that stops early loses no finding, and a fact the model did
place is not written twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from hippobot.lifecycle.dream_phases import DreamModel, show_file
from hippobot.lifecycle.dream_result import EditStats
from hippobot.loop.runner import Runner
from hippobot.messages import Message
from hippobot.prompts import render
from hippobot.workspace import MEMORY_FILES, MEMORY_MD, SOUL_MD, USER_MD

__all__ = ["edit_staged"]

log = logging.getLogger(__name__)


async def edit_staged(
    model: DreamModel,
    staged: Path,
    guide: str,
    findings: Sequence[str],
    files: Mapping[str, str],
    *,
    max_iterations: int,
) -> tuple[EditStats, str]:
    """Let the model apply ``findings`` to the files under ``staged`` (which hold ``files``
    when it starts); returns what it did and its last answer (which may decline facts)."""
    from hippobot.lifecycle.dream_text import apply_text_edits
    from hippobot.tools.base import ToolRegistry
    from hippobot.tools.files import file_tools
    from hippobot.tools.paths import PathPolicy

    allowed = {(staged / name).resolve() for name in MEMORY_FILES}
    registry = ToolRegistry()
    registry.extend(
        t for t in file_tools(PathPolicy(staged, allowed_files=allowed)) if t.name in ("read_file", "edit_file")
    )
    prompt = render(
        "dream_phase2.md", guide=guide, findings="\n".join(findings) or "(none)",
        soul=show_file(files[SOUL_MD]), user=show_file(files[USER_MD]),
        memory=show_file(files[MEMORY_MD]),
    )
    runner = Runner(
        provider=model.provider, model=model.name, tools=registry, max_iterations=max_iterations,
        max_tokens=min(4096, model.max_tokens), temperature=model.temperature, ask_again_if_empty=False,
    )

    async def keep(msg: Message) -> Message:
        return msg  # Dream's own conversation is not a user session

    result = await runner.run([{"role": "user", "content": prompt}], keep)
    results = [str(m.get("content") or "") for m in result.messages if m.get("role") == "tool"]
    stats = EditStats(calls=result.tool_calls, applied=sum(r.startswith("Edited") for r in results))
    if not result.tool_calls:  # the text path: edit blocks written in the answer
        done = await asyncio.to_thread(apply_text_edits, staged, result.reply or "")
        stats.text_edits = len(done)
        if done:
            log.info("Dream applied %d edit(s) from text: %s", len(done), "; ".join(done))
    if result.stopped:
        log.warning(
            "Dream edit phase hit its limit of %d tool steps (agents.defaults.dream.maxIterations); "
            "keeping the edits made so far", max_iterations,
        )
    log.info("Dream edit phase: %d tool call(s), %d applied", stats.calls, stats.applied)
    return stats, result.reply or ""
