"""Memory versions: real repositories under tmp_path, files read back from disk."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from dulwich.repo import Repo
from hypothesis import given, settings
from hypothesis import strategies as st

from hippobot.memory.gitstore import (
    AUTHOR,
    GitStore,
    RevertConflict,
    RevertRefused,
    UnknownCommit,
    VersioningUnavailable,
    dream_message,
    merge3,
)

MEMORY = "memory/MEMORY.md"
CURSOR = "memory/.dream_cursor"
LEDGER = "memory/reverted.jsonl"
BASE_MEMORY = "".join(f"- fact {i}\n" for i in range(1, 11))


def write(ws: Path, rel: str, text: str) -> None:
    path = ws / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())


def read(ws: Path, rel: str) -> str:
    return (ws / rel).read_bytes().decode()


def edit_line(ws: Path, rel: str, old: str, new: str) -> None:
    text = read(ws, rel)
    assert old in text
    write(ws, rel, text.replace(old, new, 1))


def snapshot(ws: Path) -> dict[str, bytes | None]:
    paths = ["SOUL.md", "USER.md", MEMORY, CURSOR, ".gitignore"]
    return {p: (ws / p).read_bytes() if (ws / p).exists() else None for p in paths}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    write(ws, "SOUL.md", "# Soul\nBe kind.\n")
    write(ws, "USER.md", "# User\n")
    write(ws, MEMORY, BASE_MEMORY)
    write(ws, CURSOR, "3\n")
    write(ws, "sessions/cli/direct.jsonl", '{"_type": "session"}\n')
    return ws


@pytest.fixture
def store(ws: Path) -> GitStore:
    store = GitStore(ws)
    assert store.init() is True
    return store


@pytest.fixture
def abc(ws: Path, store: GitStore) -> tuple[str, str]:
    """A (init) -> B (fact 2 changed) -> C (fact 8 changed); returns (B, C)."""
    edit_line(ws, MEMORY, "- fact 2\n", "- fact 2 from dream B\n")
    b = store.commit("dream: B")
    edit_line(ws, MEMORY, "- fact 8\n", "- fact 8 from dream C\n")
    c = store.commit("dream: C")
    assert b and c
    return b, c


# --- init ---------------------------------------------------------------------------


def test_init_creates_repo_ignore_file_and_first_commit(ws: Path, store: GitStore) -> None:
    assert (ws / ".git").is_dir()
    assert read(ws, ".gitignore").splitlines() == [
        "/*",
        "!memory/",
        "memory/*",
        "!memory/MEMORY.md",
        "!memory/.dream_cursor",
        "!skills/",
        "!prompts/",
        "!memory/reverted.jsonl",
        "!SOUL.md",
        "!USER.md",
        "!AGENTS.md",
        "!.gitignore",
    ]
    [first] = store.log()
    assert first.subject == "init: memory store"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", first.time)
    assert set(first.files) == {".gitignore", "SOUL.md", "USER.md", MEMORY, CURSOR}
    with Repo(str(ws)) as repo:
        commit = repo[repo.head()]
        assert commit.author == commit.committer == AUTHOR.encode()
    assert store.available and store.broken_reason is None


def test_init_is_idempotent_and_only_commits_existing_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws, "SOUL.md", "soul\n")
    store = GitStore(ws)
    assert store.init() is True
    ignore = read(ws, ".gitignore")
    assert store.init() is False
    assert store.init() is False
    assert read(ws, ".gitignore") == ignore
    [only] = store.log()
    assert set(only.files) == {".gitignore", "SOUL.md"}
    assert not (ws / "USER.md").exists()  # missing tracked files are not invented


def test_init_merges_an_existing_gitignore_without_duplicates(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws, ".gitignore", "*.log\n!SOUL.md\n")
    GitStore(ws).init()
    lines = read(ws, ".gitignore").splitlines()
    assert lines[0] == "*.log"
    assert lines.count("!SOUL.md") == 1
    assert lines[1:] == [
        "/*", "!memory/", "memory/*", "!memory/MEMORY.md", "!memory/.dream_cursor",
        "!skills/", "!prompts/", "!memory/reverted.jsonl", "!SOUL.md", "!USER.md", "!AGENTS.md",
        "!.gitignore",
    ]  # fmt: skip


def test_init_works_inside_an_enclosing_git_repository(tmp_path: Path) -> None:
    Repo.init(str(tmp_path)).close()
    ws = tmp_path / "ws"
    write(ws, "SOUL.md", "soul\n")
    store = GitStore(ws)
    assert store.init() is True
    assert (ws / ".git").is_dir()
    assert [c.subject for c in store.log()] == ["init: memory store"]
    write(ws, "SOUL.md", "soul, edited\n")
    assert store.commit("dream: edit") is not None
    with Repo(str(tmp_path)) as outer, pytest.raises(KeyError):
        outer.head()  # the enclosing repository got no commit


def test_everything_works_without_a_git_binary(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("git") is None

    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    store = GitStore(ws)
    assert store.init() is True
    edit_line(ws, MEMORY, "- fact 1\n", "- fact one\n")
    sha = store.commit("dream: one")
    assert sha and store.show(sha[:8]).subject == "dream: one"
    store.revert(sha[:8])
    assert read(ws, MEMORY) == BASE_MEMORY


# --- commit and log -----------------------------------------------------------------


def test_commit_only_when_tracked_files_change(ws: Path, store: GitStore) -> None:
    assert store.commit("dream: nothing") is None
    write(ws, "notes.txt", "not memory\n")
    write(ws, "sessions/cli/direct.jsonl", "changed\n")
    assert store.commit("dream: still nothing") is None
    write(ws, "USER.md", "# User\nName: Ada\n")
    sha = store.commit("dream: learned the name")
    assert sha is not None and re.fullmatch(r"[0-9a-f]{40}", sha)
    assert store.commit("dream: again") is None
    assert [c.subject for c in store.log()] == ["dream: learned the name", "init: memory store"]
    assert store.log()[0].files == ("USER.md",)


def test_deleting_a_tracked_file_is_committed_as_a_deletion(ws: Path, store: GitStore) -> None:
    (ws / "USER.md").unlink()
    sha = store.commit("manual: drop user file")
    assert sha is not None
    shown = store.show(sha)
    assert shown.files == ("USER.md",)
    assert "+++ /dev/null" in shown.diff


def test_log_is_newest_first_with_limit_and_prefix(ws: Path, store: GitStore) -> None:
    for i in range(4):
        write(ws, "USER.md", f"# User\nrevision {i}\n")
        store.commit(f"dream: run {i}" if i % 2 == 0 else f"manual: fix {i}")
    subjects = [c.subject for c in store.log()]
    assert subjects == [
        "manual: fix 3", "dream: run 2", "manual: fix 1", "dream: run 0", "init: memory store",
    ]  # fmt: skip
    assert [c.subject for c in store.log(limit=2)] == ["manual: fix 3", "dream: run 2"]
    assert [c.subject for c in store.log(prefix="dream:")] == ["dream: run 2", "dream: run 0"]
    assert [c.subject for c in store.log(limit=1, prefix="dream:")] == ["dream: run 2"]
    assert all(len(c.short_sha) == 8 and c.sha.startswith(c.short_sha) for c in store.log())


def test_show_finds_a_prefix_older_than_twenty_commits(ws: Path, store: GitStore) -> None:
    write(ws, "USER.md", "# User\nlikes tea\n")
    old = store.commit("dream: tea")
    for i in range(25):
        write(ws, "SOUL.md", f"# Soul\nmood {i}\n")
        store.commit(f"dream: mood {i}")
    assert old and old not in [c.sha for c in store.log()]
    shown = store.show(old[:7])
    assert shown.sha == old and shown.subject == "dream: tea"
    assert "+likes tea" in shown.diff


def test_show_of_the_root_commit_lists_its_content_as_additions(store: GitStore) -> None:
    root = store.log()[-1]
    shown = store.show(root.short_sha)
    assert "+++ b/SOUL.md" in shown.diff and "+Be kind." in shown.diff
    assert not any(line.startswith("-") and not line.startswith("---")
                   for line in shown.diff.splitlines())  # fmt: skip


def test_unknown_or_too_short_prefix_lists_recent_versions(store: GitStore) -> None:
    recent = store.log()[0].short_sha
    with pytest.raises(UnknownCommit) as err:
        store.show("deadbeef")
    assert recent in str(err.value) and err.value.recent == [recent]
    with pytest.raises(UnknownCommit):
        store.revert(recent[:2])


# --- diff summaries -----------------------------------------------------------------


def test_diff_summary_counts_lines_and_ignores_line_ending_changes(
    ws: Path, store: GitStore
) -> None:
    write(ws, MEMORY, BASE_MEMORY.replace("\n", "\r\n"))
    assert not store.diff_summary()
    assert store.diff_summary().text == ""
    write(ws, MEMORY, BASE_MEMORY.replace("- fact 3\n", "- fact three\n- fact 3b\n"))
    summary = store.diff_summary()
    assert summary.paths == (MEMORY,)
    assert summary.text.splitlines()[:2] == [
        "memory/MEMORY.md: +2 -1",
        "1 file changed, 2 insertion(s)(+), 1 deletion(s)(-)",
    ]
    assert "```diff\n--- a/memory/MEMORY.md\n+++ b/memory/MEMORY.md" in summary.text
    message = dream_message("2026-04-03 00:02", summary)
    assert message.startswith("dream: 2026-04-03 00:02, 1 change(s)\n\nmemory/MEMORY.md: +2 -1")


def test_diff_summary_caps_the_diff_and_reports_binary_files(ws: Path) -> None:
    store = GitStore(ws, diff_cap=300)
    store.init()
    write(ws, MEMORY, "".join(f"- a much longer fact number {i}\n" for i in range(100)))
    (ws / "USER.md").write_bytes(b"\xff\xfe not utf-8")
    summary = store.diff_summary()
    assert summary.truncated and summary.diff.endswith("...[diff truncated]")
    assert len(summary.diff) < 330
    assert "USER.md: binary or non-UTF-8 file changed" in summary.text


def test_diff_summary_between_two_versions(ws: Path, store: GitStore, abc: tuple[str, str]) -> None:
    b, c = abc
    summary = store.diff_summary(b[:8], c[:8])
    assert summary.paths == (MEMORY,)
    assert "+- fact 8 from dream C" in summary.diff and "fact 2 from dream B" not in summary.diff


# --- revert -------------------------------------------------------------------------


def test_revert_undoes_only_that_commit(ws: Path, store: GitStore, abc: tuple[str, str]) -> None:
    b, _ = abc
    result = store.revert(b[:8])
    text = read(ws, MEMORY)
    assert "- fact 2\n" in text and "from dream B" not in text
    assert "- fact 8 from dream C\n" in text
    assert result.files == (MEMORY,) and result.new_sha and result.manual_sha is None
    newest = store.log()[0]
    assert newest.sha == result.new_sha
    assert newest.subject == f"restore: undo {b[:8]}"
    assert "memory/MEMORY.md: +1 -1" in newest.message
    assert store.diff_summary().files == ()  # working tree matches the new commit


def test_reverting_twice_is_a_no_op(ws: Path, store: GitStore, abc: tuple[str, str]) -> None:
    b, _ = abc
    store.revert(b)
    count = len(store.log())
    again = store.revert(b)
    assert again.new_sha is None and again.files == ()
    assert len(store.log()) == count


def test_conflicting_revert_changes_nothing(
    ws: Path, store: GitStore, abc: tuple[str, str]
) -> None:
    b, _ = abc
    edit_line(ws, MEMORY, "- fact 2 from dream B\n", "- fact 2 from dream B, corrected\n")
    store.commit("dream: D")
    edit_line(ws, "USER.md", "# User\n", "# User\nuncommitted edit\n")
    before, history = snapshot(ws), [c.sha for c in store.log()]
    with pytest.raises(RevertConflict) as err:
        store.revert(b[:8])
    assert err.value.files == [MEMORY] and MEMORY in str(err.value)
    assert snapshot(ws) == before
    assert [c.sha for c in store.log()] == history


def test_the_root_commit_cannot_be_reverted(store: GitStore) -> None:
    root = store.log()[-1]
    with pytest.raises(RevertRefused, match="first version"):
        store.revert(root.short_sha)


def test_manual_edits_survive_a_revert(ws: Path, store: GitStore, abc: tuple[str, str]) -> None:
    b, _ = abc
    edit_line(ws, "USER.md", "# User\n", "# User\nName: Ada (typed by hand)\n")
    edit_line(ws, MEMORY, "- fact 5\n", "- fact 5, fixed by hand\n")
    result = store.revert(b[:8])
    assert "Name: Ada (typed by hand)" in read(ws, "USER.md")
    text = read(ws, MEMORY)
    assert "- fact 5, fixed by hand\n" in text and "from dream B" not in text
    subjects = [c.subject for c in store.log(limit=2)]
    assert subjects == [f"restore: undo {b[:8]}", "manual: edits before restore"]
    assert result.manual_sha == store.log()[1].sha
    assert set(store.show(result.manual_sha).files) == {"USER.md", MEMORY}


def test_revert_leaves_the_dream_cursor_and_records_the_lines_it_took_out(ws: Path, store: GitStore) -> None:
    edit_line(ws, MEMORY, "- fact 2\n", "- fact 2 from dream B\n")
    write(ws, CURSOR, "5\n")
    b = store.commit("dream: B")
    write(ws, CURSOR, "9\n")  # a later Dream run moved the cursor again
    edit_line(ws, MEMORY, "- fact 8\n", "- fact 8 from dream C\n")
    store.commit("dream: C")
    assert b
    result = store.revert(b[:8], after_cursor=9)
    assert read(ws, CURSOR) == "9\n"  # not rewound: Dream must not read those entries again
    assert set(result.files) == {MEMORY}
    assert "- fact 8 from dream C\n" in read(ws, MEMORY)
    assert "from dream B" not in read(ws, MEMORY)
    ledger = [json.loads(line) for line in read(ws, LEDGER).splitlines()]
    assert [(e["file"], e["text"], e["after_cursor"], e["commit"]) for e in ledger] == [
        (MEMORY, "- fact 2 from dream B", 9, b)
    ]
    assert [(f.file, f.text) for f in result.forgotten] == [(MEMORY, "- fact 2 from dream B")]
    restore = store.log(limit=1)[0]
    assert LEDGER in restore.files  # the ledger is versioned with the undo

    # Undoing the undo brings the line back and takes it out of the ledger again.
    again = store.revert(restore.short_sha)
    assert "- fact 2 from dream B\n" in read(ws, MEMORY)
    assert "from dream B" not in read(ws, LEDGER)
    assert [f.text for f in again.forgotten] == ["- fact 2"]  # replaced again: now the unwanted one


def test_commit_with_contents_commits_those_instead_of_the_disk(ws: Path, store: GitStore) -> None:
    write(ws, "SOUL.md", "# Soul\nBe kind.\nA hand edit.\n")
    sha = store.commit("manual: x", contents={"SOUL.md": b"# Soul\nBe kind.\n", "USER.md": None})
    assert sha and store.show(sha).files == ("USER.md",)
    assert read(ws, "SOUL.md").endswith("A hand edit.\n")  # the disk is not touched


# --- damaged or missing history -----------------------------------------------------


def test_uninitialised_store_is_unavailable_without_being_broken(tmp_path: Path) -> None:
    store = GitStore(tmp_path / "ws")
    assert not store.available and store.broken_reason is None
    with pytest.raises(VersioningUnavailable, match="not initialised"):
        store.log()


def test_garbage_head_makes_the_store_unavailable(ws: Path, store: GitStore) -> None:
    (ws / ".git" / "HEAD").write_bytes(b"\x00 garbage \xff\n")
    broken = GitStore(ws)  # constructing never raises
    assert broken.available is False
    reason = broken.broken_reason
    assert reason and "\n" not in reason and ".git" in reason
    calls = [
        broken.init, lambda: broken.commit("x"), broken.log, lambda: broken.show("abcd"),
        broken.diff_summary, lambda: broken.revert("abcd"),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(VersioningUnavailable):
            call()


def test_missing_objects_make_the_store_unavailable(ws: Path, store: GitStore) -> None:
    for folder in (ws / ".git" / "objects").iterdir():
        if re.fullmatch(r"[0-9a-f]{2}", folder.name):
            shutil.rmtree(folder)
    broken = GitStore(ws)
    assert not broken.available
    assert "missing" in (broken.broken_reason or "") or "damaged" in (broken.broken_reason or "")
    with pytest.raises(VersioningUnavailable):
        broken.commit("dream: x")


# --- interoperability and concurrency -----------------------------------------------


def test_commits_from_several_threads_stay_consistent(ws: Path, store: GitStore) -> None:
    errors: list[BaseException] = []

    def worker(rel: str) -> None:
        try:
            own = GitStore(ws)
            for i in range(5):
                write(ws, rel, f"{rel} revision {i}\n")
                own.commit(f"dream: {rel} {i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in ("SOUL.md", "USER.md")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not store.diff_summary()  # the last commit holds both files' final content
    assert (ws / ".hippobot" / "locks" / "git.lock").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="no git client to cross-check with")
def test_a_git_client_sees_a_clean_consistent_repository(
    ws: Path, store: GitStore, abc: tuple[str, str]
) -> None:
    store.revert(abc[0])

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ws), *args], check=True, capture_output=True, text=True
        ).stdout

    assert git("status", "--porcelain") == ""
    git("fsck", "--strict")
    assert git("log", "-1", "--format=%an <%ae>") == "hippobot <hippobot@dream>\n"
    assert git("log", "--format=%s").splitlines()[-1] == "init: memory store"


# --- three-way merge ----------------------------------------------------------------

BASE = "a\nb\nc\nd\ne\nf\n"


def test_merge_takes_disjoint_changes_from_both_sides() -> None:
    ours = BASE.replace("a\n", "A\n")
    theirs = BASE.replace("f\n", "F\n")
    assert merge3(BASE, ours, theirs) == "A\nb\nc\nd\ne\nF\n"


def test_merge_takes_adjacent_changes_side_by_side() -> None:
    ours = BASE.replace("b\n", "B\n")
    theirs = BASE.replace("c\n", "C\n")
    assert merge3(BASE, ours, theirs) == "a\nB\nC\nd\ne\nf\n"
    # an insertion where the other side's change ends
    assert merge3(BASE, ours, BASE.replace("b\n", "b\nnew\n")) == "a\nB\nnew\nc\nd\ne\nf\n"


def test_merge_accepts_the_same_change_on_both_sides() -> None:
    both = BASE.replace("c\n", "C\nC2\n")
    assert merge3(BASE, both, both) == both
    assert merge3(BASE, both + "end\n", both) == both + "end\n"


def test_merge_reports_conflicts() -> None:
    assert merge3(BASE, BASE.replace("c\n", "X\n"), BASE.replace("c\n", "Y\n")) is None
    # overlapping ranges: one side rewrites c-d, the other deletes d
    assert merge3(BASE, BASE.replace("c\nd\n", "cd\n"), BASE.replace("d\n", "")) is None
    # two different insertions at the same point
    assert merge3(BASE, BASE + "x\n", BASE + "y\n") is None


def test_merge_works_on_bytes_and_keeps_a_missing_final_newline() -> None:
    base = b"one\ntwo\nthree"
    assert merge3(base, b"ONE\ntwo\nthree", b"one\ntwo\nTHREE") == b"ONE\ntwo\nTHREE"


texts = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "e"]), max_size=10).map("".join)


@settings(max_examples=300, deadline=None)
@given(base=texts, other=texts)
def test_merge_with_one_side_unchanged_returns_the_other(base: str, other: str) -> None:
    assert merge3(base, other, base) == other
    assert merge3(base, base, other) == other
    assert merge3(base, other, other) == other
