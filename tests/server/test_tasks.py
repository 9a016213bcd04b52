"""Open WebUI's background task prompts are answered without touching memory."""

from __future__ import annotations

import json

from .serving import session_messages

TITLE_TASK = (
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n"
    "### Output:\nJSON format: { \"title\": \"your concise title here\" }\n"
    "### Chat History:\n<chat_history>\nUSER: My cat Miso is sick\nASSISTANT: Sorry!\n"
    "</chat_history>"
)


def workspace_files(agent) -> dict[str, str]:
    root = agent.workspace
    return {
        str(p.relative_to(root)): p.read_bytes().hex()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts and ".hippobot" not in p.parts
    }


def test_a_task_prompt_leaves_no_trace(serve, scripted_model):
    srv = serve()
    before = workspace_files(srv.agent)
    scripted_model.reply('{"title": "🐱 Miso is sick"}')

    answer = srv.client().chat.completions.with_raw_response.create(
        model="hippobot",
        messages=[{"role": "user", "content": TITLE_TASK}],
        extra_headers={"X-OpenWebUI-Chat-Id": "chat-9"},
    )

    assert answer.parse().choices[0].message.content == '{"title": "🐱 Miso is sick"}'
    assert answer.headers["x-hippobot-stateless"] == "true"
    assert "x-session-id" not in answer.headers
    (sent,) = scripted_model.requests
    assert sent.messages == [{"role": "user", "content": TITLE_TASK}]  # no memory, no prompt
    assert sent.tools == []
    assert workspace_files(srv.agent) == before  # no session, no history, nothing to Dream on
    assert srv.agent.memory.read_history() == []


def test_the_stateless_header_works_for_any_prompt_and_streams(serve, scripted_model):
    srv = serve()
    scripted_model.reply("tags: pets, health")

    chunks = list(
        srv.client().chat.completions.create(
            model="hippobot", stream=True,
            messages=[
                {"role": "system", "content": "You label chats."},
                {"role": "user", "content": "Label: my cat is sick"},
            ],
            extra_headers={"X-Hippobot-Stateless": "true"},
        )
    )

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tags: pets, health"
    assert scripted_model.requests[0].messages[0] == {"role": "system", "content": "You label chats."}
    assert not (srv.agent.workspace / "sessions" / "api").exists()


def test_a_normal_turn_after_a_task_prompt_does_not_see_it(serve, scripted_model):
    srv = serve()
    scripted_model.reply('{"title": "Cats"}').reply("Miso will be fine.")
    client = srv.client()

    client.chat.completions.create(model="hippobot", user="u",
                                   messages=[{"role": "user", "content": TITLE_TASK}])
    client.chat.completions.create(model="hippobot", user="u",
                                   messages=[{"role": "user", "content": "Will Miso be ok?"}])

    assert "### Task:" not in json.dumps(scripted_model.requests[1].messages)
    assert [r for r, _ in session_messages(srv.agent, "api:u")] == ["user", "assistant"]
