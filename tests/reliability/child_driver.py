"""Child processes of the reliability suite: workers that chat, consolidate and dream.

Workers are forked from a :class:`hippobot.testing.forkserver.ForkServer` (see the
reliability conftest): importing hippobot and the provider SDKs takes far longer than the
instants we want to kill a worker at, so the server runs :func:`warm_up` once and then
forks a worker per request that runs :func:`worker`. ``python child_driver.py ARGS_JSON``
runs one worker in the foreground.

A worker appends what it does to a *journal* (``journal.jsonl`` in its home, one
``os.write`` per line, so a kill never tears a line): ``start`` before an operation and
``done`` after it returned. A ``done`` line is the test's proof that the operation
completed before the kill. Workers talk to the scripted model served by the test process.

Modes: ``chaos`` (random turns, tool turns, /new and Dream runs until killed), ``settle``
(a few turns, then Dream until nothing is pending: the "next start" after the last kill),
``chat`` and ``dream`` (the concurrency test: fixed turns, or Dream runs until a stop file
appears).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "FACT_END",
    "MEMORY_SEED",
    "TOOLS_FLAG",
    "Journal",
    "marker",
    "worker",
    "write_config",
]

TOOLS_FLAG = "[use tools]"
FACT_END = "<!-- end of dream facts -->"
MEMORY_SEED = "# Long-term Memory\n\n## Dream facts\n" + FACT_END + "\n"
API_KEY = "sk-reliability-0123456789abcdef"  # looks like a key on purpose: it must never be stored

_FILLER = "We talked about the allotment, compost heaps, tomato blight and rain barrels. "


def marker(name: str) -> str:
    """The unique tag a turn carries in its text, so a check can find that exact turn."""
    return f"<<M:{name}>>"


def write_config(home: Path, **defaults: Any) -> None:
    """A config.json with a small context window, so consolidation happens every few turns."""
    agent_defaults: dict[str, Any] = {
        "contextWindowTokens": 6000,
        "maxTokens": 500,
        "maxToolIterations": 6,
        "dream": {"batchSize": 3, "maxIterations": 4},
    }
    agent_defaults.update(defaults)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(json.dumps({"agents": {"defaults": agent_defaults}}))


class Journal:
    """Append-only record of what a worker did; one write per line."""

    def __init__(self, path: Path, who: str) -> None:
        self.who = who
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, **record: Any) -> None:
        record["who"] = self.who
        record["t"] = round(time.time(), 4)
        os.write(self._fd, (json.dumps(record, ensure_ascii=False) + "\n").encode())


def _text(rng: random.Random, tag: str, *, tools: bool) -> str:
    parts = [tag]
    if rng.random() < 0.6:
        parts.append(f"FACT: the user noted {tag}")
    if tools:
        parts.append(TOOLS_FLAG)
    parts.append(_FILLER * rng.randint(5, 12))
    return "\n".join(parts)


async def _turn(agent: Any, journal: Journal, rng: random.Random, key: str, tag: str,
                *, tools: bool) -> None:
    journal.write(op="turn", state="start", key=key, marker=tag)
    result = await agent.turn(key, _text(rng, tag, tools=tools))
    journal.write(op="turn", state="done", key=key, marker=tag, reply=result.reply)


async def _dream(agent: Any, journal: Journal) -> str:
    journal.write(op="dream", state="start")
    result = await agent.dream.run()
    journal.write(op="dream", state="done", status=result.status,
                  cursor=agent.memory.dream_cursor(), error=result.error)
    return result.status


async def _chaos(agent: Any, journal: Journal, rng: random.Random, args: dict[str, Any]) -> None:
    keys = args["keys"]
    for n in range(args.get("ops", 10_000)):
        tag = marker(f"{args['name']}-r{args['run']}-n{n}")
        kind = rng.choices(["chat", "tools", "dream", "new"], weights=[60, 25, 12, 3])[0]
        key = rng.choice(keys)
        if kind in ("chat", "tools"):
            await _turn(agent, journal, rng, key, tag, tools=kind == "tools")
            if rng.random() < 0.5:
                await agent.jobs.drain()  # otherwise consolidation overlaps the next turn
        elif kind == "dream":
            await agent.jobs.drain()
            await _dream(agent, journal)
        else:
            journal.write(op="new", state="start", key=key)
            from hippobot.agent.api import Api

            reply = (await Api.for_agent(agent).handle(key, "/new")).reply
            journal.write(op="new", state="done", key=key, reply=reply)


async def _settle(agent: Any, journal: Journal, rng: random.Random, args: dict[str, Any]) -> None:
    for i, key in enumerate(args["keys"]):
        await _turn(agent, journal, rng, key, marker(f"{args['name']}-settle-{i}"), tools=i == 0)
    await agent.jobs.drain()
    for _ in range(20):
        if await _dream(agent, journal) == "nothing":
            return
    raise RuntimeError("Dream still had work after 20 runs")


async def _chat(agent: Any, journal: Journal, rng: random.Random, args: dict[str, Any]) -> None:
    for n in range(args["turns"]):
        key = args["keys"][n % len(args["keys"])]
        tag = marker(f"{args['name']}-n{n}")
        await _turn(agent, journal, rng, key, tag, tools=rng.random() < 0.3)
        await agent.jobs.drain()


async def _dreamer(agent: Any, journal: Journal, rng: random.Random, args: dict[str, Any]) -> None:
    import asyncio

    stop = Path(args["stop_file"])
    while not stop.exists():
        await _dream(agent, journal)
        await asyncio.sleep(0.01)
    await _dream(agent, journal)


_MODES = {"chaos": _chaos, "settle": _settle, "chat": _chat, "dream": _dreamer}


def worker(args: dict[str, Any]) -> int:
    """Run one worker to completion (or until it is killed); returns the exit code."""
    import asyncio
    import logging

    from hippobot.agent.agent import Agent
    from hippobot.config import load_settings
    from hippobot.providers.retry import RetryPolicy

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True,
                        format="%(levelname)s %(name)s: %(message)s")
    home = Path(args["home"])
    journal = Journal(home / "journal.jsonl", args["name"])
    journal.write(op="start", state="start", run=args.get("run"))
    env = {
        "HIPPOBOT_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "HIPPOBOT_MODEL": "scripted-model",
        "HIPPOBOT_API_BASE": args["base_url"],
        "HIPPOBOT_API_KEY": API_KEY,
    }
    rng = random.Random(f"{args['seed']}-{args['name']}-{args.get('run')}")

    async def main() -> None:
        agent = Agent(load_settings(env))
        agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
        journal.write(op="start", state="done", run=args.get("run"))
        if args["mode"] in ("chaos", "settle"):
            await agent.consolidator.resume_pending()  # what a long-running process does
        await _MODES[args["mode"]](agent, journal, rng, args)
        await agent.aclose()

    asyncio.run(main())
    return 0


def warm_up() -> None:
    """Run one throwaway worker, so that every lazy import and cache a worker needs is
    loaded before the first fork and a forked worker starts in milliseconds.

    The warm-up's server thread and the event loop's worker threads are all finished
    before this returns: a fork copies only the calling thread.
    """
    import shutil
    import tempfile
    import threading

    from hippobot.cli.onboard import onboard
    from hippobot.config import load_settings
    from hippobot.testing.archivist import archivist
    from hippobot.testing.scripted import ScriptedModel
    from hippobot.testing.server import ScriptedServer

    home = Path(tempfile.mkdtemp(prefix="hippobot-warmup-"))
    try:
        write_config(home)
        onboard(load_settings({"HIPPOBOT_HOME": str(home), "PATH": "/usr/bin:/bin"}))
        model = ScriptedModel()
        model.fallback = archivist
        with ScriptedServer(model) as server:
            worker({"mode": "settle", "home": str(home), "base_url": server.base_url,
                    "seed": 0, "name": "warmup", "keys": ["cli:direct", "cli:other"]})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for _ in range(100):  # the server's handler threads end once their sockets close
        if threading.active_count() == 1:
            return
        time.sleep(0.05)
    raise RuntimeError(f"threads left after the warm-up: {threading.enumerate()}")


if __name__ == "__main__":
    sys.exit(worker(json.loads(sys.argv[1])))
