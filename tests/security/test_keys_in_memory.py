"""A model that writes the API key into memory files: the key never reaches the git
history, the recall index, ``memory search`` output or a later prompt."""

from __future__ import annotations

import base64
import json

from hippobot.testing.cli import run_cli

from .conftest import API_KEY, KEY, every_file_bytes, tool_results

B64 = base64.b64encode(API_KEY.encode()).decode()
B64_ECHO = base64.b64encode(API_KEY.encode() + b"\n").decode()  # `echo $KEY | base64`
HEX = API_KEY.encode().hex()
FORMS = (API_KEY, B64, B64_ECHO, HEX)


def _leaks(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [form for form in FORMS if form in text]


async def test_keys_written_into_memory_files_never_persist(make_agent, scripted_model):
    agent = make_agent(exec={"sandbox": "none"})
    ws = agent.workspace
    scripted_model.reply_tool_calls(
        [
            ("write_file", {"path": "memory/MEMORY.md", "content": f"- zebra key is {API_KEY}\n"}),
            ("edit_file", {"path": "USER.md", "old_text": "#", "new_text": f"# b64 {B64} #",
                           "replace_all": False}),
            ("write_file", {"path": "skills/keys/SKILL.md",
                            "content": f"---\nname: keys\ndescription: zebra {HEX}\n---\n"}),
            # Behind the file tools' back: only the commit can catch this one.
            ("exec", {"command": f"echo 'zebra echo {B64_ECHO}' >> SOUL.md"}),
        ]
    )
    scripted_model.reply("Remembered.")
    await agent.turn(KEY, "remember the zebra key")
    results = tool_results(agent)
    assert "[REDACTED]" in results[0] and "[REDACTED]" in results[2]
    for name in ("memory/MEMORY.md", "USER.md", "SOUL.md", "skills/keys/SKILL.md"):
        text = (ws / name).read_text()
        assert "zebra" in text or "b64" in text, name
        assert not _leaks(text), f"{name} still holds the key"
    assert not _leaks(every_file_bytes(ws / ".git")), "the key is in the memory history"
    assert "memory/MEMORY.md" in agent.git.log()[0].files

    # The next turn's prompt carries the memory files, without the key.
    scripted_model.reply("Hello again.")
    await agent.turn(KEY, "hi")
    system = json.dumps(scripted_model.requests[-1].messages[0])
    assert "zebra" in system and not _leaks(system)

    # Search over the index, as the user runs it.
    home = agent.settings.home
    done = run_cli(["memory", "search", "zebra"], home, HIPPOBOT_API_KEY=API_KEY)
    assert done.returncode == 0, done.stderr
    assert "zebra" in done.stdout and not _leaks(done.stdout)
    assert not _leaks(every_file_bytes(ws / ".hippobot")), "the key is in the recall index"


def test_redact_exact_covers_simple_encodings():
    from hippobot.redact import REDACTED, redact_exact

    text = f"a {API_KEY} b {B64} c {B64.rstrip('=')} d {B64_ECHO} e {HEX} f {HEX.upper()}"
    out = redact_exact(text, [API_KEY])
    assert not _leaks(out) and HEX.upper() not in out
    assert out.count(REDACTED) == 6 and out.startswith("a [REDACTED] b ")


BARE = API_KEY.removeprefix("sk-attack-")  # the random part: the key without its prefix
OTHER_CASE = (API_KEY.upper(), BARE.upper(), BARE.lower(), B64.lower(), HEX.upper())


def _other_leaks(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [form for form in (BARE, *OTHER_CASE) if form.lower() in text.lower()]


async def test_the_key_without_its_prefix_or_in_another_case_never_persists(make_agent, scripted_model):
    agent = make_agent(exec={"sandbox": "none"})
    ws = agent.workspace
    scripted_model.reply_tool_calls([
        ("write_file", {"path": "memory/MEMORY.md",
                        "content": f"- zebra bare {BARE}\n- zebra upper {API_KEY.upper()}\n"}),
        ("exec", {"command": f"echo 'zebra echo {BARE.upper()} {B64.lower()}' >> SOUL.md"}),
    ])
    scripted_model.reply(f"Remembered {BARE.lower()}.")
    await agent.turn(KEY, f"remember the zebra key {API_KEY.upper()}")
    agent.memory.append_history(f"zebra history {BARE} and {HEX.upper()}", session_key=KEY)
    for name in ("memory/MEMORY.md", "SOUL.md", "memory/history.jsonl"):
        text = (ws / name).read_text()
        assert "zebra" in text and not _other_leaks(text), f"{name}: {_other_leaks(text)}"
    assert not _other_leaks(every_file_bytes(ws / ".git")), "the key is in the memory history"
    done = run_cli(["memory", "search", "zebra"], agent.settings.home, HIPPOBOT_API_KEY=API_KEY)
    assert done.returncode == 0 and "zebra" in done.stdout and not _other_leaks(done.stdout)
    assert not _other_leaks(every_file_bytes(ws / ".hippobot")), "the key is in the recall index"
    assert not _other_leaks(every_file_bytes(ws / "sessions")), "the key is in the session"


# Each spelling a writer must recognise: the configured key in another case and without its
# prefix, and a key of a well-known shape that was never configured (a GitHub token).
GITHUB = "ghp_" + "Xk93vQ7mP2sL8dR4tY6wZ1cB5nH0jF3gA9eK"
SPELLINGS = (API_KEY.upper(), BARE, BARE.lower(), B64, GITHUB)
LINE = " ".join(f"zebra{n} {form}" for n, form in enumerate(SPELLINGS))
REDACTED_LINE = " ".join(f"zebra{n} [REDACTED]" for n in range(len(SPELLINGS)))


def _committed(ws, name: bytes) -> str:
    from dulwich.repo import Repo

    repo = Repo(str(ws))
    tree = repo[repo[repo.head()].tree]
    return repo[tree[name][1]].data.decode()


def _spelled(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [form for form in SPELLINGS if form.lower() in text.lower()]


async def test_every_writer_redacts_each_spelling_the_same_way(make_agent, scripted_model):
    agent = make_agent(exec={"sandbox": "none"})
    ws = agent.workspace
    scripted_model.reply_tool_calls([
        ("write_file", {"path": "memory/MEMORY.md", "content": f"- {LINE}\n"}),  # the file tools
        # Behind the file tools' back: a versioned file (the commit) and one only the index reads.
        ("exec", {"command": f"echo '- {LINE}' >> SOUL.md; echo '- {LINE}' > memory/notes.md"}),
    ])
    scripted_model.reply(f"Kept {LINE}")
    await agent.turn(KEY, f"remember {LINE}")
    agent.memory.append_history(f"- {LINE}", session_key=KEY)

    records = [json.loads(line) for line in (ws / "sessions" / "cli" / "attack.jsonl").open()]
    said = {r["role"]: r["content"] for r in records if r.get("role") in ("user", "assistant")}
    kept = {
        "history entry": agent.memory.read_history()[-1].content,
        "session: the user's message": said["user"],
        "session: the reply": said["assistant"],
        "memory file written by the model": (ws / "memory" / "MEMORY.md").read_text(),
        "commit": _committed(ws, b"SOUL.md"),
    }
    for writer, text in kept.items():
        assert REDACTED_LINE in text and not _spelled(text), f"{writer}: {text!r}"
    assert not _spelled(every_file_bytes(ws / ".git")), "a spelling is in the memory history"

    done = run_cli(["memory", "search", "zebra4", "--k", "20", "--json"], agent.settings.home,
                   HIPPOBOT_API_KEY=API_KEY)
    assert done.returncode == 0, done.stderr
    shown = {hit["source"]: hit["snippet"].replace("«", "").replace("»", "") for hit in json.loads(done.stdout)}
    assert REDACTED_LINE in shown["memory/notes.md"], shown
    assert not _spelled(done.stdout)
    assert not _spelled(every_file_bytes(ws / ".hippobot")), "a spelling is in the search index"
