"""Run real turns on a prepared workspace and measure each one (one child process per run).

``python -m benchmarks.turns --home DIR --start N0 --turns K --out FILE [--http]
[--dream-every D]`` loads the workspace under ``DIR`` (made by :mod:`benchmarks.workload`),
runs ``K`` turns numbered ``N0 ...`` through :meth:`Agent.turn`, and writes a JSON record.

Per turn:

* ``wall_ms``: :meth:`Agent.turn` from call to return;
* ``overhead_ms``: wall time minus the time spent inside the model's stream and in the
  benchmark's own bookkeeping (:class:`benchmarks.bench_model.TimedProvider`);
* ``written``: bytes the process passed to ``write`` during the turn (``wchar`` in
  ``/proc/self/io``: every file hippobot writes, including locks, history and the recall
  index), and ``session_written``: bytes the session store wrote (its single write path);
* ``grew``: how much the workspace's files grew (sum of sizes, every file), and
  ``session_grew``: how much the session file grew;
* background work scheduled by the turn (consolidation) is awaited *after* the turn and timed
  on its own (``background_ms``), as it runs while the user reads the reply.

A run in its own process makes peak RSS (``ru_maxrss``) and the first turn's cost (loading
the session, the tokenizer, the tool registry) mean what they say.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.bench_model import ReplyState, TimedProvider, make_model
from benchmarks.workload import KEY, Workload, bench_env
from hippobot.agent.agent import Agent
from hippobot.config import load_settings
from hippobot.session import store as session_store

__all__ = ["main", "run"]


def _wchar() -> int | None:
    try:
        with open("/proc/self/io", "rb") as fh:
            for line in fh:
                if line.startswith(b"wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _tree_bytes(root: Path) -> int:
    """Sum of file sizes under ``root``. SQLite's ``-shm`` files are left out: they are
    written through ``mmap``, which ``wchar`` does not see, so counting their size as growth
    would make amplification look better than it is."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith("-shm"):
                continue
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def peak_rss_mb(pid: int | str = "self", field: bytes = b"VmHWM:") -> float | None:
    """``VmHWM`` of a live process: its own peak RSS (``VmRSS``: its current one).
    ``ru_maxrss`` is not used: Linux carries the parent's peak over ``fork``/``exec`` into
    it, so a child spawned by a big parent would report the parent's size."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _rss_mb() -> float:
    peak = peak_rss_mb()
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _GcMeter:
    """Time spent in the cyclic garbage collector (it grows with the objects a process holds)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


class _StoreMeter:
    """Counts the bytes the session store writes (wraps its one write path)."""

    def __init__(self) -> None:
        self.bytes = 0
        original = session_store._write_all

        def counting(fd: int, data: bytes, restore_size: int) -> None:
            self.bytes += len(data)
            original(fd, data, restore_size)

        session_store._write_all = counting


def _provider(args: argparse.Namespace, workload: Workload, workspace: Path,
              servers: list[Any]) -> TimedProvider:
    """The timed scripted model, in-process or (``--http``) behind the real OpenAI adapter."""
    state = ReplyState()
    model = make_model(workload, state)
    if args.http:
        from hippobot.providers.factory import make_provider
        from hippobot.providers.retry import RetryPolicy
        from hippobot.testing.server import ScriptedServer

        server = ScriptedServer(model).start()
        servers.append(server)
        inner = make_provider("openai", api_key="sk-bench-0000000000000000",
                              api_base=server.base_url, retry=RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0))
    else:
        from hippobot.testing.scripted import ScriptedProvider

        inner = ScriptedProvider(model)
    return TimedProvider(inner, model, workload, workspace, state)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(args.home)
    settings = load_settings(bench_env(home))
    workspace = settings.workspace
    workload = Workload(tool_every=args.tool_every)
    rss_start = _rss_mb()
    servers: list[Any] = []
    provider = _provider(args, workload, workspace, servers)
    agent = Agent(settings, provider=provider)
    meter = _StoreMeter()
    gc_meter = _GcMeter()
    session_path = agent.sessions.store.path_for(KEY)
    turns: list[dict[str, Any]] = []
    dreams: list[dict[str, Any]] = []
    rss_first = None
    try:
        for i in range(args.start, args.start + args.turns):
            turns.append(await _one_turn(agent, provider, (meter, gc_meter), workload, i, session_path))
            rss_first = rss_first or peak_rss_mb(field=b"VmRSS:")
            if args.dream_every and (i + 1) % args.dream_every == 0:
                dreams.append(await _dream(agent, provider, i))
        await agent.aclose()
    finally:
        for server in servers:
            server.stop()
    return {
        "start": args.start,
        "turns": turns,
        "dreams": dreams,
        "requests": [asdict(r) for r in provider.records],
        "rss_start_mb": round(rss_start, 1),
        "rss_peak_mb": round(_rss_mb(), 1),
        "rss_after_first_turn_mb": rss_first,
        "rss_end_mb": peak_rss_mb(field=b"VmRSS:"),
        "session_messages": len(agent.sessions.get(KEY).messages),
        "session_bytes": session_path.stat().st_size,
        "http": bool(args.http),
    }


