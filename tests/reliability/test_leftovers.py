"""What an interrupted process leaves behind never blocks the next start.

The crash test kills processes at random; these pin the two leftovers it can only hit by
luck, deterministically: lock files of a memory commit killed half-way (found by the crash
test), and the torn last lines a power cut leaves (a SIGKILL cannot tear a single write, a
power cut can).
"""

from __future__ import annotations

import json

from dulwich.objects import Blob

from hippobot.agent.agent import Agent
from hippobot.memory.gitstore import GitStore
from hippobot.session.keys import key_to_relpath

KEY = "cli:direct"


def test_locks_of_a_killed_memory_commit_are_cleared_by_the_next(make_settings):
    """A commit killed mid-way leaves dulwich ``.lock`` files; every later commit (and so
    every Dream) failed with FileLocked until someone removed them by hand."""
    workspace = make_settings().workspace
    memory = workspace / "memory" / "MEMORY.md"
    memory.write_text("# Long-term Memory\n\n- has a cat named Luna\n")
    git_dir = workspace / ".git"
    blob = Blob.from_string(memory.read_bytes()).id.decode()
    stale = [
        git_dir / "objects" / blob[:2] / (blob[2:] + ".lock"),
        git_dir / "refs" / "heads" / "main.lock",
        git_dir / "index.lock",
    ]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    git = GitStore(workspace)
    sha = git.commit("dream: after a crash")
    assert sha is not None and git.log(limit=1)[0].sha == sha
    assert not [p for p in stale if p.exists()]
    assert git.diff_summary().paths == ()


async def test_torn_tails_from_a_power_cut_are_set_aside_and_the_chat_goes_on(
    make_agent, scripted_model
):
    agent = make_agent()
    scripted_model.reply("first answer")
    await agent.turn(KEY, "first question")
    agent.memory.append_history("- [permanent] likes tea", session_key=KEY)
    session_file = agent.workspace / key_to_relpath(KEY)
    history = agent.memory.history_path
    with session_file.open("ab") as fh:
        fh.write(b'{"role":"user","content":"half a li')
    with history.open("ab") as fh:
        fh.write(b'{"cursor": 2, "timestamp": "2026-0')

    restarted = Agent(agent.settings, provider=agent.provider)
    scripted_model.reply("second answer")
    assert (await restarted.turn(KEY, "second question")).reply == "second answer"
    request = scripted_model.requests[-1].messages
    assert "first question" in json.dumps(request) and "half a li" not in json.dumps(request)
    assert "likes tea" in request[0]["content"]
    # The torn line is kept aside, not lost, and the file is whole again after it.
    corrupt = session_file.with_name(session_file.name + ".corrupt")
    assert b"half a li" in corrupt.read_bytes()
    for line in session_file.read_bytes().splitlines():
        if b"half a li" not in line:
            json.loads(line)
    entry = restarted.memory.append_history("- [permanent] likes green tea", session_key=KEY)
    assert entry.cursor == 2
    assert [e.cursor for e in restarted.memory.read_history()] == [1, 2]
