"""Several people on one server (``serve.users``): each has sessions and memory of their own."""

from __future__ import annotations

import json

import openai
import pytest

from hippobot.agent.agent import Agent
from hippobot.errors import UserError
from hippobot.server.app import create_app

from .serving import session_messages

OWNER_KEY = "owner-key-0123456789"
ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"


@pytest.fixture
def shared(hippobot_home, make_agent, serve, tmp_path):
    """A server with an owner key, alice (default workspace) and bob (a workspace he chose)."""
    config = {
        "serve": {
            "apiKey": OWNER_KEY,
            "trustUserHeader": "X-OpenWebUI-User-Email",
            "users": {
                "alice": {"apiKey": ALICE, "aliases": ["alice@example.com"]},
                "bob": {"apiKey": BOB, "workspace": str(tmp_path / "bobs-place")},
            },
        }
    }
    (hippobot_home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    agent = make_agent()
    return serve(agent=agent, api_key=OWNER_KEY)


def workspace_of(srv, name: str):
    return srv.app.state.users.workspace(name)


def agent_of(srv, name: str) -> Agent:
    return next(a for a in srv.app.state.users.agents() if a.workspace == workspace_of(srv, name))


def test_alice_and_bob_with_the_same_session_id_see_only_their_own(shared, scripted_model, tmp_path):
    srv = shared
    alice, bob = srv.client(api_key=ALICE), srv.client(api_key=BOB)
    same = {"X-Session-Id": "notes"}
    scripted_model.reply_tool_call("write_file", {"path": "USER.md", "content": "Locker code 4711.\n"})
    scripted_model.reply("Saved to your profile.")
    alice.chat.completions.create(
        model="hippobot", extra_headers=same,
        messages=[{"role": "user", "content": "My locker code is 4711, remember it."}],
    )
    stolen = str(workspace_of(srv, "alice") / "USER.md")
    scripted_model.reply_tool_call("read_file", {"path": stolen})
    scripted_model.reply("I cannot see that.")

    answer = bob.chat.completions.create(
        model="hippobot", extra_headers=same,
        messages=[{"role": "user", "content": "What is Alice's locker code?"}],
    )

    assert answer.choices[0].message.content == "I cannot see that."
    bobs_calls = scripted_model.requests[2:]
    assert all("4711" not in json.dumps(r.messages) for r in bobs_calls)
    assert bobs_calls[0].last_user_words() == "What is Alice's locker code?"
    assert workspace_of(srv, "alice") == (srv.agent.settings.home / "users" / "alice").resolve()
    assert workspace_of(srv, "bob") == (tmp_path / "bobs-place").resolve()
    alice_ws, bob_ws = agent_of(srv, "alice"), agent_of(srv, "bob")
    assert session_messages(alice_ws, "api:notes")[0][1].startswith("My locker code")
    bob_session = session_messages(bob_ws, "api:notes")
    assert bob_session[0] == ("user", "What is Alice's locker code?")
    assert all("4711" not in text for _, text in bob_session)  # the read was refused
    assert "4711" in (workspace_of(srv, "alice") / "USER.md").read_text()
    assert "4711" not in (workspace_of(srv, "bob") / "USER.md").read_text()
    assert not (srv.agent.workspace / "sessions" / "api" / "notes.jsonl").exists()
    # The memory page shows each person their own files.
    alice_page = srv.http.get(f"{srv.root}/", headers={"Authorization": f"Bearer {ALICE}"})
    bob_page = srv.http.get(f"{srv.root}/", headers={"Authorization": f"Bearer {BOB}"})
    assert "Locker code 4711." in alice_page.text and "4711" not in bob_page.text
    # Each workspace is versioned on its own.
    assert (workspace_of(srv, "alice") / ".git").is_dir()
    assert (workspace_of(srv, "bob") / ".git").is_dir()


def test_a_trusted_proxy_header_picks_the_user_but_only_with_the_proxy_key(shared, scripted_model):
    srv = shared
    scripted_model.reply("Hi Alice.").reply("Hi Carol.").reply("Hi Bob.")
    proxy = srv.client(api_key=OWNER_KEY)
    chat = {"X-OpenWebUI-Chat-Id": "chat-1"}

    proxy.chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": "I am Alice"}],
        extra_headers=chat | {"X-OpenWebUI-User-Email": "Alice@Example.com"},
    )
    proxy.chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": "I am Carol"}],
        extra_headers=chat | {"X-OpenWebUI-User-Email": "carol@example.com"},
    )
    srv.client(api_key=BOB).chat.completions.create(  # bob cannot claim to be alice
        model="hippobot", messages=[{"role": "user", "content": "I am Bob"}],
        extra_headers=chat | {"X-OpenWebUI-User-Email": "alice@example.com"},
    )

    assert [t for _, t in session_messages(agent_of(srv, "alice"), "api:chat-1")] == [
        "I am Alice", "Hi Alice."
    ]
    carol = srv.agent.settings.home / "users" / "carol@example.com"
    assert (carol / "sessions" / "api" / "chat-1.jsonl").is_file()
    assert [t for _, t in session_messages(agent_of(srv, "bob"), "api:chat-1")] == [
        "I am Bob", "Hi Bob."
    ]
    # Everyone's Dream runs on a schedule of its own: the owner, alice, bob, then carol.
    dreams = [t for t in srv.app.state.schedulers if t.get_name() == "dream-schedule"]
    assert len(dreams) == 4


