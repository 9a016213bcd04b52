"""Dream's commit point on its own: a run stopped at any step leaves every memory file old or
new (never half), the cursor moves only together with the files, and the next run finishes
the job with one Dream commit that holds Dream's changes and nothing of the user's."""

from __future__ import annotations

import json

import pytest

from hippobot.lifecycle.dream_commit import StagedRun

# Every step of a commit, in order; "manifest" is the commit point itself.
STEPS = ["manifest", "manual-commit", "merge USER.md", "merge memory/MEMORY.md", "cursor", "git-commit", "clear", "archive"]


class Killed(BaseException):
    """Stands in for the process dying: not an Exception, so nothing on the way catches it."""


def staged_run(agent, stop_at: str | None = None) -> StagedRun:
    def step(name: str) -> None:
        if name == stop_at:
            raise Killed(name)

    return StagedRun(agent.dream.paths, agent.memory, lambda: agent.git, on_step=step)


def dream_commits(agent) -> list:
    return [c for c in agent.git.log(limit=20) if c.subject.startswith("dream:")]


@pytest.fixture
def prepared(make_agent):
    """A workspace with one pending entry, a hand edit to SOUL.md not yet committed, and a
    run whose staged copies add a line to USER.md and to MEMORY.md."""
    agent = make_agent()
    ws = agent.workspace
    agent.memory.append_history("- [permanent] User has a cat named Luna", session_key="cli:direct")
    soul = ws / "SOUL.md"
    soul.write_text(soul.read_text() + "- Answers in Welsh\n")  # the user's own, uncommitted
    old = {name: (ws / name).read_text() for name in ("USER.md", "memory/MEMORY.md")}
    new = {"USER.md": old["USER.md"] + "- Has a cat named Luna\n", "memory/MEMORY.md": old["memory/MEMORY.md"] + "- Cat: Luna\n"}
    return agent, old, new


@pytest.mark.parametrize("step", STEPS)
def test_a_run_stopped_at_any_step_is_old_or_new_and_the_next_run_finishes_it(prepared, step):
    agent, old, new = prepared
    ws = agent.workspace
    run = staged_run(agent, stop_at=step)
    run.prepare()
    run.write(new)
    with pytest.raises(Killed):
        run.commit(1, "#1 [permanent] User has a cat named Luna — written to USER.md:13")

    # What the crash left: each file whole, the cursor only with the files.
    now = {name: (ws / name).read_text() for name in old}
    for name in old:
        assert now[name] in (old[name], new[name]), f"{name} is half-written after a stop at {step}"
    cursor = agent.memory.dream_cursor()
    assert cursor in (0, 1)
    if cursor == 1:
        assert now == new, "the cursor moved before every file was applied"
    if step == "manifest":
        assert now == old and cursor == 0  # before the commit point nothing live changes

    # The next run.
    staged_run(agent).recover()
    after = {name: (ws / name).read_text() for name in old}
    commits = dream_commits(agent)
    if step == "manifest":
        assert after == old and agent.memory.dream_cursor() == 0 and commits == []
    else:
        assert after == new and agent.memory.dream_cursor() == 1
        [commit] = commits  # one Dream commit, with both files and the accounting
        assert {"USER.md", "memory/MEMORY.md"} <= set(commit.files)
        assert "Accounting:" in commit.message and "written to USER.md:13" in commit.message
        # The user's edit went into its own commit, never mixed with Dream's lines.
        for c in agent.git.log(limit=20):
            if c.subject.startswith("manual:"):
                assert c.files == ("SOUL.md",), f"{c.subject} holds {c.files}"
    assert "Answers in Welsh" in (ws / "SOUL.md").read_text()
    assert not run.manifest.exists() and not run.staged.exists()
    # Rolling forward again changes nothing.
    assert staged_run(agent).recover() == ((), None)
    assert len(dream_commits(agent)) == len(commits)


def test_a_user_edit_made_during_the_run_is_merged_not_lost(prepared):
    agent, _, new = prepared
    user = agent.workspace / "USER.md"
    run = staged_run(agent)
    run.prepare()
    run.write(new)
    user.write_text(user.read_text().replace("- Languages:", "- Languages: English, Welsh"))
    files, sha = run.commit(1)
    text = user.read_text()
    assert "- Languages: English, Welsh" in text and "- Has a cat named Luna" in text
    assert sha and "USER.md" in files


def test_an_unreadable_manifest_discards_that_run_and_changes_nothing(prepared):
    agent, old, new = prepared
    run = staged_run(agent)
    run.prepare()
    run.write(new)
    run.manifest.write_text(json.dumps(["not", "a", "manifest"]))
    assert run.recover() == ((), None)
    assert {name: (agent.workspace / name).read_text() for name in old} == old
    assert agent.memory.dream_cursor() == 0 and not run.manifest.exists()
