"""Skills: front matter, availability, invalid files listed (never raised), overrides."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hippobot.context.skills import FrontMatterCache, SkillsIndex, builtin_skills_dir


def skill(ws: Path, name: str, text: str) -> Path:
    path = ws / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    past = time.time() - 60
    os.utime(path, (past, past))
    return path


def no_bins(_name: str) -> str | None:
    return None


def index(ws: Path, **kw) -> SkillsIndex:
    kw.setdefault("env", {})
    kw.setdefault("which", lambda name: f"/usr/bin/{name}")
    return SkillsIndex(ws, **kw)


def by_name(idx: SkillsIndex) -> dict:
    return {s.name: s for s in idx.skills()}


def test_builtin_skills_ship_with_the_package(tmp_path):
    skills = by_name(index(tmp_path))
    assert {"memory", "skill-creator"} <= set(skills)
    memory = skills["memory"]
    assert memory.builtin and memory.available and not memory.always and memory.invalid is None
    assert "edit_file" in memory.body and not memory.body.startswith("---")
    assert memory.path == builtin_skills_dir() / "memory" / "SKILL.md"


def test_valid_skill_is_parsed(tmp_path):
    skill(tmp_path, "weather", "---\nname: weather\ndescription: Get the forecast\n---\n# Weather\nUse curl.\n")
    s = by_name(index(tmp_path, builtin=False))["weather"]
    assert (s.description, s.body, s.always, s.available) == ("Get the forecast", "# Weather\nUse curl.", False, True)
    assert s.path == tmp_path / "skills" / "weather" / "SKILL.md"


def test_always_on_skill(tmp_path):
    skill(tmp_path, "tone", "---\nname: tone\ndescription: House style\nalways: true\n---\nNo emojis.\n")
    assert by_name(index(tmp_path, builtin=False))["tone"].always is True


def test_missing_binary_makes_a_skill_unavailable_with_the_reason(tmp_path):
    skill(tmp_path, "video", "---\nname: video\ndescription: Cut videos\nrequires:\n  bins: [ffmpeg]\n---\nbody\n")
    s = by_name(index(tmp_path, builtin=False, which=no_bins))["video"]
    assert not s.available and s.reason == "missing binary: ffmpeg"


def test_missing_env_makes_a_skill_unavailable_with_the_reason(tmp_path):
    skill(tmp_path, "gh", "---\nname: gh\ndescription: GitHub issues\nrequires: {env: [GITHUB_TOKEN]}\n---\nbody\n")
    assert by_name(index(tmp_path, builtin=False))["gh"].reason == "missing env: GITHUB_TOKEN"
    ok = by_name(index(tmp_path, builtin=False, env={"GITHUB_TOKEN": "t0k"}))["gh"]
    assert ok.available and ok.reason is None


def test_broken_files_are_listed_as_invalid_never_raised(tmp_path):
    skill(tmp_path, "yaml-broken", "---\nname: [unclosed\ndescription: x\n---\nbody\n")
    skill(tmp_path, "no-desc", "---\nname: no-desc\n---\nbody\n")
    skill(tmp_path, "no-front", "# Just markdown\n")
    skill(tmp_path, "bad-always", "---\nname: bad-always\ndescription: d\nalways: sometimes\n---\n")
    skills = by_name(index(tmp_path, builtin=False))
    assert skills["yaml-broken"].invalid.startswith("broken front matter")
    assert skills["no-desc"].invalid == "missing description"
    assert "missing front matter" in skills["no-front"].invalid
    assert skills["bad-always"].invalid == "always must be true or false"


def test_workspace_skill_overrides_builtin_of_same_name(tmp_path):
    skill(tmp_path, "memory", "---\nname: memory\ndescription: My own memory rules\n---\nmine\n")
    s = by_name(index(tmp_path))["memory"]
    assert s.description == "My own memory rules" and not s.builtin


def test_new_and_edited_skills_show_up_and_unchanged_ones_are_not_reparsed(tmp_path):
    idx = index(tmp_path, builtin=False)
    assert idx.skills() == ()
    skill(tmp_path, "a", "---\nname: a\ndescription: first\n---\n")
    first = idx.skills()
    assert [s.name for s in first] == ["a"]
    reads = idx.disk_reads
    assert idx.skills() is first  # unchanged: same object, nothing read
    assert idx.disk_reads == reads
    skill(tmp_path, "a", "---\nname: a\ndescription: second version\n---\n")
    assert idx.skills()[0].description == "second version"


def test_skills_are_sorted_by_name(tmp_path):
    for name in ("zeta", "alpha", "mid"):
        skill(tmp_path, name, f"---\nname: {name}\ndescription: d\n---\n")
    assert [s.name for s in index(tmp_path, builtin=False).skills()] == ["alpha", "mid", "zeta"]


# --- front matter kept between processes ------------------------------------------------


def _kept(ws: Path, **kw) -> SkillsIndex:
    return index(ws, front_matter=FrontMatterCache(ws / ".hippobot" / "skills.json", **kw))


def test_a_later_process_reads_the_same_skills_from_the_kept_front_matter(tmp_path):
    skill(tmp_path, "video", "---\nname: video\ndescription: Cut  videos\nrequires:\n  bins: [ffmpeg]\n  env: [KEY]\n---\nbody\n")
    skill(tmp_path, "broken", "---\nname: [unclosed\n---\nbody\n")
    skill(tmp_path, "nameless", "---\ndescription: no name\n---\nbody\n")
    first = _kept(tmp_path).skills()
    assert (tmp_path / ".hippobot" / "skills.json").exists()
    again = _kept(tmp_path).skills()  # a new index: answers from the file, not from YAML
    assert again == first
    kept = {s.name: s for s in again}
    assert kept["video"].requires_bins == ("ffmpeg",) and kept["video"].description == "Cut videos"
    assert kept["broken"].invalid.startswith("broken front matter")
    assert kept["nameless"].invalid == "missing name"


def test_an_edited_skill_is_parsed_again(tmp_path):
    skill(tmp_path, "tone", "---\nname: tone\ndescription: House style\n---\nNo emojis.\n")
    _kept(tmp_path).skills()
    skill(tmp_path, "tone", "---\nname: tone\ndescription: Plain words only\nalways: true\n---\nNo emojis.\n")
    tone = by_name(_kept(tmp_path))["tone"]
    assert (tone.description, tone.always) == ("Plain words only", True)


def test_a_damaged_front_matter_file_is_ignored_and_rewritten(tmp_path):
    skill(tmp_path, "tone", "---\nname: tone\ndescription: House style\n---\nbody\n")
    cache = tmp_path / ".hippobot" / "skills.json"
    cache.parent.mkdir()
    cache.write_text('{"version": 1, "entries": {"x": {"fields": {"name": 3}}}', encoding="utf-8")
    assert by_name(_kept(tmp_path))["tone"].description == "House style"
    assert "House style" in cache.read_text(encoding="utf-8")


def test_reading_only_never_writes_the_front_matter_file(tmp_path):
    skill(tmp_path, "tone", "---\nname: tone\ndescription: House style\n---\nbody\n")
    assert by_name(_kept(tmp_path, write=False))["tone"].description == "House style"
    assert not (tmp_path / ".hippobot").exists()


def test_a_start_whose_skills_did_not_change_loads_no_yaml_parser(tmp_path):
    skill(tmp_path, "tone", "---\nname: tone\ndescription: House style\n---\nbody\n")
    code = (
        "import sys; from pathlib import Path; from hippobot.context.skills import FrontMatterCache, SkillsIndex\n"
        f"ws = Path({str(tmp_path)!r})\n"
        "names = [s.name for s in SkillsIndex(ws, env={}, front_matter=FrontMatterCache(ws / '.hippobot' / 'skills.json')).skills()]\n"
        "print(sorted(names), 'yaml' in sys.modules)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0].split("]")[0] == runs[1].split("]")[0] and "'tone'" in runs[0]
    assert runs[0].strip().endswith("True") and runs[1].strip().endswith("False")
