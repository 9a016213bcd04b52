"""SPEC 5: "Two hippobot processes on one workspace (a long-running one and a CLI) do not
lose or interleave each other's writes."

Two workers chat at the same time, each in a session of its own and both in one shared
session, while a third runs Dream in a loop. Nobody is killed: whatever goes wrong here is
a race, not a crash.
"""

from __future__ import annotations

import json
import re

from hippobot.messages import public_text

from .harness import check_workspace, read_journal

TURNS = 24


_OWNER = re.compile(r"<<M:([\w.-]+)>>|__M_([\w.-]+)__")


def _turn_runs(path) -> list[str]:
    """The turn each message of a session file belongs to, in file order.

    Every message the workspace model's turns produce names its turn: the user's text, the
    replies and tool arguments carry the marker, a note's file name carries it escaped.
    """
    owners: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "_type" in record:
            continue
        text = public_text(record) + json.dumps(record.get("tool_calls"))
        found = _OWNER.search(text)
        owners.append((found.group(1) or found.group(2)) if found else "?")
    return owners


def test_two_chatting_processes_and_a_dreaming_one_share_a_workspace(
    zygote, workspace_model, make_home
):
    model, server = workspace_model
    home = make_home("shared")
    workspace = home / "workspace"
    stop = home / "stop-dreaming"
    common = {"home": str(home), "base_url": server.base_url, "seed": 7, "stderr": str(home / "err")}
    chatters = [
        zygote.spawn(mode="chat", name=name, keys=["cli:shared", f"cli:{name}"], turns=TURNS,
                     **common)
        for name in ("a", "b")
    ]
    dreamer = zygote.spawn(mode="dream", name="dreamer", stop_file=str(stop), **common)
    statuses = [zygote.wait(pid) for pid in chatters]
    stop.write_text("done")
    statuses.append(zygote.wait(dreamer))
    assert all(s["code"] == 0 for s in statuses), (home / "err").read_text()[-3000:]

    journal = read_journal(home)
    found = check_workspace(workspace, journal, settled=True)
    assert not found.problems, "\n".join(found.problems)
    assert found.completed_turns == 2 * TURNS
    shared = workspace / "sessions" / "cli" / "shared.jsonl"
    owners = _turn_runs(shared)
    assert "?" not in owners
    assert len(set(owners)) == TURNS  # both processes' turns, each once
    dreams = [r for r in journal if r["op"] == "dream" and r["state"] == "done"]
    assert any(r["status"] == "done" for r in dreams), "Dream never had work: no race tested"
    assert not model.violations, "\n".join(model.violations[:10])

    # A turn is one block of lines: the other process's turn does not land in the middle.
    blocks = [o for i, o in enumerate(owners) if i == 0 or owners[i - 1] != o]
    split = sorted({o for o in blocks if blocks.count(o) > 1})
    assert not split, f"turns interleaved with the other process's turn: {split}"
    # ...so no replay ever had to stand in for a tool result that is on disk.
    assert model.synthetic == 0
