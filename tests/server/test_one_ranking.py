"""One ranking everywhere: the model's memory_search, `hippobot memory search` and the memory
page list the same hits in the same order, with the same calibrated scores (the model's tool
without the messages of its own conversation that it has in view)."""

from __future__ import annotations

import json
import re

from hippobot.memory.history import HistorySource
from hippobot.testing.cli import run_cli

from .test_memory_page_search import hit_blocks, search

MEMORY = """# Memory

## Work
- The invoices service runs on PostgreSQL 16
- Backups of the invoices database run nightly
"""
QUERY = "invoices database PostgreSQL backups"


def test_tool_cli_and_page_rank_alike(hippobot_home, scripted_server, scripted_model, serve, make_agent):
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    for i, text in enumerate([
        "- Moved the invoices database to PostgreSQL",
        "- The nightly backups failed twice in March",
        "- Prefers tea in the morning",
    ]):
        agent.memory.append_history(text, session_key="api:ada", source=HistorySource("api:ada", i, i + 1))
    srv = serve(agent=agent)
    scripted_model.reply("Which database do the invoices use?")
    srv.client().chat.completions.create(
        model="hippobot", user="ada",
        messages=[{"role": "user", "content": "Remind me where the invoices database backups go"}],
    )  # fmt: skip

    # The model's tool, in a real turn over HTTP.
    scripted_model.reply_tool_call("memory_search", {"query": QUERY, "k": 5})
    scripted_model.reply("Found them.")
    srv.client().chat.completions.create(
        model="hippobot", user="ada", messages=[{"role": "user", "content": "what do we know?"}]
    )
    tool = next(m for m in scripted_model.requests[-1].messages if m.get("role") == "tool")
    from_tool = re.findall(r"^\[([^\]]+)\]", tool["content"], flags=re.M)

    cli = run_cli(["memory", "search", QUERY, "--json", "--k", "5"], hippobot_home)
    from_cli = [h["citation"] for h in json.loads(cli.stdout)]
    scores = [h["score"] for h in json.loads(cli.stdout)]

    page = search(srv, QUERY).text
    from_page = [re.search(r"<code>([^<]+)</code>", b).group(1) for b in hit_blocks(page)][:5]

    assert len(from_cli) == 5
    assert from_cli == from_page
    # The model's tool leaves out the messages of its own conversation that the request
    # replays (they are in front of it); the rest come in the same order.
    wider = run_cli(["memory", "search", QUERY, "--json", "--k", "12"], hippobot_home)
    not_in_view = [h["citation"] for h in json.loads(wider.stdout) if not h["citation"].startswith("session api:ada#")]
    assert any(c.startswith("session api:ada#") for c in from_cli)  # the case is exercised
    assert from_tool == not_in_view[:5]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert from_cli[0].startswith("memory/MEMORY.md:")  # the curated fact with every word
