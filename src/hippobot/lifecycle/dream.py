"""Dream: distil pending history entries into SOUL.md, USER.md and memory/MEMORY.md (SPEC 4.4).

:meth:`Dream.run` is the one entry point (``/dream``, ``hippobot dream``, the schedule). A run
takes the entries after ``.dream_cursor`` in batches, and each batch goes through the phases of
:mod:`hippobot.lifecycle.dream_phases`:

1. **analyse** — the model lists findings (``[USER] fact``, ``[FILE-REMOVE] ...``, ``[SKIP]``);
2. **edit** (optional, ``dream.editPhase``) — the model edits the staged copies
   (:mod:`~hippobot.lifecycle.dream_edit`);
3. **apply** — the code places every finding the files do not state yet
   (:mod:`~hippobot.lifecycle.dream_apply`): the model decides what, the code decides how;
4. **account** — every durable fact of the batch is written, already known or declined with a
   reason; what is missing is asked for once more, then placed as the history states it; a
   batch still unaccounted for is held (its edits dropped, its entries pending).

The edits go to staged copies; at the end one commit point (:class:`StagedRun`) merges them
into the live files, moves the cursor past the accounted batches and makes one git commit.

One run per workspace at a time, across processes (a file lock). An iteration budget and a
token budget stop a looping model with a clear log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hippobot.atomic import atomic_write_text
from hippobot.errors import ProviderError, StorageError
from hippobot.lifecycle import dream_phases as phases
from hippobot.lifecycle.dream_commit import StagedRun, read_file
from hippobot.lifecycle.dream_findings import parse_findings, parse_rejections
from hippobot.lifecycle.dream_result import (
    DreamResult,
    HeldBatch,
    read_pending_reasons,
    write_pending_reasons,
)
from hippobot.locks import LockTimeout, acquire_async
from hippobot.memory.history import HistoryEntry
from hippobot.memory.ledger import RevertLedger, restates
from hippobot.prompts import load
from hippobot.providers.base import ChatRequest, Provider, Usage
from hippobot.providers.metering import usage_job
from hippobot.providers.serial import background
from hippobot.workspace import MEMORY_FILES, Workspace

if TYPE_CHECKING:
    from pathlib import Path

    from hippobot.config.schema import DreamConfig
    from hippobot.context.budget import Budget
    from hippobot.memory.gitstore import GitStore
    from hippobot.memory.store import MemoryStore
    from hippobot.providers.model import ModelClient

__all__ = [
    "MEMORY_FILES",
    "Dream",
    "DreamResult",
    "HeldBatch",
    "dream_prompt_command",
    "parse_findings",
    "parse_rejections",
    "read_pending_reasons",
]

log = logging.getLogger(__name__)

_GUIDE_CAP = 32_000


class _BudgetedProvider:
    """Counts tokens across a run and stops it when the budget is spent."""

    def __init__(self, inner: Provider, budget: int) -> None:
        self.inner, self.budget, self.used = inner, budget, 0
        self.name = getattr(inner, "name", "provider")

    async def stream(self, request: ChatRequest):
        if self.used >= self.budget:
            raise _OverBudget(f"token budget of {self.budget} spent ({self.used} used)")
        async for ev in self.inner.stream(request):
            if isinstance(ev, Usage):
                self.used += ev.prompt_tokens + ev.completion_tokens
            yield ev


class _OverBudget(Exception):
    pass


class Dream:
    """Dream runs of one workspace. Collaborators: the workspace's paths and locks, the
    memory store, the memory repository (``git``, opened on first use), the model, the
    ``dream`` settings and the redaction of error texts."""

    def __init__(
        self,
        *,
        workspace: Workspace,
        memory: MemoryStore,
        git: Callable[[], GitStore],
        model: ModelClient,
        config: DreamConfig,
        budget: Budget,
        redact: Callable[[str], str] = str,
    ) -> None:
        self.paths = workspace
        self.workspace = workspace.root
        self.memory = memory
        self._git = git
        self.model = model
        self.config = config
        self.budget = budget
        self.redact = redact
        self.commit_point = StagedRun(workspace, memory, git)

    @property
    def git(self) -> GitStore:
        return self._git()

    @property
    def staged(self) -> Path:
        return self.commit_point.staged

    @property
    def manifest(self) -> Path:
        return self.commit_point.manifest

    def _stage(self) -> None:
        self.commit_point.prepare()

    def recover(self) -> tuple[tuple[str, ...], str | None]:
        """Roll a committed-but-unapplied run forward (see :class:`StagedRun`). Blocking."""
        return self.commit_point.recover()

    def guide(self) -> tuple[str, bool]:
        """The Dream guide in effect and whether it is the workspace's own."""
        text = read_file(self.paths.dream_guide, self.workspace)
        if text.strip():
            return text[:_GUIDE_CAP], True
        return load("dream_guide.md"), False

    def do_not_readd(self, pending: Sequence[HistoryEntry] = ()) -> list[str]:
        """Lines the user reverted (the ledger, ``memory/reverted.jsonl``) that Dream must
        neither write nor require: each one no entry of ``pending`` newer than its undo
        restates. They are shown to the model as "do not add them back", and a fact matching
        one is accounted as rejected ("the user reverted it"). Reads a file: call it off the
        event loop."""
        out: dict[str, None] = {}
        for line in RevertLedger(self.workspace).read():
            if not any(e.cursor > line.after_cursor and restates(e.content, line.text) for e in pending):
                out[line.text] = None
        return list(out)

    # --- the run ------------------------------------------------------------------------

    async def run(self, *, dry_run: bool = False) -> DreamResult:
        started = time.monotonic()
        lock_path = self.paths.dream_lock
        try:
            held = await acquire_async(lock_path, timeout=0)
        except LockTimeout:
            return DreamResult("busy")
        except OSError as exc:  # a full or read-only disk: say so in one line
            raise StorageError(
                f"Dream cannot take its lock {lock_path}: {exc.strerror or exc}; nothing was changed"
            ) from exc
        try:
            with usage_job("dream"), background():  # a chat never waits for more than one request
                result = await self._run(dry_run)
        finally:
            held.release()
        result.seconds = time.monotonic() - started
        return result

    async def _run(self, dry_run: bool) -> DreamResult:
        if not dry_run:
            await asyncio.to_thread(self.recover)
        pending = await asyncio.to_thread(self.memory.read_history, after=self.memory.dream_cursor())
        if not pending:
            return DreamResult("nothing")
        reverted = await asyncio.to_thread(self.do_not_readd, pending)
        model = phases.DreamModel(
            _BudgetedProvider(self.model.provider, self.config.max_tokens_per_run),
            self.config.model_override or self.model.name, self.model.max_tokens, self.model.temperature,
        )
        guide = phases.guide_text(self.guide()[0], reverted)
        batches = phases.select_batches(pending, size=self.config.batch_size, token_cap=self._cap(3, 300))
        result = DreamResult("done")
        if dry_run:
            return await self._dry_run(model, guide, batches, result)
        await asyncio.to_thread(self.commit_point.prepare)
        last_done: int | None = None  # the cursor may move up to here: every batch before is accounted
        current: Sequence[HistoryEntry] = ()
        try:
            for current in batches:
                held = await self._batch(model, guide, current, reverted, result)
                if held is not None:
                    result.held.append(held)
                elif not result.held:
                    last_done = current[-1].cursor
                result.entries += len(current)
                result.batches += 1
            current = ()
        except _OverBudget as exc:
            log.info("Dream stopped: %s; the rest stays pending", exc)  # the caller reports it
            result.status, result.error = "stopped", str(exc)
        except ProviderError as exc:
            reason = self.redact(str(exc))  # an endpoint may echo the key it rejected
            log.info("Dream failed: %s; the entries stay pending", reason)  # the caller reports it
            result.status, result.error = "failed", reason
        if current:  # interrupted mid-batch: its half-made edits go, the rest is pending
            result.held.append(HeldBatch(current[0].cursor, pending[-1].cursor, f"Dream {result.status}: {result.error}"))
        await self._finish(result, pending, last_done)
        return result

    async def _dry_run(
        self, model: phases.DreamModel, guide: str, batches: Sequence[Sequence[HistoryEntry]], result: DreamResult
    ) -> DreamResult:
        files = await asyncio.to_thread(phases.read_files, self.paths)
        try:
            for entries in batches:
                batch = await phases.analyse(model, guide, phases.Batch.start(entries, files))
                result.findings += batch.findings
                result.entries += len(entries)
                result.batches += 1
        except _OverBudget as exc:
            result.status, result.error = "stopped", str(exc)
        except ProviderError as exc:
            result.status, result.error = "failed", self.redact(str(exc))
        if result.status == "done":
            result.status = "dry-run"
        return result

    async def _batch(
        self,
        model: phases.DreamModel,
        guide: str,
        entries: Sequence[HistoryEntry],
        reverted: Sequence[str],
        result: DreamResult,
    ) -> HeldBatch | None:
        """The phases of one batch; its edits reach the staged copies only when every
        durable fact of it is accounted for (a :class:`HeldBatch` otherwise)."""
        batch = phases.Batch.start(entries, await asyncio.to_thread(self.commit_point.read))
        keep = False
        try:
            batch = await phases.analyse(model, guide, batch)
            if not batch.valid:
                return self._unformatted(batch)
            result.findings += batch.findings
            if self.config.edit_phase:
                await self._edit_phase(model, guide, batch, result)
            batch = phases.account(phases.apply(batch), reverted)
            if batch.missing:
                log.info("Dream: %d fact(s) of entries %s not accounted for; asking once more",
                         len(batch.missing), batch.span)
                for part in phases.chunks(batch.missing, token_cap=self._cap(8, 200)):
                    batch = await phases.ask_missing(model, guide, batch, part)
                batch = phases.account(batch, reverted)
            if batch.missing:
                batch = phases.account(phases.keep_what_was_kept_for(batch), reverted)
            keep = not batch.missing
        finally:  # the staged copies hold this batch's edits only once it is accounted for
            await asyncio.to_thread(self.commit_point.write, batch.files if keep else batch.before)
        result.outcomes += batch.outcomes
        result.placed += batch.placed
        if not batch.missing:
            return None
        return HeldBatch(
            entries[0].cursor, entries[-1].cursor,
            f"{len(batch.missing)} fact(s) not accounted for after a retry: "
            + "; ".join(o.describe() for o in batch.missing[:3]),
            tuple(o.fact.text for o in batch.missing),
        )

    def _unformatted(self, batch: phases.Batch) -> HeldBatch | None:
        if not batch.facts:
            log.warning("Dream analysis of entries %s followed no known format; they hold no "
                        "durable facts, so nothing is lost", batch.span)
            return None
        return HeldBatch(
            batch.entries[0].cursor, batch.entries[-1].cursor,
            "the model's analysis was empty or followed no known format (asked twice)",
            tuple(f.text for f in batch.facts),
        )

    async def _edit_phase(self, model: phases.DreamModel, guide: str, batch: phases.Batch, result: DreamResult) -> None:
        from hippobot.lifecycle.dream_edit import edit_staged

        for chunk in phases.chunks(batch.findings, token_cap=self._cap(8, 200)):
            await asyncio.to_thread(self.commit_point.write, batch.files)
            stats, reply = await edit_staged(
                model, self.staged, guide, chunk, batch.files, max_iterations=self.config.max_iterations
            )
            result.edits.add(stats)
            batch.rejections += parse_rejections(reply)
            # The model decides what to write, but only from what was said
            result.ungrounded += phases.keep_grounded_edits(batch, await asyncio.to_thread(self.commit_point.read))

    async def _finish(self, result: DreamResult, pending: Sequence[HistoryEntry], last_done: int | None) -> None:
        """Record what stays pending; commit the accounted batches (files, cursor, one git
        commit) or drop the staged copies when nothing changed."""
        for h in result.held:
            log.info("Dream left entries #%d-#%d pending: %s", h.first, h.last, h.reason)
        await asyncio.to_thread(write_pending_reasons, self.paths, result.held)
        cursor = last_done if last_done is not None else self.memory.dream_cursor()
        if cursor > self.memory.dream_cursor() or await asyncio.to_thread(self.commit_point.changed):
            result.withheld = await asyncio.to_thread(
                self._withhold_reverted, [e for e in pending if e.cursor <= cursor]
            )
            result.files, result.commit = await asyncio.to_thread(
                self.commit_point.commit, cursor, result.accounting()
            )
        else:
            await asyncio.to_thread(self.commit_point.discard)

    def _withhold_reverted(self, entries: Sequence[HistoryEntry]) -> list[str]:
        ledger = RevertLedger(self.workspace).read()
        if not ledger:
            return []
        files, withheld = phases.withhold_reverted(self.commit_point.read(), self.commit_point.base(), ledger, entries)
        self.commit_point.write(files)
        return withheld

    def _cap(self, share: int, floor: int) -> int | None:
        """A ``share``-th of the input budget (at least ``floor``), without a window none."""
        return max(floor, self.budget.input // share) if self.budget.enabled else None


def dream_prompt_command(dream: Dream, arg: str) -> str:
    """``/dream-prompt`` shows the guide in effect; ``/dream-prompt init`` makes it editable."""
    path = dream.paths.dream_guide
    if arg == "init":
        if read_file(path, dream.workspace).strip():
            return f"{path} already has your guide; edit it directly."
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, load("dream_guide.md"))  # replaces a link, never writes through
        return f"Wrote the default Dream guide to {path}; edit it to change what Dream keeps."
    if arg:
        return "Usage: /dream-prompt (show the guide) or /dream-prompt init (create prompts/dream.md)"
    text, custom = dream.guide()
    origin = f"custom guide from {path}" if custom else "built-in guide (run /dream-prompt init to customise)"
    return f"Dream guide in effect: {origin}\n\n{text}"
