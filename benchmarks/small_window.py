"""``python -m benchmarks.small_window``: a 4,096-token window, a long chat, planted facts.

A local model behind Ollama gets 4,096 tokens by default. This runs ``--turns`` turns
(50–400 characters each) against the scripted model over HTTP (the real OpenAI SDK), with
nine planted facts and ``--extra-facts`` more (more than Recent History's share holds), a
correction ("moved to Osaka, not Tokyo") and passing remarks, while
consolidation and the auto-Dream check run as in a long-running process. It prints, and
writes as JSON:

* consolidation requests per 100 turns (the goal: at most 25),
* the largest request of any kind against the input budget,
* planted facts reachable in the final prompt (memory files, Recent History or replay),
  and whether the correction is current,
* Dream runs, history entries written, entries left pending.

The scripted model is a diligent archivist and Dream; real models do worse, see
docs/evaluation.md where present.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.report import write_json
from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.context import tokens
from hippobot.lifecycle.autodream import dream_if_due
from hippobot.memory.facts import mentions_old_value
from hippobot.providers.retry import RetryPolicy
from hippobot.testing.archivist import archivist_and_dreamer, is_archive_request, is_dream_request
from hippobot.testing.scripted import ScriptedModel
from hippobot.testing.server import ScriptedServer

__all__ = ["FACTS", "main", "run"]

FACTS = {
    "name is Alice Moreau": "Moreau",
    "has a cat named Luna": "Luna",
    "works at Initech as a nurse": "Initech",
    "favourite colour is teal": "teal",
    "lives in Tokyo": None,
    "drives a Volvo V70": "Volvo",
    "sister Mira lives in Lyon": "Mira",
    "allergic to peanuts": "peanuts",
    "plays the cello on Sundays": "cello",
}


def plan(turns: int, seed: int = 14, extra: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["garden", "compost", "tomato", "rain", "barrel", "basil", "soil", "worm", "spade", "hedge", "shed", "mulch", "seed"]
    texts = []
    for i in range(turns):
        size = rng.randint(50, 400)
        text = " ".join(rng.choice(words) for _ in range(size // 6))[:size]
        if i % 7 == 2:
            text = f"NOTE: today the weather is {rng.choice(['grey', 'sunny', 'windy'])}\n{text}"
        texts.append(text)
    for n, fact in enumerate(FACTS):
        slot = 1 + n * (turns // 3) // len(FACTS)
        texts[slot] = f"FACT: User {fact}\n{texts[slot]}"
    texts[turns // 2] = f"CORRECTION: User moved to Osaka, not Tokyo\n{texts[turns // 2]}"
    for n in range(extra):  # more durable facts than Recent History's share holds: Dream must file them
        slot = (turns // 2 + 1 + n * (turns // 2 - 2) // max(1, extra)) % turns
        texts[slot] = f"FACT: User's locker code at gym Delta{n} is {1000 + 37 * n}\n{texts[slot]}"
    return texts


async def run(turns: int, window: int, max_tokens: int, extra: int = 30) -> dict[str, Any]:
    model = ScriptedModel()
    model.fallback = archivist_and_dreamer
    with tempfile.TemporaryDirectory() as home, ScriptedServer(model) as server:
        settings = load_settings({
            "HIPPOBOT_HOME": home, "HIPPOBOT_MODEL": "scripted-model",
            "HIPPOBOT_API_BASE": server.base_url, "HIPPOBOT_API_KEY": "sk-bench-000000000000",
        }).with_defaults(context_window_tokens=window, max_tokens=max_tokens)
        onboard(settings)
        agent = Agent(settings)
        agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
        dreams = 0
        for text in plan(turns, extra=extra):
            await agent.turn("cli:direct", text)
            await agent.jobs.drain()
            if await dream_if_due(agent.memory, agent.budget.history_tokens, agent.dream.run):
                dreams += 1
        model.fallback = lambda _request: "noted"
        await agent.turn("cli:direct", "What do you know about me?")
        last = model.requests[-1]
        system = str(last.messages[0]["content"])
        prompt = "\n".join(str(m.get("content")) for m in last.messages)
        words = {**FACTS, **{f"locker {n}": f"Delta{n} is {1000 + 37 * n}" for n in range(extra)}}
        reachable = {fact: (word is None or word in prompt) for fact, word in words.items()}
        in_memory = {fact: (word is None or word in system) for fact, word in words.items()}
        stale = [ln for ln in system.splitlines() if mentions_old_value(ln, "Tokyo", "User moved to Osaka")]
        requests = model.requests
        consolidations = sum(is_archive_request(r) for r in requests)
        worst = max(tokens.count_messages(r.messages) + tokens.count_tools(r.tools) for r in requests)
        result = {
            "turns": turns,
            "context_window": window,
            "max_tokens": max_tokens,
            "input_budget": agent.budget.input,
            "consolidation_requests": consolidations,
            "consolidations_per_100_turns": round(100 * consolidations / turns, 1),
            "dream_runs": dreams,
            "dream_requests": sum(is_dream_request(r) for r in requests),
            "largest_request_tokens": worst,
            "over_budget_requests": sum(
                tokens.count_messages(r.messages) + tokens.count_tools(r.tools) > agent.budget.input
                for r in requests
            ),
            "facts_planted": len(words) - 1,
            "facts_reachable": sum(reachable.values()) - 1,
            "facts_in_system_prompt": sum(in_memory.values()) - 1,
            "correction_current": "Osaka" in prompt and not stale,
            "history_entries": agent.memory.last_cursor(),
            "entries_pending": agent.memory.pending_count(),
            "unscripted_calls": len(model.errors),
        }
        await agent.aclose()
        return result


def describe(r: dict[str, Any]) -> str:
    return (
        f"{r['context_window']:,}-token window, {r['turns']} turns: "
        f"{r['consolidations_per_100_turns']} consolidations per 100 turns; "
        f"largest request {r['largest_request_tokens']:,} of {r['input_budget']:,} budget "
        f"({r['over_budget_requests']} over); facts reachable {r['facts_reachable']}/{r['facts_planted']} "
        f"({r['facts_in_system_prompt']} via memory); correction current: {r['correction_current']}; "
        f"{r['dream_runs']} Dream runs, {r['entries_pending']} of {r['history_entries']} entries pending"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.small_window", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--extra-facts", type=int, default=30,
                        help="durable facts beyond the nine (more than Recent History holds)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.turns, args.window, args.max_tokens, args.extra_facts))
    sys.stdout.write(describe(result) + "\n")
    if args.out:
        write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
