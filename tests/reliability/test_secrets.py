"""API keys never reach session files, history entries, indexes or logs.

Keys come from everywhere a real conversation brings them: the user pastes them, the model
repeats them in replies and in tool arguments, tools print them, a summariser copies them
into the archive, an endpoint echoes the key it rejected. Two kinds are checked: the keys
hippobot is configured with (any shape) and well-known token shapes it was never told
about. Every file under the workspace (git objects decompressed) and every log record are
searched afterwards.
"""

from __future__ import annotations

import json
import logging
import zlib
from datetime import timedelta
from pathlib import Path

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.errors import ProviderError
from hippobot.providers.retry import RetryPolicy

KEY = "cli:direct"
CONFIGURED = "hb-local-Zq81-custom-shaped-key"  # providers.local.apiKey: no known shape
ENV_KEY = "sk-secrets-test-0123456789abcdef0"  # HIPPOBOT_API_KEY
PATTERNS = [
    "ghp_" + "A1b2C3d4" * 5,  # GitHub
    "AKIA" + "Z7Q4" * 4,  # AWS access key id
    "xoxb-" + "1234567890-" + "abcdefABCDEF" * 2,  # Slack
    "sk-proj-" + "Q9w8E7r6" * 5,  # OpenAI project key
]
ALL = [CONFIGURED, ENV_KEY, *PATTERNS]
LEAKY = f"config: api_key = {CONFIGURED}\n" + "\n".join(f"token {p}" for p in PATTERNS)


def _agent(home: Path, server) -> Agent:
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "agents": {"defaults": {"contextWindowTokens": 6000, "maxTokens": 500}},
        "providers": {"local": {"apiKey": CONFIGURED, "apiBase": server.base_url}},
    }
    (home / "config.json").write_text(json.dumps(config))
    env = {
        "HIPPOBOT_HOME": str(home), "PATH": "/usr/bin:/bin",
        "HIPPOBOT_MODEL": "scripted-model", "HIPPOBOT_API_BASE": server.base_url,
        "HIPPOBOT_API_KEY": ENV_KEY,
    }
    settings = load_settings(env)
    onboard(settings)
    agent = Agent(settings)
    agent.retry_policy = RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0)
    return agent


def _readable(path: Path) -> bytes:
    data = path.read_bytes()
    if ".git" in path.parts and "objects" in path.parts:
        try:
            return zlib.decompress(data)
        except zlib.error:
            return data
    return data


def _leaks(root: Path, skip: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or any(part in skip for part in path.relative_to(root).parts):
            continue
        data = _readable(path)
        found += [f"{path.relative_to(root)}: {s[:12]}…" for s in ALL if s.encode() in data]
    return found


async def test_no_key_is_stored_or_logged_anywhere(tmp_path, scripted_server, scripted_model,
                                                   caplog):
    caplog.set_level(logging.DEBUG)
    agent = _agent(tmp_path / "home", scripted_server)
    # 1. The user pastes keys; the model repeats them.
    scripted_model.reply(f"Noted. I will remember {CONFIGURED} and {PATTERNS[0]}.")
    await agent.turn(KEY, f"Here are my keys, keep them safe:\n{LEAKY}")
    # 2. The model puts keys into tool arguments and a tool prints them.
    scripted_model.reply_tool_call(
        "write_file", {"path": "notes/keys.txt", "content": LEAKY}, text=f"Saving {PATTERNS[1]}"
    )
    scripted_model.reply_tool_call("exec", {"command": "cat notes/keys.txt; env | grep -i key"})
    scripted_model.reply_tool_call("read_file", {"path": "notes/keys.txt"})
    scripted_model.reply(f"The file holds {PATTERNS[3]}.")
    await agent.turn(KEY, "save them to a file and show me")
    # 3. A summariser copies them into the archive; Dream reads the archive.
    scripted_model.reply(
        f"- [permanent] User's keys: {LEAKY.replace(chr(10), ' ')}\n- [durable] {CONFIGURED}"
    )
    session = agent.sessions.get(KEY)
    await agent.consolidator.archive_until(session, len(session.messages))
    scripted_model.reply(f"[USER] has a GitHub token {PATTERNS[0]}")
    scripted_model.reply("Nothing to change.")
    scripted_model.reply("Nothing to change.")  # asked again about the facts it did not write
    await agent.dream.run()
    # 4. The endpoint rejects the key and echoes it back.
    scripted_model.fail(401, body={"error": {
        "message": f"Incorrect API key provided: {ENV_KEY}. Also tried {CONFIGURED}.",
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    try:
        await agent.turn(KEY, "one more question")
    except ProviderError as exc:
        logging.getLogger("test").error("shown to the user: %s", exc)
    # 5. A summary that fails keeps its reason in the session (retried); one that keeps
    #    failing for hours falls back to a raw dump of the messages and that reason.
    session = agent.sessions.get(KEY)
    start = agent.consolidator.now()
    for hours in (0, 1, 2):
        scripted_model.fail(400, body={"error": {"message": f"bad key {CONFIGURED} {PATTERNS[0]}"}})
        agent.consolidator.now = lambda h=hours: start + timedelta(hours=h)
        await agent.consolidator.archive_until(session, len(session.messages))
    await agent.jobs.drain()

    assert agent.memory.read_history(), "nothing was archived: the test did not test"
    assert any(e.is_raw for e in agent.memory.read_history())
    leaks = _leaks(agent.workspace, skip=("notes",))
    assert leaks == [], "\n".join(leaks)
    logged = caplog.text + "\n".join(str(r.args) for r in caplog.records)
    assert [s[:12] for s in ALL if s in logged] == []
