"""The cost ledger: every model request, per day and kind of job, as `hippobot usage` shows it."""

from __future__ import annotations

import json

import pytest

from hippobot.agent.api import Api
from hippobot.errors import ProviderError
from hippobot.memory.history import HistorySource
from hippobot.providers import ChatRequest, Finish, TextDelta, collect
from hippobot.providers.metering import MeteredProvider, usage_job
from hippobot.providers.retry import RetryPolicy
from hippobot.testing.cli import run_cli
from hippobot.usage_ledger import UsageLedger, UsageRecord, format_table, summarise


async def test_turns_consolidation_and_dream_are_counted_apart(make_agent, scripted_model, hippobot_home):
    agent = make_agent()
    scripted_model.usage(prompt_tokens=1000, cached_tokens=800, completion_tokens=20).reply("Hi!")
    await agent.turn("cli:direct", "hello")
    scripted_model.usage(prompt_tokens=1100, completion_tokens=10).reply("- [ephemeral] said hello")
    await Api.for_agent(agent).handle("cli:direct", "/new")
    await agent.aclose()  # the archiving runs in the background; wait for it
    agent.memory.append_history("- [ephemeral] it rained", session_key="cli:direct", source=HistorySource("cli:direct", 0, 2))
    scripted_model.reply("[SKIP] nothing new")
    await agent.dream.run()

    rows = {r.job: r for r in summarise(UsageLedger.for_workspace(agent.workspace).read())}
    assert set(rows) == {"turn", "consolidation", "dream"}
    assert (rows["turn"].requests, rows["turn"].prompt_tokens, rows["turn"].cached_tokens) == (1, 1000, 800)
    assert rows["turn"].uncached_tokens == 200
    assert (rows["consolidation"].requests, rows["consolidation"].prompt_tokens) == (1, 1100)
    assert rows["dream"].requests == 1

    done = run_cli(["usage", "--json"], hippobot_home)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {r["job"]: r["requests"] for r in data["rows"]} == {"turn": 1, "consolidation": 1, "dream": 1}
    table = run_cli(["usage"], hippobot_home).stdout
    assert "consolidation" in table and "total" in table

    assert "dream" in (await Api.for_agent(agent).handle("cli:direct", "/usage")).reply


async def test_a_failed_request_is_recorded_as_failed(make_agent, scripted_model):
    agent = make_agent()
    agent.retry_policy = RetryPolicy(max_attempts=1)
    scripted_model.fail(400)
    with pytest.raises(ProviderError):
        await agent.turn("cli:direct", "hello")
    await agent.aclose()
    (row,) = summarise(UsageLedger.for_workspace(agent.workspace).read())
    assert (row.requests, row.failed, row.prompt_tokens) == (1, 1, 0)


def test_empty_or_torn_ledger_lines_are_skipped(tmp_path, hippobot_home):
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    assert format_table(summarise(ledger.read())).startswith("No model requests recorded yet")
    ledger.record(UsageRecord("turn", "p", "m", prompt_tokens=5, time="2026-11-30T10:00:00+00:00"))
    ledger.record(UsageRecord("dream", "p", "m", prompt_tokens=7, time="2026-12-01T10:00:00+00:00"))
    with ledger.path.open("a") as f:
        f.write('{"v": 1, "job": "tu')  # a crash mid-write
    rows = summarise(ledger.read())
    assert [(r.day, r.job, r.prompt_tokens) for r in rows] == [("2026-12-01", "dream", 7), ("2026-11-30", "turn", 5)]
    assert [r.day for r in summarise(ledger.read(), days=1)] == ["2026-12-01"]
    done = run_cli(["usage"], hippobot_home)
    assert done.returncode == 0 and "No model requests recorded yet" in done.stdout


class _SilentEndpoint:
    """An endpoint that streams a reply but reports no usage (llama.cpp's server does this)."""

    name = "local"

    async def stream(self, request):
        yield TextDelta("Luna is your cat.")
        yield Finish()


async def test_an_endpoint_without_usage_is_counted_by_estimate(tmp_path):
    ledger = UsageLedger(tmp_path / "usage.jsonl")
    provider = MeteredProvider(_SilentEndpoint(), ledger, estimate=lambda request: 321)
    with usage_job("dream"):
        await collect(provider.stream(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])))
    (rec,) = ledger.read()
    assert (rec.job, rec.prompt_tokens, rec.completion_tokens, rec.reported) == ("dream", 321, 5, False)
    assert "estimates" in format_table(summarise([rec]))
