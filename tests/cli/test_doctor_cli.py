"""``hippobot doctor`` as a user runs it: one line per check, the exit status, --json."""

from __future__ import annotations

import json
import socket

from hippobot.testing.cli import run_cli


def test_doctor_prints_one_line_per_check_and_exits_0_when_nothing_fails(hippobot_home, scripted_server, scripted_model):
    scripted_model.serve_like("llama.cpp", n_ctx=128_000)
    scripted_model.reply_tool_call("get_weather", {"city": "Paris"}).reply("1 2 3 4")

    out = run_cli(["doctor"], hippobot_home, scripted_server)

    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    names = [line[6:].split()[0] for line in lines]
    assert names == ["config", "endpoint", "model", "window", "tool", "speed", "sandbox", "embeddings",
                     "versions", "disk"]
    assert all(line[:4] in ("ok  ", "warn", "skip") for line in lines)
    assert "FAIL" not in out.stdout and out.stderr == ""


def test_doctor_json_and_a_failing_check_exit_1(hippobot_home, scripted_model):
    # The port stays bound (never listening) through both runs: connecting is refused, and no
    # server another test starts meanwhile can take it (which once made the endpoint "ok").
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        out = run_cli(["doctor", "--json"], hippobot_home, HIPPOBOT_MODEL="m",
                      HIPPOBOT_API_BASE=f"http://127.0.0.1:{port}/v1")
        text = run_cli(["doctor"], hippobot_home, HIPPOBOT_MODEL="m",
                       HIPPOBOT_API_BASE=f"http://127.0.0.1:{port}/v1")

    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert report["ok"] is False
    endpoint = next(c for c in report["checks"] if c["name"] == "endpoint")
    assert endpoint["status"] == "fail" and "connection refused" in endpoint["detail"] and endpoint["fix"]
    assert text.returncode == 1
    assert "FAIL  endpoint" in text.stdout and "; fix: start the server" in text.stdout
    assert text.stderr == "error: 1 check(s) failed; the fix is on each FAIL line\n"


def test_doctor_reports_a_broken_config_instead_of_stopping(hippobot_home):
    (hippobot_home / "config.json").write_text('{"agents": {"defaults": {"maxTokens": "lots"}}}')
    out = run_cli(["doctor"], hippobot_home)
    assert out.returncode == 1
    first = out.stdout.splitlines()[0]
    assert first.startswith("FAIL  config") and "maxTokens" in first and "fix:" in first
