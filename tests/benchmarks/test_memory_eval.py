"""The memory evaluation's quick scripted case, and how it copes with a bad endpoint."""

from __future__ import annotations

import json
import socket

from benchmarks.memory_eval import STAGES, EvalOptions, main, oracle, run_eval
from benchmarks.memory_eval_scenarios import SCENARIOS

from hippobot.testing import ScriptedModel, ScriptedServer


def test_the_core_scenario_keeps_every_fact_with_a_perfect_model(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["--scenario", "core", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    (core,) = data["scenarios"]
    assert core["answered"] == core["facts_total"] == len(SCENARIOS["core"].facts)
    for fact in core["facts"]:
        # Archived, written to the memory files by Dream, and so in a fresh session's prompt.
        assert fact["archived"] and fact["in_files"] and fact["visible_in_prompt"], fact
        assert not fact["stale_in_files"], fact
    assert "stay pending" not in core["dream"] and "updated USER.md" in core["dream"]
    stages = core["stages"]
    assert set(stages) == set(STAGES)
    assert stages["turns"]["requests"] == sum(len(s.messages) for s in SCENARIOS["core"].sessions)
    assert stages["consolidation"]["requests"] == len(SCENARIOS["core"].sessions)
    assert stages["dream"]["requests"] >= 1 and stages["questions"]["requests"] == core["facts_total"]
    assert all(s["prompt_tokens"] > 0 for s in stages.values())
    table = capsys.readouterr().out
    assert "scenario core: 6/6 answered" in table and "consolidation" in table


def test_an_endpoint_that_is_down_is_recorded_per_case(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "down.json"
    code = main([
        "--endpoint", f"http://127.0.0.1:{port}/v1", "--model", "m", "--attempts", "1",
        "--scenario", "projects", "--out", str(out),
    ])
    assert code == 1
    (scn,) = json.loads(out.read_text())["scenarios"]
    stages = {f["stage"] for f in scn["failures"]}
    assert {"turns", "questions"} <= stages
    assert len([f for f in scn["failures"] if f["stage"] == "questions"]) == scn["facts_total"]
    assert all("EndpointUnreachable" in f["error"] or "Unreachable" in f["error"] for f in scn["failures"] if f["stage"] == "turns")
    assert scn["answered"] == 0 and scn["stages"]["turns"]["failed_requests"] > 0


async def test_a_slow_or_malformed_answer_fails_one_case_and_the_run_goes_on(tmp_path):
    model = ScriptedModel()
    model.fallback = oracle(SCENARIOS["core"])
    model.hang(3)  # first message: no answer within the 1 s timeout
    model.malformed()  # second message: a body that is not JSON
    model.reply_tool_call("read_file", "{not json")  # third: broken tool arguments, fed back
    with ScriptedServer(model) as server:
        opts = EvalOptions(
            target="endpoint", endpoint=server.base_url, model="scripted-model", scenarios=("core",),
            timeout=1.0, attempts=1,
        )
        (result,) = await run_eval(opts)
    cases = [(f["stage"], f["case"]) for f in result.failures]
    assert cases == [("turns", "session 1 message 1"), ("turns", "session 1 message 2")]
    assert "Timeout" in result.failures[0]["error"] and "Malformed" in result.failures[1]["error"]
    assert result.dream.startswith("Dream processed")
    assert len(result.facts) == len(SCENARIOS["core"].facts)
    # A failed turn still keeps the user's message, so even the name and the job (said in the
    # two failed turns) were archived and are answered in the end: nothing was lost.
    assert all(f.answered for f in result.facts), result.facts


def test_a_spent_time_budget_reports_the_cases_not_reached(tmp_path):
    out = tmp_path / "budget.json"
    assert main(["--scenario", "mini", "--budget-s", "0", "--out", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["meta"]["complete"] is True
    (mini,) = data["scenarios"]
    assert {f["error"] for f in mini["failures"]} == {"not reached: --budget-s spent"}
    assert [f["stage"] for f in mini["failures"]].count("questions") == mini["facts_total"]
    assert mini["stages"]["turns"]["requests"] == 0