async def _one_turn(agent: Agent, provider: TimedProvider, meters: tuple[_StoreMeter, _GcMeter],
                    workload: Workload, i: int, session_path: Path) -> dict[str, Any]:
    meter, gc_meter = meters
    workspace = agent.workspace
    size0, sess0 = _tree_bytes(workspace), _size(session_path)
    store0, w0 = meter.bytes, _wchar()
    requests0 = len(provider.records)
    gc0 = gc_meter.seconds
    provider.turn = i
    provider.reset_clock()
    t0, c0 = time.perf_counter(), time.process_time()
    await agent.turn(KEY, workload.user_text(i))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    excluded, model_s = provider.excluded_s, provider.model_s
    cpu_overhead = cpu - provider.excluded_cpu_s
    gc_ms = (gc_meter.seconds - gc0) * 1000
    w1 = _wchar()
    provider.reset_clock()
    t1 = time.perf_counter()
    await agent.jobs.drain()
    background = time.perf_counter() - t1
    background_overhead = background - provider.excluded_s
    w2 = _wchar()
    kinds = [r.kind for r in provider.records[requests0:]]
    return {
        "turn": i,
        "wall_ms": wall * 1000,
        "model_ms": model_s * 1000,
        "overhead_ms": (wall - excluded) * 1000,
        "cpu_overhead_ms": cpu_overhead * 1000,
        "gc_ms": gc_ms,
        "replayed": next((r.messages for r in provider.records[requests0:] if r.kind == "turn"), 0),
        "tool": workload.uses_tool(i),
        "background_ms": background * 1000,
        "background_overhead_ms": background_overhead * 1000,
        "consolidations": kinds.count("consolidation"),
        "requests": len(kinds),
        "written": (w1 - w0) if (w0 is not None and w1 is not None) else None,
        "background_written": (w2 - w1) if (w1 is not None and w2 is not None) else None,
        "session_written": meter.bytes - store0,
        "grew": _tree_bytes(workspace) - size0,
        "session_grew": _size(session_path) - sess0,
    }


async def _dream(agent: Agent, provider: TimedProvider, i: int) -> dict[str, Any]:
    requests0 = len(provider.records)
    size0, w0 = _tree_bytes(agent.workspace), _wchar()
    provider.reset_clock()
    t0 = time.perf_counter()
    result = await agent.dream.run()
    wall = time.perf_counter() - t0
    w1 = _wchar()
    records = provider.records[requests0:]
    return {
        "after_turn": i,
        "status": result.status,
        "entries": result.entries,
        "files": list(result.files),
        "wall_ms": wall * 1000,
        "overhead_ms": (wall - provider.excluded_s) * 1000,
        "requests": len(records),
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "written": (w1 - w0) if (w0 is not None and w1 is not None) else None,
        "grew": _tree_bytes(agent.workspace) - size0,
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run measured turns on a prepared workspace.")
    parser.add_argument("--home", required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--dream-every", type=int, default=0)
    parser.add_argument("--tool-every", type=int, default=10)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", help="also write a pyinstrument text profile here")
    args = parser.parse_args(argv)
    if args.profile:
        from pyinstrument import Profiler

        with Profiler(async_mode="enabled", interval=0.0005) as profiler:
            result = asyncio.run(run(args))
        Path(args.profile).write_text(
            profiler.output_text(unicode=True, show_all=False), encoding="utf-8"
        )
    else:
        result = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(result) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
