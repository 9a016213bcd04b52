"""``serve.users``: what one person's model can do to reach another person's memory.

Alice is the attacker (or a model steered by text she pasted): her agent has the file tools
and ``exec``. She may plant links in her own workspace, and run any command. Bob's workspace
(a folder he chose, outside hippobot's home), the owner's workspace and ``config.json``
(every key) must stay out of her reach.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil

import httpx
import pytest

OWNER_KEY = "owner-key-0123456789"
ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"
PROVIDER_KEY = "sk-ant-provider-secret-0123456789abcdef"
KEYS = (OWNER_KEY, ALICE, BOB, PROVIDER_KEY)


def _config(home, places, tools=None, owner=None, **serve) -> None:
    config = {
        "tools": tools or {},
        "agents": {"defaults": {"workspace": str(owner)}} if owner else {},
        "providers": {"anthropic": {"apiKey": PROVIDER_KEY}},
        "serve": {
            "apiKey": OWNER_KEY,
            "users": {"alice": {"apiKey": ALICE}, "bob": {"apiKey": BOB, "workspace": str(places / "bob")}},
            **serve,
        },
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture
def places():
    """Where bob's (and the owner's) workspace lives: outside /tmp, which the sandbox empties
    anyway, so that only hiding it keeps it out of alice's sight (as for /srv/hippobot/bob)."""
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="hippobot-users-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _workspace(srv, name: str):
    return srv.app.state.users.workspace(name)


def _bobs_diary(srv) -> tuple[str, bytes]:
    """A 12-line session of bob's, written as his client left it."""
    path = _workspace(srv, "bob") / "sessions" / "api" / "diary.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"_type": "session", "format": 1, "key": "api:diary", "created_at": "2026-01-01T00:00:00+00:00"}]
    lines += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"BOB-DIARY {i}"} for i in range(11)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(path), path.read_bytes()


def _alice_runs(srv, scripted_model, command: str, session: str = "work") -> str:
    scripted_model.reply_tool_call("exec", {"command": command})
    scripted_model.reply("Done.")
    srv.client(api_key=ALICE).chat.completions.create(
        model="hippobot", extra_headers={"X-Session-Id": session},
        messages=[{"role": "user", "content": "run it"}],
    )
    return next(m["content"] for m in reversed(scripted_model.requests[-1].messages) if m["role"] == "tool")


def _page(srv, key: str) -> str:
    answer = srv.http.get(f"{srv.root}/", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200
    return answer.text


def test_alice_cannot_read_keys_or_bobs_session_through_planted_links(
    hippobot_home, make_agent, serve, scripted_model, places
):
    # What is tested is the readers outside the sandbox: a sandboxed command plants the same
    # links as an unsandboxed one, so where bubblewrap is missing the owner lets alice's run.
    unsandboxed = {"allowUnsandboxedExec": True} if shutil.which("bwrap") is None else {}
    _config(hippobot_home, places, **unsandboxed)
    srv = serve(agent=make_agent(), api_key=OWNER_KEY)
    bob_file, bob_before = _bobs_diary(srv)
    config = str(hippobot_home / "config.json")
    planted = _alice_runs(srv, scripted_model, (
        f"ln -sf {shlex.quote(config)} memory/MEMORY.md && mkdir -p sessions/api && "
        f"ln -sf {shlex.quote(bob_file)} sessions/api/stolen.jsonl && echo planted"
    ))
    assert "planted" in planted

    page = _page(srv, ALICE)
    assert [k for k in KEYS if k in page] == [] and '"serve"' not in page

    calls = len(scripted_model.requests)
    answer = httpx.post(
        f"{srv.base_url}/chat/completions", timeout=30,
        headers={"Authorization": f"Bearer {ALICE}", "X-Session-Id": "stolen"},
        json={"model": "hippobot", "messages": [{"role": "user", "content": "what did we say?"}]},
    )
    assert answer.status_code == 500 and "symbolic link" in answer.json()["error"]["message"]
    assert len(scripted_model.requests) == calls  # bob's conversation never went to the model
    bob_path = _workspace(srv, "bob") / "sessions" / "api" / "diary.jsonl"
    assert bob_path.read_bytes() == bob_before  # 12 lines, not 15
    assert "BOB-DIARY" not in json.dumps([r.messages for r in scripted_model.requests])


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_each_users_sandbox_sees_their_own_workspace_only(
    hippobot_home, make_agent, serve, scripted_model, places
):
    _config(hippobot_home, places, owner=places / "owner")
    srv = serve(agent=make_agent(), api_key=OWNER_KEY)
    bob, owner = _workspace(srv, "bob"), _workspace(srv, "")
    (bob / "USER.md").write_text("# Bob\n\n- BOB-PRIVATE locker 4711\n")
    (owner / "USER.md").write_text("# Owner\n\n- OWNER-PRIVATE\n")
    seen = _alice_runs(srv, scripted_model, (
        f"cat {bob}/USER.md {owner}/USER.md {hippobot_home}/config.json; ls -a {bob} {owner}; "
        f"grep -rs PRIVATE {bob.parent} {owner.parent}; echo looked"
    ))
    assert "looked" in seen and "BOB-PRIVATE" not in seen and "OWNER-PRIVATE" not in seen, seen
    assert [k for k in KEYS if k in seen] == []
    # The owner's sandbox does not show the users' workspaces either.
    scripted_model.reply_tool_call("exec", {"command": f"cat {bob}/USER.md; echo looked"})
    scripted_model.reply("Done.")
    srv.client(api_key=OWNER_KEY).chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": "peek"}])
    owner_seen = scripted_model.requests[-1].messages[-1]["content"]
    assert "looked" in owner_seen and "BOB-PRIVATE" not in owner_seen


@pytest.mark.parametrize("allowed", [False, True])
def test_without_a_sandbox_users_get_no_exec_unless_the_owner_allows_it(
    hippobot_home, make_agent, serve, scripted_model, places, caplog, allowed
):
    _config(hippobot_home, places, tools={"exec": {"sandbox": "none"}}, allowUnsandboxedExec=allowed)
    agent = make_agent()
    with caplog.at_level(logging.WARNING, logger="hippobot.server.users"):
        srv = serve(agent=agent, api_key=OWNER_KEY)
    said = [r.getMessage() for r in caplog.records if r.name == "hippobot.server.users"]
    assert len(said) == 1
    assert ("WITHOUT a sandbox" if allowed else "exec is off for the users of serve.users") in said[0]

    def tools_for(key: str) -> list[str]:
        scripted_model.reply("Hi.")
        srv.client(api_key=key).chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "which tools?"}])
        request = scripted_model.requests[-1]
        assert request.last_user_words() == "which tools?"
        return [t["function"]["name"] for t in request.tools]

    assert ("exec" in tools_for(ALICE)) is allowed
    assert "exec" in tools_for(OWNER_KEY)  # the owner's own choice ("none") stands for them
    assert "read_file" in tools_for(BOB)
