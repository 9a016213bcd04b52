"""Dream: distil pending history entries into SOUL.md, USER.md and memory/MEMORY.md (SPEC 4.4).

A run processes the entries after ``.dream_cursor`` in batches until none is left:

1. **Analysis** — the model reads a batch and the current files and lists findings, one per
   line (``[USER]``, ``[SOUL]``, ``[MEMORY]``, ``[FILE-REMOVE]``, ``[SKIP]``).
2. **Edit** — the model applies the findings with ``read_file``/``edit_file`` restricted to the
   three files. Edits go to *staged copies* under ``.hippobot/dream/staged``, never to the live
   files.
3. **Apply** — a manifest is written (the commit point), then the staged files replace the live
   ones (three-way merged with any edit the user made meanwhile), the cursor moves and one git
   commit records the run. A run killed before the manifest leaves the live files untouched and
   the entries pending; a run killed after it is rolled forward by the next run.

One run per workspace at a time, across processes (a file lock). An iteration budget and a token
budget stop a looping model with a clear log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from hippobot.atomic import atomic_write_text
from hippobot.errors import ProviderError, StorageError
from hippobot.lifecycle.accounting import (
    Fact,
    Outcome,
    account,
    batch_facts,
    format_outcomes,
    unaccounted,
)
from hippobot.lifecycle.versions import CHAT_HINTS, Hints
from hippobot.locks import LockTimeout, acquire_async
from hippobot.loop.runner import Runner
from hippobot.memory.history import HistoryEntry
from hippobot.memory.ledger import RevertLedger, content_lines, restates
from hippobot.messages import Message
from hippobot.prompts import load, render
from hippobot.providers.base import ChatRequest, Provider, Usage, collect
from hippobot.providers.metering import usage_job
from hippobot.providers.serial import background
from hippobot.safeio import read_regular
from hippobot.workspace import MEMORY_FILES, Workspace

if TYPE_CHECKING:
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

T = TypeVar("T")
_FINDING = re.compile(r"^\s*[-*]?\s*\[(USER|SOUL|MEMORY|FILE-REMOVE|[A-Z]+-REMOVE|SKIP)\]\s*(.*)$")
_ENTRY_CAP = 2000
_FILE_CAP = 12_000
_GUIDE_CAP = 32_000
_LEDGER_SHOWN = 50  # newest reverted lines shown to the analysis


def parse_findings(text: str) -> tuple[list[str], bool]:
    """Finding lines of a phase-1 answer, and whether the answer followed the format at all."""
    findings, any_valid = [], False
    for line in (text or "").splitlines():
        m = _FINDING.match(line)
        if m is None:
            continue
        any_valid = True
        if m.group(1) != "SKIP" and m.group(2).strip():
            findings.append(f"[{m.group(1)}] {m.group(2).strip()}")
    return findings, any_valid


_REJECT = re.compile(r"^\s*[-*]?\s*\[SKIP\]\s*(.+?)\s*(?:—|–| - |:)\s*(.+?)\s*$")
# A quoted fact may itself hold a colon or dash ("User said: ..."): the quotes delimit it.
_REJECT_QUOTED = re.compile(r'^\s*[-*]?\s*\[SKIP\]\s*["“](.+?)["”]\s*(?:—|–| - |:)\s*(.+?)\s*$')


def parse_rejections(text: str) -> list[tuple[str, str]]:
    """``[SKIP] "<fact>" — reason`` lines: (fact, reason) pairs the model declined."""
    out = []
    for line in (text or "").splitlines():
        m = _REJECT_QUOTED.match(line) or _REJECT.match(line)
        if m is not None:
            out.append((m.group(1).strip(' "“”\''), m.group(2).strip()))
    return out


@dataclass(frozen=True, slots=True)
class HeldBatch:
    """Entries a run left pending, and why."""

    first: int
    last: int
    reason: str
    facts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"from": self.first, "to": self.last, "reason": self.reason, "facts": list(self.facts)}


def read_pending_reasons(workspace: Path) -> list[HeldBatch]:
    """What the last Dream run left pending and why (``hippobot memory history --pending``)."""
    try:
        data = json.loads((workspace / ".hippobot" / "dream" / "pending.json").read_text(encoding="utf-8"))
        return [
            HeldBatch(int(h["from"]), int(h["to"]), str(h["reason"]), tuple(map(str, h.get("facts", ()))))
            for h in data.get("held", [])
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


@dataclass(slots=True)
class DreamResult:
    status: Literal["nothing", "done", "dry-run", "failed", "busy", "stopped"]
    entries: int = 0
    batches: int = 0
    findings: list[str] = field(default_factory=list)
    files: tuple[str, ...] = ()
    commit: str | None = None
    error: str | None = None
    seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    held: list[HeldBatch] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # reverted lines Dream tried to re-add

    def accounting(self) -> str:
        """One line per durable fact of the run, then what stays pending and why."""
        lines = [format_outcomes(self.outcomes)] if self.outcomes else []
        for h in self.held:
            lines.append(f"Entries #{h.first}-#{h.last} stay pending: {h.reason}")
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        """False when the run could not do its work (scripts get a non-zero exit)."""
        return self.status not in ("failed", "stopped", "busy")

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status, "entries": self.entries, "batches": self.batches,
            "findings": list(self.findings), "files": list(self.files), "commit": self.commit,
            "error": self.error, "seconds": round(self.seconds, 3), "withheld": list(self.withheld),
            "accounting": self.accounting(),
        }

    def describe(self, hints: Hints = CHAT_HINTS) -> str:
        text = self._headline(hints)
        extra = self.accounting() if self.status not in ("nothing", "busy", "dry-run") else ""
        return f"{text}\n{extra}" if extra else text

    def _headline(self, hints: Hints) -> str:
        took = f" in {self.seconds:.1f}s"
        if self.status == "nothing":
            return (
                "Nothing to dream about: no history entries are waiting. Entries are written "
                "when a conversation outgrows the context window, on /new, or after "
                "idleCompactAfterMinutes of silence (see `hippobot memory history`)."
            )
        if self.status == "busy":
            return "Dream is already running in another process; try again when it finishes."
        if self.status == "dry-run":
            body = "\n".join(self.findings) or "(no findings)"
            return f"Dry run over {self.entries} pending entr{'y' if self.entries == 1 else 'ies'}{took}; nothing was edited.\n{body}"
        if self.status in ("failed", "stopped"):
            done = f" ({self.batches} batch(es) completed before that)" if self.batches else ""
            return f"Dream {self.status}{took}: {self.error}. The remaining entries stay pending{done}."
        held = sum(h.last >= h.first for h in self.held)
        tail = f"; {held} batch(es) stay pending" if held else ""
        if not self.files:
            return f"Dream processed {self.entries} entr{'y' if self.entries == 1 else 'ies'}{took}; no memory changes{tail}."
        sha = f" (commit {self.commit[:8]})" if self.commit else ""
        undo = f" {hints.restore} {self.commit[:8]}" if self.commit else f" {hints.restore}"
        kept_out = f" Left out {len(self.withheld)} line(s) you had undone." if self.withheld else ""
        return (
            f"Dream processed {self.entries} entr{'y' if self.entries == 1 else 'ies'}{took} and "
            f"updated {', '.join(self.files)}{sha}{tail}.{kept_out} See {hints.log}; undo with{undo}."
        )


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
        self.state = self.paths.dream_state
        self.staged = self.state / "staged"
        self.manifest = self.state / "manifest.json"

    @property
    def git(self) -> GitStore:
        return self._git()

    def guide(self) -> tuple[str, bool]:
        """The Dream guide in effect and whether it is the workspace's own."""
        custom = self.paths.dream_guide
        text = _read(custom, self.workspace).decode("utf-8", "replace")
        if text.strip():
            return text[:_GUIDE_CAP], True
        return load("dream_guide.md"), False

    # --- run ----------------------------------------------------------------------------

    async def run(self, *, dry_run: bool = False) -> DreamResult:
        started = time.monotonic()
        lock_path = self.paths.dream_lock
        try:
            held = await acquire_async(lock_path, timeout=0)
        except LockTimeout:
            return DreamResult("busy")
        except OSError as exc:  # a full or read-only disk: say so in one line
            raise StorageError(
                f"Dream cannot take its lock {lock_path}: {exc.strerror or exc}; "
                "nothing was changed"
            ) from exc
        try:
            with usage_job("dream"), background():  # a chat never waits for more than one request
                result = await self._run(dry_run)
        finally:
            held.release()
        result.seconds = time.monotonic() - started
        return result

    async def _run(self, dry_run: bool) -> DreamResult:
        memory = self.memory
        if not dry_run:
            await asyncio.to_thread(self.recover)
        pending = await asyncio.to_thread(memory.read_history, after=memory.dream_cursor())
        if not pending:
            return DreamResult("nothing")
        provider = _BudgetedProvider(self._provider(), self.config.max_tokens_per_run)
        result = DreamResult("done")
        reverted = await asyncio.to_thread(self.do_not_readd, pending)
        if not dry_run:
            await asyncio.to_thread(self._stage_or_fail)
        last_done: int | None = None  # the cursor may move up to here: every batch before is accounted
        batch: Sequence[HistoryEntry] = ()
        snapshot: dict[str, str] = {}
        try:
            for batch in self._batches(pending):
                if dry_run:
                    result.findings += (
                        await self._analyse(provider, batch, staged=False, reverted=reverted)
                    )[0]
                else:
                    snapshot = self._files(self.staged)
                    held = await self._batch(provider, batch, result, reverted)
                    if held is not None:
                        self._restore(snapshot)  # nothing of an unaccounted batch is kept
                        result.held.append(held)
                    elif not result.held:
                        last_done = batch[-1].cursor
                result.entries += len(batch)
                result.batches += 1
            batch = ()
        except _OverBudget as exc:
            log.info("Dream stopped: %s; the rest stays pending", exc)  # the caller reports it
            result.status, result.error = "stopped", str(exc)
        except ProviderError as exc:
            reason = self.redact(str(exc))  # an endpoint may echo the key it rejected
            log.info("Dream failed: %s; the entries stay pending", reason)  # the caller reports it
            result.status, result.error = "failed", reason
        if dry_run:
            result.status = "dry-run" if result.status == "done" else result.status
            return result
        if batch:  # interrupted mid-batch: drop its half-made edits, report the rest as pending
            if snapshot:
                self._restore(snapshot)
            result.held.append(HeldBatch(batch[0].cursor, pending[-1].cursor, f"Dream {result.status}: {result.error}"))
        for h in result.held:
            log.info("Dream left entries #%d-#%d pending: %s", h.first, h.last, h.reason)
        self._write_pending_reasons(result.held)
        cursor = last_done if last_done is not None else memory.dream_cursor()
        if cursor > memory.dream_cursor() or self._staged_changed():
            result.withheld = await asyncio.to_thread(
                self._honour_reverts, [e for e in pending if e.cursor <= cursor]
            )
            result.files, result.commit = await asyncio.to_thread(
                self._apply, cursor, result.accounting()
            )
        else:
            await asyncio.to_thread(shutil.rmtree, self.staged, ignore_errors=True)
        return result

    def _batches(self, pending: Sequence[HistoryEntry]) -> list[Sequence[HistoryEntry]]:
        """At most ``batchSize`` entries each, and with a context window, at most a third of
        the input budget of entry text, so Dream's requests fit a small window too."""
        from hippobot.context.tokens import count_text

        budget = self.budget
        cap = max(300, budget.input // 3) if budget.enabled else None
        out: list[Sequence[HistoryEntry]] = []
        current: list[HistoryEntry] = []
        used = 0
        for entry in pending:
            cost = count_text(entry.content[:_ENTRY_CAP]) + 12
            full = len(current) >= self.config.batch_size or (cap is not None and current and used + cost > cap)
            if full:
                out.append(current)
                current, used = [], 0
            current.append(entry)
            used += cost
        if current:
            out.append(current)
        return out

    async def _batch(
        self,
        provider: Provider,
        batch: Sequence[HistoryEntry],
        result: DreamResult,
        reverted: Sequence[str] = (),
    ) -> HeldBatch | None:
        """Analyse, edit and account for one batch; a :class:`HeldBatch` when it must stay
        pending. ``reverted``: :meth:`do_not_readd` for this run."""
        facts = batch_facts(batch)
        before = self._files(self.staged)
        findings, valid, text = await self._analyse(provider, batch, staged=True, reverted=reverted)
        if not valid:
            log.warning(
                "Dream analysis of entries #%d-#%d was empty or followed no known format; "
                "asking once more", batch[0].cursor, batch[-1].cursor,
            )
            findings, valid, text = await self._analyse(
                provider, batch, staged=True, reverted=reverted
            )
        if not valid:
            if not facts:
                log.warning(
                    "Dream analysis of entries #%d-#%d followed no known format; they hold no "
                    "durable facts, so nothing is lost", batch[0].cursor, batch[-1].cursor,
                )
                return None
            return HeldBatch(
                batch[0].cursor, batch[-1].cursor,
                "the model's analysis was empty or followed no known format (asked twice)",
                tuple(f.text for f in facts),
            )
        result.findings += findings
        rejections = parse_rejections(text)
        for chunk in self._chunks(findings):
            rejections += parse_rejections(await self._edit(provider, chunk, reverted=reverted))
        outcomes = self._account(facts, before, rejections, reverted)
        missing = unaccounted(outcomes)
        if missing:
            log.info("Dream: %d fact(s) of entries #%d-#%d not accounted for; one more edit round",
                     len(missing), batch[0].cursor, batch[-1].cursor)
            for part in self._chunks(missing):
                reply = await self._edit(provider, [], missing=part, reverted=reverted)
                rejections += parse_rejections(reply)
            outcomes = self._account(facts, before, rejections, reverted)
            missing = unaccounted(outcomes)
        result.outcomes += outcomes
        if missing:
            return HeldBatch(
                batch[0].cursor, batch[-1].cursor,
                f"{len(missing)} fact(s) not accounted for after a retry: "
                + "; ".join(o.describe() for o in missing[:3]),
                tuple(o.fact.text for o in missing),
            )
        return None

    def _chunks(self, items: Sequence[T]) -> list[Sequence[T]]:
        """Findings (or missing facts) split so one edit conversation, with a tool call and
        result per item, fits the context window."""
        if not items:
            return []
        from hippobot.context.tokens import count_text

        budget = self.budget
        if not budget.enabled:
            return [items]
        cap = max(200, budget.input // 8)
        out: list[Sequence[T]] = []
        current: list[T] = []
        used = 0
        for item in items:
            text = item if isinstance(item, str) else getattr(getattr(item, "fact", None), "text", "")
            cost = count_text(str(text)) + 40  # the finding, its edit call and the result
            if current and used + cost > cap:
                out.append(current)
                current, used = [], 0
            current.append(item)
            used += cost
        out.append(current)
        return out

    def _account(
        self,
        facts: Sequence[Fact],
        before: dict[str, str],
        rejections: list[tuple[str, str]],
        reverted: Sequence[str] = (),
    ) -> list[Outcome]:
        return account(
            facts, before, self._files(self.staged), rejections=rejections, do_not_readd=reverted
        )

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

    def _guide(self, reverted: Sequence[str] = ()) -> str:
        guide = self.guide()[0]
        if reverted:
            shown = list(reverted)[-_LEDGER_SHOWN:]
            guide += (
                "\n\n## Lines the user undid\n"
                "The user reverted these lines from the memory files and no newer conversation "
                "states them again; do not add them back, nor a rewording of them:\n"
            )
            guide += "\n".join(f"- {line.lstrip('-*+ ').strip()}" for line in shown)
        return guide

    def _restore(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            atomic_write_text(self.staged / name, text)

    def _staged_changed(self) -> bool:
        base = self.state / "base"
        return any(
            (self.staged / name).exists()
            and (self.staged / name).read_bytes() != ((base / name).read_bytes() if (base / name).exists() else b"")
            for name in MEMORY_FILES
        )

    def _write_pending_reasons(self, held: list[HeldBatch]) -> None:
        path = self.state / "pending.json"
        try:
            if held:
                when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M")
                atomic_write_text(path, json.dumps({"time": when, "held": [h.to_dict() for h in held]}, ensure_ascii=False))
            else:
                path.unlink(missing_ok=True)
        except (OSError, StorageError) as exc:  # derived state: never fail a run over it
            log.debug("could not record why entries stay pending: %s", exc)

    def _provider(self) -> Provider:
        return self.model.provider

    def _model(self) -> str:
        return self.config.model_override or self.model.name

    def _files(self, root: Path) -> dict[str, str]:
        return {name: _read(root / name, root).decode("utf-8", "replace") for name in MEMORY_FILES}

    @staticmethod
    def _show(text: str) -> str:
        text = text.strip()
        if not text:
            return "(empty)"
        return text if len(text) <= _FILE_CAP else text[:_FILE_CAP] + "\n...[truncated]"

    async def _analyse(
        self,
        provider: Provider,
        batch: Sequence[HistoryEntry],
        *,
        staged: bool,
        reverted: Sequence[str] = (),
    ) -> tuple[list[str], bool, str]:
        """Phase 1: (findings, whether the answer followed the format, the answer)."""
        files = self._files(self.staged if staged else self.workspace)
        history = "\n".join(
            f"[#{e.cursor} {e.timestamp}] {e.content[:_ENTRY_CAP]}" for e in batch
        )
        prompt = render(
            "dream_phase1.md", guide=self._guide(reverted), soul=self._show(files["SOUL.md"]),
            user=self._show(files["USER.md"]), memory=self._show(files["memory/MEMORY.md"]),
            first=batch[0].cursor, last=batch[-1].cursor, history=history,
        )
        request = ChatRequest(
            model=self._model(), messages=[{"role": "user", "content": prompt}],
            max_tokens=min(4096, self.model.max_tokens),
            temperature=self.model.temperature,
        )
        response = await collect(provider.stream(request))
        findings, valid = parse_findings(response.text)
        return findings, valid, response.text

    def _honour_reverts(self, entries: Sequence[HistoryEntry]) -> list[str]:
        """Take back out of the staged files each line the user reverted that this run added
        again, unless one of ``entries`` newer than the undo states it again."""
        ledger = RevertLedger(self.workspace).read()
        if not ledger:
            return []
        withheld: list[str] = []
        for name in MEMORY_FILES:
            staged, base = self.staged / name, self.state / "base" / name
            if not staged.exists():
                continue
            new = staged.read_text(encoding="utf-8", errors="replace")
            old = base.read_text(encoding="utf-8", errors="replace") if base.exists() else ""
            before = set(content_lines(old))
            drop = set()
            for line in content_lines(new):
                if line in before:
                    continue
                hit = RevertLedger.matching(ledger, line)
                if hit is None or any(
                    e.cursor > hit.after_cursor and restates(e.content, hit.text) for e in entries
                ):
                    continue
                drop.add(line)
                withheld.append(f"{name}: {line.strip()}")
                log.info("Dream re-added %r, which the user reverted; leaving it out", line)
            if drop:
                kept = [ln for ln in new.splitlines(keepends=True) if ln.rstrip("\r\n").rstrip() not in drop]
                atomic_write_text(staged, "".join(kept))
        return withheld

    async def _edit(
        self,
        provider: Provider,
        findings: Sequence[str],
        *,
        missing: Sequence[Outcome] = (),
        reverted: Sequence[str] = (),
    ) -> str:
        """Phase 2: apply ``findings`` to the staged files; returns the model's last answer.

        With ``missing``, a retry: the facts the accounting could not find are listed, and
        the model adds them or declines each with ``[SKIP] "<fact>" — reason``.
        """
        from hippobot.tools.base import ToolRegistry
        from hippobot.tools.files import file_tools
        from hippobot.tools.paths import PathPolicy

        allowed = {(self.staged / name).resolve() for name in MEMORY_FILES}
        policy = PathPolicy(self.staged, allowed_files=allowed)
        registry = ToolRegistry()
        registry.extend(t for t in file_tools(policy) if t.name in ("read_file", "edit_file"))
        files = self._files(self.staged)
        listed = "\n".join(findings) or "(none)"
        if missing:
            listed += (
                "\n\nNot accounted for yet: no memory file states these facts from the history "
                "(or a file still states the value a correction replaced). Add or fix each where "
                "it belongs; to decline one, answer with a line [SKIP] \"<fact>\" — <reason>.\n"
                + "\n".join(
                    f"- {o.fact.text}" + (f" (still stated at {o.where})" if o.status == "stale" else "")
                    for o in missing
                )
            )
        prompt = render(
            "dream_phase2.md", guide=self._guide(reverted), findings=listed,
            soul=self._show(files["SOUL.md"]), user=self._show(files["USER.md"]),
            memory=self._show(files["memory/MEMORY.md"]),
        )
        runner = Runner(
            provider=provider, model=self._model(), tools=registry,
            max_iterations=self.config.max_iterations,
            max_tokens=min(4096, self.model.max_tokens),
            temperature=self.model.temperature,
        )

        async def keep(msg: Message) -> Message:
            return msg  # Dream's own conversation is not a user session

        result = await runner.run([{"role": "user", "content": prompt}], keep)
        if not result.tool_calls and self._files(self.staged) == files:  # text path (dream_text.py)
            from hippobot.lifecycle.dream_text import apply_text_edits

            applied = await asyncio.to_thread(apply_text_edits, self.staged, findings, result.reply)
            log.info("Dream applied %d edit(s) from text: %s", len(applied), "; ".join(applied))
        if result.stopped:
            log.warning(
                "Dream edit phase hit its limit of %d tool steps (agents.defaults.dream."
                "maxIterations); keeping the edits made so far", self.config.max_iterations,
            )
        return result.reply or ""

    # --- staging and the commit point ---------------------------------------------------

    def _stage_or_fail(self) -> None:
        """:meth:`_stage`, with a full or read-only disk reported as one clear line."""
        try:
            self._stage()
        except OSError as exc:
            shutil.rmtree(self.staged, ignore_errors=True)
            why = exc.args[0][0][2] if isinstance(exc, shutil.Error) and exc.args[0] else exc
            raise StorageError(
                f"Dream could not prepare its working copies under {self.state} ({why}); "
                "nothing was changed and the entries stay pending"
            ) from exc

    def _stage(self) -> None:
        shutil.rmtree(self.staged, ignore_errors=True)
        for name in MEMORY_FILES:
            src, dst = self.workspace / name, self.staged / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(_read(src, self.workspace))  # a link out is staged as empty
        base = self.state / "base"
        shutil.rmtree(base, ignore_errors=True)
        shutil.copytree(self.staged, base)

    def _apply(self, cursor: int, accounting: str = "") -> tuple[tuple[str, ...], str | None]:
        manifest = {
            "cursor": cursor,
            "time": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M"),
            "accounting": accounting,
        }
        atomic_write_text(self.manifest, json.dumps(manifest))  # the commit point
        return self.recover()

    def recover(self) -> tuple[tuple[str, ...], str | None]:
        """Roll a committed-but-unapplied run forward (idempotent); returns changed files, sha.

        Blocking (file and git work): call it from a worker thread. It holds the memory
        files' locks throughout, so an ``edit_file`` in a chat or a restore never lands
        between reading a live file and replacing it with the merge.
        """
        if not self.manifest.exists():
            shutil.rmtree(self.staged, ignore_errors=True)
            return (), None
        with self.paths.memory_files_lock():
            return self._recover_locked()

    def _recover_locked(self) -> tuple[tuple[str, ...], str | None]:
        try:
            manifest = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            shutil.rmtree(self.staged, ignore_errors=True)
            return (), None
        from hippobot.memory.gitstore import merge3

        git = self.git
        if not git.initialized:
            git.init()  # versions are always on: the first Dream starts the history
        if git.available and git.initialized:
            git.commit("manual: edits before dream")  # keep the user's edits out of Dream's commit
        changed: list[str] = []
        for name in MEMORY_FILES:
            staged = self.staged / name
            if not staged.exists():
                continue
            new = staged.read_text(encoding="utf-8", errors="replace")
            base_path = self.state / "base" / name
            base = base_path.read_text(encoding="utf-8", errors="replace") if base_path.exists() else new
            live_path = self.workspace / name
            live = _read(live_path, self.workspace).decode("utf-8", "replace")
            if new == base:
                continue  # Dream did not touch it: leave the live file (and any user edit) alone
            merged = merge3(base, live, new) if live != base else new
            if merged is None:
                log.warning("%s changed during Dream and the edits overlap; keeping your version", name)
                continue
            if merged != live:
                atomic_write_text(live_path, merged)
                changed.append(name)
        self.memory.set_dream_cursor(int(manifest["cursor"]))
        sha = None
        if git.available and git.initialized:
            from hippobot.memory.gitstore import dream_message

            summary = git.diff_summary()
            # The cursor moves on every run; only content edits count (and make a commit).
            edits = tuple(f for f in summary.files if f.path in MEMORY_FILES)
            if edits:
                message = dream_message(manifest.get("time", ""), replace(summary, files=edits))
                if manifest.get("accounting"):
                    message += "\n\nAccounting:\n" + str(manifest["accounting"])
                sha = git.commit(message)
        self.manifest.unlink(missing_ok=True)
        shutil.rmtree(self.staged, ignore_errors=True)
        shutil.rmtree(self.state / "base", ignore_errors=True)
        try:
            self.memory.archive_processed()
        except StorageError as exc:  # the archive stays as it is; the next run tries again
            log.warning("could not move processed history entries to the archive: %s", exc)
        return tuple(changed), sha


def _read(path: Path, within: Path) -> bytes:
    """A file Dream reads (memory file, guide): b"" when missing or unreadable, and when it is
    a link out of the workspace or not a regular file (:mod:`hippobot.safeio`): what such a
    link points at never reaches the model."""
    try:
        return read_regular(path, within=within)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        log.warning("Dream does not read %s: %s", path, exc.strerror or exc)
        return b""


def dream_prompt_command(dream: Dream, arg: str) -> str:
    """``/dream-prompt`` shows the guide in effect; ``/dream-prompt init`` makes it editable."""
    path = dream.paths.dream_guide
    if arg == "init":
        if _read(path, dream.workspace).strip():
            return f"{path} already has your guide; edit it directly."
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, load("dream_guide.md"))  # replaces a link, never writes through
        return f"Wrote the default Dream guide to {path}; edit it to change what Dream keeps."
    if arg:
        return "Usage: /dream-prompt (show the guide) or /dream-prompt init (create prompts/dream.md)"
    text, custom = dream.guide()
    origin = f"custom guide from {path}" if custom else "built-in guide (run /dream-prompt init to customise)"
    return f"Dream guide in effect: {origin}\n\n{text}"
