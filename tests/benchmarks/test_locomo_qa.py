"""LoCoMo question answering on the synthetic file with the scripted model over HTTP: every
question is asked through the agent and beside both baselines, scored as LoCoMo scores,
resumed after an interruption, and an endpoint that dies fails its questions only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmarks.locomo import dataset
from benchmarks.locomo.__main__ import main
from benchmarks.locomo.qa import contains, locomo_f1, normalize_answer, paired, select_questions
from benchmarks.locomo.synthetic import write

from hippobot.testing import ScriptedModel
from hippobot.testing.archivist import is_archive_request
from hippobot.testing.scripted import RecordedRequest
from hippobot.testing.server import ScriptedServer

_LINE = re.compile(r"^- \[[^\]]*\] (?:\w+: )?(?P<speaker>\w+): (?P<text>.*)$", re.M)
_WORD = re.compile(r"\w+")


def reader(request: RecordedRequest) -> str:
    """A model that answers from what is in front of it: the pasted or recalled line that
    shares the most words with the question, else "I don't know"."""
    text = request.last_user_text()
    question = text.split("Answer with a short phrase")[0].rsplit("\n", 1)[-1]
    asked = {w.lower() for w in _WORD.findall(question) if len(w) > 3}
    best, overlap = None, 0
    for m in _LINE.finditer(text):
        said = {w.lower() for w in _WORD.findall(m.group("text"))}
        if len(asked & said) > overlap:
            best, overlap = m.group("text"), len(asked & said)
    # The dates hippobot adds after relative times ("last week (= the week of ...)") help a
    # model say when; this reader answers "what", so it leaves them out.
    return re.sub(r" \(= [^)]*\)", "", best) if best else "I don't know."


def test_scoring_is_locomos() -> None:
    q = dataset.Question("When?", 2, ("D1:1",), "7 May 2023")
    assert normalize_answer("The 7th, and May!") == "7th may"
    assert locomo_f1("on 7 May 2023", q) == pytest.approx(2 * 0.75 * 1 / 1.75)
    assert contains("It was on 7 May, 2023.", q) and not contains("May 2023", q)
    multi = dataset.Question("Who?", 1, ("D1:1",), "Maya, Tom")
    assert locomo_f1("Tom", multi) == pytest.approx(0.5)
    assert locomo_f1("painting", dataset.Question("?", 4, ("D1:1",), "paintings")) == 1.0  # stems


def test_a_lead_comes_with_its_interval_over_the_same_questions() -> None:
    def rec(condition: str, i: int, f1: float, contained: bool, error: str | None = None) -> dict:
        return {"condition": condition, "id": f"c:q{i}", "f1": f1, "contains": contained, "error": error}

    records = [rec("hippobot", i, 1.0 if i < 6 else 0.0, i < 6) for i in range(10)]
    records += [rec("bm25 top 5", i, 1.0 if i in (0, 9) else 0.0, i in (0, 9)) for i in range(10)]
    records.append(rec("bm25 top 5", 10, 1.0, True))  # hippobot never answered it: not compared
    p = paired(records, "hippobot", "bm25 top 5")
    assert p["questions"] == 10 and p["f1_difference"] == pytest.approx(0.4)
    lo, hi = p["f1_ci95"]
    # Five more right of ten, one fewer: ahead, but ten questions leave the lead wide open.
    assert 0.0 <= lo < 0.4 < hi and hi - lo > 0.5
    assert (p["contains_only_first"], p["contains_only_second"]) == (5, 1)
    assert paired(records, "hippobot", "bm25 top 5") == p  # seeded: the same report twice
    # A failed request is left out of both sides.
    records[0]["error"] = "ProviderError: 500"
    assert paired(records, "hippobot", "bm25 top 5")["questions"] == 9
    tied = paired([rec("hippobot", 1, 0.5, False), rec("bm25 top 5", 1, 0.5, False)], "hippobot", "bm25 top 5")
    assert tied["f1_ci95"] == [0.0, 0.0]


def test_the_subset_is_seeded_and_stratified(tmp_path: Path) -> None:
    convs = dataset.load(write(tmp_path / "synth.json", conversations=2))
    refs = select_questions(convs, 6, (1, 2, 4), seed=3)
    assert refs == select_questions(convs, 6, (1, 2, 4), seed=3)
    cats = [r.question.category for r in refs]
    assert sorted(set(cats)) == [1, 2, 4] and {r.conversation.sample_id for r in refs} == {"synth-1", "synth-2"}
    assert len(refs) == 6 and len({r.id for r in refs}) == 6


def test_qa_end_to_end_beside_both_baselines_then_resumed(
    tmp_path: Path, scripted_model: ScriptedModel, scripted_server: ScriptedServer, capsys
) -> None:
    data = write(tmp_path / "synth.json", conversations=2)
    scripted_model.fallback = reader
    out = tmp_path / "qa.json"
    args = ["--data", str(data), "--qa", "--endpoint", scripted_server.base_url, "--model", "scripted",
            "--conversations", "1-2", "--questions", "8", "--embedder", "off", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert set(summary) == {"hippobot", "no memory", "bm25 top 5"}
    assert all(summary[c]["all"]["questions"] == 8 and summary[c]["all"]["failed"] == 0 for c in summary)
    assert summary["no memory"]["all"]["f1"] == 0.0
    assert summary["hippobot"]["all"]["f1"] > 0.1  # the recalled line carried the answer
    assert summary["hippobot"]["all"]["evidence_recalled"] > 0.2
    hippo = [r for r in report["records"] if r["condition"] == "hippobot"]
    asked = [r for r in scripted_model.requests if "Answer with a short phrase" in r.last_user_text()]
    assert len(asked) == 24
    for request in asked[:8]:  # hippobot's: recalled memory in the message, not the system prompt
        assert "Pixel" not in request.messages[0]["content"]
    assert any("Memory recalled for this message" in r.last_user_text() for r in asked[:8])
    assert any(r["contains"] for r in hippo)
    table = capsys.readouterr().out
    assert "LoCoMo question answering" in table and "bm25 top 5" in table
    assert "hippobot - no memory: F1 +" in table and "paired bootstrap over 8 questions" in table
    assert report["against_baselines"]["no memory"]["f1_difference"] > 0.1

    # Resumed: nothing is asked again.
    before = len(scripted_model.requests)
    assert main(args) == 0
    assert len(scripted_model.requests) == before
    assert json.loads(out.read_text())["summary"] == summary


def test_an_endpoint_that_dies_fails_its_questions_and_the_run_goes_on(
    tmp_path: Path, scripted_model: ScriptedModel, scripted_server: ScriptedServer
) -> None:
    data = write(tmp_path / "synth.json", conversations=1)
    scripted_model.fallback = reader
    for _ in range(2):
        scripted_model.fail(500)
    out = tmp_path / "qa.json"
    args = ["--data", str(data), "--qa", "--endpoint", scripted_server.base_url, "--model", "scripted",
            "--conversations", "1", "--questions", "4", "--embedder", "off", "--out", str(out)]  # fmt: skip
    assert main(args) == 1  # some questions failed
    records = json.loads(out.read_text())["records"]
    failed = [r for r in records if r["error"]]
    assert len(failed) == 2 and len(records) == 12
    assert all("500" in r["error"] or "Provider" in r["error"] for r in failed)
    # The next run asks only the failed ones again.
    before = len(scripted_model.requests)
    assert main(args) == 0
    assert len(scripted_model.requests) - before == 2


def test_lifecycle_archives_every_session_and_dreams_before_the_questions(
    tmp_path: Path, scripted_model: ScriptedModel, scripted_server: ScriptedServer
) -> None:
    data = write(tmp_path / "synth.json", conversations=1)

    def archivist_or_reader(request: RecordedRequest) -> str:  # a summary answers an archive request
        return "- [durable] the session was archived" if is_archive_request(request) else reader(request)

    scripted_model.fallback = archivist_or_reader
    out = tmp_path / "qa.json"
    keep = tmp_path / "work"
    args = ["--data", str(data), "--qa", "--endpoint", scripted_server.base_url, "--model", "scripted",
            "--conversations", "1", "--questions", "2", "--embedder", "off", "--lifecycle",
            "--keep", str(keep), "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    memory = keep / "synth-1" / "workspace" / "memory"
    archived = [p.read_text() for p in memory.glob("history*.jsonl")]  # Dream moves what it read
    assert sum(len(t.splitlines()) for t in archived) >= 3  # each of the three sessions archived
    assert (keep / "synth-1" / "lifecycle-done").exists()
    assert len(json.loads(out.read_text())["records"]) == 6
