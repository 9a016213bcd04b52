"""``hippobot sessions delete`` while ``serve`` runs: the session stays deleted."""

from __future__ import annotations

import json

import openai

from hippobot.session.keys import key_to_relpath
from hippobot.testing.cli import run_cli


def test_a_session_deleted_while_serving_does_not_come_back(serve, make_agent, scripted_model, scripted_server, hippobot_home):
    agent = make_agent()
    srv = serve(agent)
    client = openai.OpenAI(base_url=f"{srv.root}/v1", api_key="unused", max_retries=0)
    scripted_model.reply("Noted, your PIN is 4321.")
    client.chat.completions.create(
        model="hippobot", user="x", messages=[{"role": "user", "content": "My PIN is 4321."}]
    )
    path = agent.workspace / key_to_relpath("api:x")
    assert path.exists()

    done = run_cli(["sessions", "delete", "--yes", "api:x"], hippobot_home, scripted_server)
    assert done.returncode == 0, done.stderr
    assert not path.exists()

    scripted_model.reply("Hello, stranger.")
    client.chat.completions.create(
        model="hippobot", user="x", messages=[{"role": "user", "content": "Hello?"}]
    )
    client.close()
    text = path.read_text(encoding="utf-8")
    assert "4321" not in text, "the deleted conversation was written back"
    roles = [json.loads(line).get("role") for line in text.splitlines()]
    assert [r for r in roles if r] == ["user", "assistant"]
    # the model was not shown the deleted conversation either
    assert "4321" not in json.dumps(scripted_model.requests[-1].messages)
    listed = run_cli(["sessions", "show", "api:x"], hippobot_home, scripted_server)
    assert "4321" not in listed.stdout and "Hello?" in listed.stdout


async def test_a_session_emptied_by_someone_else_is_not_rewritten_from_memory(make_agent, scripted_model):
    agent = make_agent()
    scripted_model.reply("first answer")
    await agent.turn("cli:direct", "first question")
    path = agent.workspace / key_to_relpath("cli:direct")
    path.write_bytes(b"")  # e.g. truncated by hand to start over
    scripted_model.reply("second answer")
    await agent.turn("cli:direct", "second question")
    text = path.read_text(encoding="utf-8")
    assert "first question" not in text and "second question" in text
