"""SPEC 5: "Restart, crash or kill at any instant: every turn that was fully written is there;
no file is left unparseable; no memory file is half-written."

Workers chat (with and without tools), consolidate in the background, start fresh sessions
and run Dream against the workspace model, and are killed with SIGKILL at random instants.
After every kill the files are checked (:func:`check_workspace`); the next worker is the
"next start", which must work without repair; after the last kill a settling run must bring
memory up to date. The seed is fixed, so a failure replays; set RELIABILITY_SEED to explore.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .harness import Findings, check_workspace, read_journal

SEED = int(os.environ.get("RELIABILITY_SEED", "20260403"))
WORKSPACES = int(os.environ.get("RELIABILITY_WORKSPACES", "10"))
KILLS_PER_WORKSPACE = 20
CONCURRENT_WORKSPACES = 4
KEYS = ["cli:direct", "telegram:ada/42"]


def _where(journal: list[dict], name: str, run: int) -> str:
    """What the worker was doing when it died: the last thing it journalled in that run."""
    mine = [r for r in journal if r.get("who") == name]
    starts = [i for i, r in enumerate(mine) if r["op"] == "start" and r.get("run") == run]
    if not starts:
        return "starting (before its first line)"
    last = mine[-1]
    if last["op"] == "start":
        return "starting" if last["state"] == "start" else "between operations"
    return f"in {last['op']}" if last["state"] == "start" else "between operations"


def _stderr(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _kill_repeatedly(zygote, server, home: Path, name: str) -> tuple[Counter[str], Findings]:
    """One workspace: KILLS_PER_WORKSPACE workers killed at random instants, each followed
    by a check of the files, then the settling start. Returns where the kills landed."""
    rng = random.Random(f"{SEED}-{name}")
    where: Counter[str] = Counter()
    workspace = home / "workspace"
    err = home / "worker.err"
    for run in range(KILLS_PER_WORKSPACE):
        pid = zygote.spawn(mode="chaos", home=str(home), base_url=server.base_url, seed=SEED,
                           name=name, run=run, keys=KEYS, stderr=str(err))
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(pid, signal.SIGKILL)
        status = zygote.wait(pid)
        assert status["signal"] == signal.SIGKILL, (
            f"worker {name} run {run} ended by itself ({status}):\n{_stderr(err)}"
        )
        journal = read_journal(home)
        where[_where(journal, name, run)] += 1
        found = check_workspace(workspace, journal)
        assert not found.problems, (
            f"after kill {run} of {name} (seed {SEED}):\n" + "\n".join(found.problems)
        )
    pid = zygote.spawn(mode="settle", home=str(home), base_url=server.base_url, seed=SEED,
                       name=name, run="settle", keys=KEYS, stderr=str(err))
    status = zygote.wait(pid)
    assert status["code"] == 0, f"the start after the last kill failed:\n{_stderr(err)}"
    found = check_workspace(workspace, read_journal(home), settled=True)
    assert not found.problems, f"after settling {name}:\n" + "\n".join(found.problems)
    return where, found


def test_kill_at_random_instants_loses_nothing(zygote, workspace_model, make_home):
    model, server = workspace_model
    homes = {f"w{w}": make_home(f"w{w}") for w in range(WORKSPACES)}
    # Workspaces are independent, so several are killed at once: the kills are as many and
    # as random, the waiting between them overlaps.
    with ThreadPoolExecutor(CONCURRENT_WORKSPACES) as pool:
        runs = [pool.submit(_kill_repeatedly, zygote, server, home, name)
                for name, home in homes.items()]
        results = [run.result() for run in runs]
    where: Counter[str] = sum((w for w, _ in results), Counter())
    kills = sum(where.values())
    turns = sum(found.completed_turns for _, found in results)
    entries = sum(found.history_entries for _, found in results)
    facts = sum(found.facts for _, found in results)
    assert not model.violations, "illegal requests reached the model:\n" + "\n".join(
        model.violations[:20]
    )
    assert kills == WORKSPACES * KILLS_PER_WORKSPACE
    # The kills must have hit real work, not only start-up.
    assert where["in turn"] >= kills // 4, where
    assert model.kinds["consolidate"] > 0 and model.kinds["dream-edit"] > 0, model.kinds
    print(
        f"\n[reliability] {kills} SIGKILLs (seed {SEED}); where: {dict(where)}; "
        f"{turns} completed turns kept; {entries} history entries; {facts} facts applied; "
        f"model calls: {dict(model.kinds)}"
    )
