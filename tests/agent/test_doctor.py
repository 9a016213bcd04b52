"""``hippobot doctor``'s checks against the scripted model served over HTTP: what each
finds, and the fix each failure names."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from hippobot.agent.doctor import run_doctor
from hippobot.config import load_settings

WEATHER_AS_TEXT = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'


def settings_for(home: Path, base_url: str, *, provider: str = "llamacpp", **defaults):
    config = {
        "agents": {"defaults": {"model": "scripted-model", "provider": provider,
                                "contextWindowTokens": 8192, **defaults}},
        "providers": {provider: {"apiBase": base_url}},
    }
    (home / "config.json").write_text(json.dumps(config))
    return load_settings({"HIPPOBOT_HOME": str(home), "PATH": "/usr/bin:/bin"})


def statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


async def test_a_healthy_local_server_passes_every_check(hippobot_home, scripted_server, scripted_model):
    scripted_model.serve_like("llama.cpp", n_ctx=8192)
    scripted_model.reply_tool_call("get_weather", {"city": "Paris"}).reply("1 2 3 4 5 6 7 8")
    seen = []
    settings = settings_for(hippobot_home, scripted_server.base_url)
    before = sorted(p.as_posix() for p in hippobot_home.rglob("*"))

    report = await run_doctor(settings, on_check=seen.append)

    assert sorted(p.as_posix() for p in hippobot_home.rglob("*")) == before  # it wrote nothing
    assert report.ok and [c.name for c in seen] == [c.name for c in report.checks]
    assert [c.name for c in report.checks] == [
        "config", "endpoint", "model", "window", "tool calls", "speed", "sandbox", "embeddings",
        "versions", "disk",
    ]
    found = statuses(report)
    assert all(found[n] == "ok" for n in ("config", "endpoint", "model", "window", "tool calls", "speed"))
    assert "fits the server's 8,192 (llama.cpp /props n_ctx)" in report.check("window").detail
    assert report.check("tool calls").data["mode"] == "structured"
    speed = report.check("speed").data
    assert speed["prompt_tokens_per_s"] > 0 and speed["completion_tokens"] > 0
    assert 0 < speed["fixed_prompt_tokens"] < 733  # an 8k window: the compact prompt
    assert found["embeddings"] == "skip"
    probe = scripted_model.requests[0]
    assert [t["function"]["name"] for t in probe.tools] == ["get_weather"]
    assert scripted_model.requests[1].tools == []
    assert all(len(c.line().splitlines()) == 1 for c in report.checks)


@pytest.mark.parametrize(("kind", "provider", "source"), [
    ("llama.cpp", "llamacpp", "llama.cpp /props n_ctx"),
    ("vllm", "vllm", "vLLM max_model_len"),
    ("ollama", "ollama", "Ollama num_ctx"),
])
async def test_a_window_larger_than_the_servers_context_fails_with_the_value_that_works(
    hippobot_home, scripted_server, scripted_model, kind, provider, source
):
    scripted_model.serve_like(kind, n_ctx=4096)
    scripted_model.reply_tool_call("get_weather", {"city": "Paris"}).reply("1 2 3")

    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url, provider=provider))

    window = report.check("window")
    assert window.status == "fail" and not report.ok
    assert f"the server's context is 4,096 ({source})" in window.detail
    assert "set agents.defaults.contextWindowTokens to 4096" in window.fix


async def test_ollama_without_num_ctx_warns_about_its_default_context(hippobot_home, scripted_server, scripted_model):
    scripted_model.serve_like("ollama", n_ctx=None, model_max=32768)
    scripted_model.reply_tool_call("get_weather", {"city": "Paris"}).reply("1 2 3")

    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url, provider="ollama"))

    window = report.check("window")
    assert window.status == "warn" and report.ok
    assert "the model supports 32,768" in window.detail and "num_ctx 8192" in window.fix


async def test_a_server_that_does_not_say_its_context_is_skipped_not_failed(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply(WEATHER_AS_TEXT).reply("1 2 3")  # llama-cpp-python: no /props

    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url))

    assert report.check("window").status == "skip" and "--n_ctx" in report.check("window").detail
    tools = report.check("tool calls")
    assert tools.status == "ok" and "written as text" in tools.detail and tools.data["mode"] == "text"
    assert report.ok


async def test_tool_calls_written_as_text_fail_when_hippobot_would_not_recover_them(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.reply(WEATHER_AS_TEXT).reply("1 2 3")

    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url, textToolCalls="off"))

    tools = report.check("tool calls")
    assert tools.status == "fail" and 'textToolCalls to "on"' in tools.fix


async def test_a_model_that_ignores_the_tool_is_a_warning(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("It is sunny in Paris.").reply("1 2 3")
    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url))
    assert report.check("tool calls").status == "warn" and report.ok


async def test_a_server_that_is_down_fails_at_once_and_skips_the_model_checks(hippobot_home):
    with socket.socket() as probe:  # a port nothing listens on, held so no other test takes it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        report = await run_doctor(settings_for(hippobot_home, f"http://127.0.0.1:{port}/v1"))

    endpoint = report.check("endpoint")
    assert endpoint.status == "fail" and not report.ok
    assert f"cannot reach http://127.0.0.1:{port}/v1/models (connection refused)" in endpoint.detail
    assert "providers.llamacpp.apiBase" in endpoint.fix
    assert [report.check(n).status for n in ("model", "window", "tool calls", "speed")] == ["skip"] * 4
    assert report.check("disk").status == "ok"  # the machine's checks still ran


async def test_a_model_the_server_does_not_list_fails(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply_tool_call("get_weather", {"city": "Paris"}).reply("1 2 3")
    settings = settings_for(hippobot_home, scripted_server.base_url, model="qwen-typo")

    report = await run_doctor(settings)

    model = report.check("model")
    assert model.status == "fail" and "qwen-typo is not among the 1 model(s)" in model.detail
    assert "scripted-model" in model.detail and "agents.defaults.model" in model.fix


async def test_a_model_request_that_gets_no_answer_says_what_it_waited_for(hippobot_home, scripted_server, scripted_model):
    scripted_model.hang(10)

    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url), probe_timeout=0.5)

    tools = report.check("tool calls")
    assert tools.status == "warn"
    assert tools.detail == "no answer within 0.5 s (waited for the reply to a request offering one tool)"
    assert report.check("speed").status == "skip" and report.ok  # warnings do not fail
    assert len(scripted_model.requests) == 1  # no second request queued behind the first


async def test_a_fixed_prompt_the_window_cannot_hold_fails_with_the_smallest_window(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.fallback = lambda request: "1 2 3"
    report = await run_doctor(settings_for(hippobot_home, scripted_server.base_url, contextWindowTokens=1024))
    window = report.check("window")
    assert window.status == "fail" and "too small" in window.detail
    assert window.fix.startswith("set contextWindowTokens to at least ")


async def test_missing_model_and_broken_config_are_failures_with_their_fix(hippobot_home):
    settings = load_settings({"HIPPOBOT_HOME": str(hippobot_home)})
    report = await run_doctor(settings)
    endpoint = report.check("endpoint")
    assert endpoint.status == "fail" and endpoint.detail.startswith("no model configured")
    assert "HIPPOBOT_MODEL" in endpoint.fix and str(hippobot_home / "config.json") in endpoint.fix

    broken = await run_doctor(None, config_error="config.json:3: invalid JSON")
    assert broken.check("config").status == "fail" and broken.check("config").detail == "config.json:3: invalid JSON"
    assert broken.check("endpoint").status == "skip" and broken.check("sandbox") is not None


async def test_a_damaged_memory_history_fails_even_below_head(make_agent, scripted_server, scripted_model):
    agent = make_agent()
    memory = agent.workspace / "memory" / "MEMORY.md"
    memory.write_text("# Memory\n\n- first version of a fact\n")
    agent.git.commit("memory: one")
    memory.write_text("# Memory\n\n- second version\n")
    agent.git.commit("memory: two")
    from dulwich.objects import Blob

    old_blob = Blob.from_string(b"# Memory\n\n- first version of a fact\n").id.decode()
    (agent.workspace / ".git" / "objects" / old_blob[:2] / old_blob[2:]).unlink()
    scripted_model.fallback = lambda request: "1 2 3"

    report = await run_doctor(agent.settings)

    versions = report.check("versions")
    assert versions.status == "fail" and "damaged" in versions.detail and ".git aside" in versions.fix