def test_the_owner_key_without_a_user_header_is_the_servers_own_workspace(shared, scripted_model):
    srv = shared
    scripted_model.reply("Hello owner.")

    srv.client(api_key=OWNER_KEY).chat.completions.create(
        model="hippobot", user="me", messages=[{"role": "user", "content": "hi"}]
    )

    assert session_messages(srv.agent, "api:me")[-1] == ("assistant", "Hello owner.")


def test_an_unknown_key_is_refused(shared, scripted_model):
    srv = shared

    with pytest.raises(openai.AuthenticationError):
        srv.client(api_key="sk-nobody-0123456789").chat.completions.create(
            model="hippobot", messages=[{"role": "user", "content": "hi"}]
        )
    assert scripted_model.requests == []


def test_user_keys_alone_are_enough_to_require_auth(hippobot_home, make_agent, serve, scripted_model):
    (hippobot_home / "config.json").write_text(
        json.dumps({"serve": {"users": {"alice": {"apiKey": ALICE}}}}), encoding="utf-8"
    )
    srv = serve(agent=make_agent(), api_key=None)
    scripted_model.reply("Hi.")

    anonymous = srv.http.post(f"{srv.base_url}/chat/completions",
                           json={"messages": [{"role": "user", "content": "hi"}]})
    srv.client(api_key=ALICE).chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": "hi"}]
    )

    assert anonymous.status_code == 401
    assert len(scripted_model.requests) == 1


@pytest.mark.parametrize(
    ("users", "says"),
    [
        ({"../evil": {"apiKey": "k1-0123456789"}}, "cannot be a user name"),
        ({"a": {"apiKey": "same-0123456789"}, "b": {"apiKey": "same-0123456789"}}, "someone else"),
        ({"a": {"apiKey": "ka-0123456789", "workspace": "WS/a"}}, "overlap"),
    ],
)
def test_bad_user_configuration_is_a_clear_error(hippobot_home, make_agent, users, says):
    agent = make_agent()
    for spec in users.values():  # "WS" stands for the server's own workspace
        if "workspace" in spec:
            spec["workspace"] = spec["workspace"].replace("WS", str(agent.workspace))
    (hippobot_home / "config.json").write_text(json.dumps({"serve": {"users": users}}))

    with pytest.raises(UserError, match=says):
        create_app(make_agent(), api_key=None)
