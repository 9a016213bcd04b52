"""``hippobot serve`` behind litellm (``pip install -e '.[clients]'``; CI installs it).

litellm drops the ``user`` field, so its callers name the session with ``session_id`` in the
body or the ``X-Session-Id`` header; it retries through the openai SDK (twice by default).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest

from .serving import session_messages


@functools.cache
def _litellm() -> Any:
    """litellm, imported by the first test that needs it (importing it takes seconds, which
    every test worker would otherwise pay while merely collecting this file)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
    module = pytest.importorskip("litellm", reason="litellm is in the 'clients' extra")
    module.telemetry = False
    return module

ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"


def complete(srv, text: str, *, api_key: str = "unused", **kw: Any):
    return _litellm().completion(
        model="openai/hippobot", api_base=srv.base_url, api_key=api_key,
        messages=[{"role": "user", "content": text}], **kw,
    )


def test_litellm_retries_of_an_upstream_failure_store_one_copy(serve, scripted_model):
    srv = serve()
    for _ in range(4):
        scripted_model.fail(500)

    with pytest.raises(_litellm().exceptions.BadGatewayError) as failed:
        complete(srv, "Remember the boat is Wren.", extra_body={"session_id": "boat"})

    assert failed.value.status_code == 502

    assert len(scripted_model.requests) == 4  # litellm's SDK did not retry the turn
    assert session_messages(srv.agent, "api:boat") == [("user", "Remember the boat is Wren.")]


def test_litellm_sessions_from_session_id_and_open_webui_chat_ids(serve, scripted_model):
    srv = serve()
    for reply in ("one", "two", "three", "four"):
        scripted_model.reply(reply)

    complete(srv, "first", extra_body={"session_id": "ll"})
    complete(srv, "second", extra_body={"session_id": "ll"})
    complete(srv, "cats", extra_headers={"X-OpenWebUI-Chat-Id": "chat-a"})
    complete(srv, "dogs", extra_headers={"X-OpenWebUI-Chat-Id": "chat-b"})

    assert [t for _, t in session_messages(srv.agent, "api:ll")] == ["first", "one", "second", "two"]
    assert [t for _, t in session_messages(srv.agent, "api:chat-a")] == ["cats", "three"]
    assert [t for _, t in session_messages(srv.agent, "api:chat-b")] == ["dogs", "four"]


def test_litellm_sees_summed_usage_and_its_max_tokens_reach_the_model(serve, scripted_model):
    srv = serve()
    scripted_model.usage(prompt_tokens=900, completion_tokens=30)
    scripted_model.reply_tool_call("write_file", {"path": "a.txt", "content": "x"})
    scripted_model.usage(prompt_tokens=950, completion_tokens=12)
    scripted_model.reply("Done.")

    answer = complete(srv, "write a.txt", max_tokens=77, extra_body={"session_id": "u"})

    assert answer.choices[0].message.content == "Done."
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (1850, 42)
    sent = [r.raw.get("max_tokens", r.raw.get("max_completion_tokens")) for r in scripted_model.requests]
    assert sent == [77, 77]


def test_litellm_users_alice_and_bob_are_kept_apart(hippobot_home, make_agent, serve, scripted_model):
    (hippobot_home / "config.json").write_text(json.dumps(
        {"serve": {"users": {"alice": {"apiKey": ALICE}, "bob": {"apiKey": BOB}}}}
    ))
    srv = serve(agent=make_agent())
    scripted_model.reply("Noted, Alice.").reply("Hello Bob.")

    complete(srv, "My PIN is 2468.", api_key=ALICE, extra_body={"session_id": "same"})
    complete(srv, "What is my PIN?", api_key=BOB, extra_body={"session_id": "same"})

    assert "2468" not in json.dumps(scripted_model.requests[1].messages)
    home = srv.agent.settings.home / "users"
    alice = (home / "alice" / "sessions" / "api" / "same.jsonl").read_text()
    bob = (home / "bob" / "sessions" / "api" / "same.jsonl").read_text()
    assert "2468" in alice and "2468" not in bob and "What is my PIN?" in bob


def test_litellm_retries_reach_the_server_again(serve, scripted_model):
    """litellm's num_retries runs through tenacity, which the 'clients' extra installs with
    it (litellm imports it only on a retry, and fails without it)."""
    srv = serve()
    for _ in range(4):  # one turn's attempts at the model: the server answers 502
        scripted_model.fail(500)
    scripted_model.reply("Still here.")

    answer = complete(srv, "ping", num_retries=1, extra_body={"session_id": "r"})

    assert answer.choices[0].message.content == "Still here."
    assert len(scripted_model.requests) == 5 and scripted_model.pending() == 0
