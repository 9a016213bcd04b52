"""Skills: Markdown instructions the model reads when a task calls for them.

A skill is ``<root>/<name>/SKILL.md`` with YAML front matter::

    ---
    name: weather
    description: Look up the forecast with curl and wttr.in
    always: false            # true: the whole body goes into every system prompt
    requires: {bins: [curl], env: [WTTR_KEY]}
    ---
    # Weather
    ...

Roots are the workspace's ``skills/`` and the skills shipped with hippobot; a workspace
skill overrides a built-in one of the same name.

Parsed front matter is kept between processes in ``.hippobot/skills.json``, by the digest of
its text (:class:`FrontMatterCache`), so a start whose skills did not change never imports
the YAML parser (~15 ms).

Invariants:

* Scanning never raises: a broken file is returned as a :class:`Skill` with ``invalid`` set.
* Files are re-parsed only when their stat key changes (see :class:`~.loader.FileCache`);
  availability (binaries on PATH, environment variables) is re-checked on every call, and
  when nothing changed the very same tuple object is returned, so callers can cache on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from hippobot.atomic import atomic_write_text
from hippobot.context.loader import RACY_WINDOW_NS, FileCache, FileText
from hippobot.workspace import Workspace

__all__ = ["SKILL_FILE", "FrontMatterCache", "Skill", "SkillsIndex", "builtin_skills_dir", "parse_skill"]

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Skill:
    """One skill. ``invalid`` is the reason it could not be parsed (then ``body`` is empty);
    ``reason`` says why a valid skill is unavailable (missing binary or env variable)."""

    name: str
    description: str
    path: Path
    always: bool = False
    available: bool = True
    reason: str | None = None
    body: str = ""
    invalid: str | None = None
    builtin: bool = False
    requires_bins: tuple[str, ...] = ()
    requires_env: tuple[str, ...] = ()


def builtin_skills_dir() -> Path:
    """Where the skills shipped with hippobot live (a real directory in the package)."""
    return Path(str(resources.files("hippobot").joinpath("skills")))


def _split_front_matter(text: str) -> tuple[str, str] | None:
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]).strip("\n")
    return None


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"requires.{what} must be a list of names")
    return tuple(value)


def _fields(meta: Any) -> dict[str, Any]:
    """Validated front-matter fields; ValueError names the first problem."""
    if not isinstance(meta, dict):
        raise ValueError("front matter is not a mapping of keys")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("missing name")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("missing description")
    always = meta.get("always", False)
    if not isinstance(always, bool):
        raise ValueError("always must be true or false")
    requires = meta.get("requires") or {}
    if not isinstance(requires, dict):
        raise ValueError("requires must be a mapping with bins and env")
    return {
        "name": name.strip(),
        "description": " ".join(description.split()),
        "always": always,
        "requires_bins": _names(requires.get("bins"), "bins"),
        "requires_env": _names(requires.get("env"), "env"),
    }


def read_front_matter(header: str) -> dict[str, Any] | str:
    """The validated fields of a front matter, or why it is not valid."""
    import yaml  # imported for a header not parsed before only: see FrontMatterCache

    try:
        return _fields(yaml.safe_load(header))
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        return f"broken front matter: {problem}"
    except ValueError as exc:
        return str(exc)


def parse_skill(
    text: str, path: Path, *, builtin: bool = False,
    front_matter: Callable[[str], dict[str, Any] | str] = read_front_matter,
) -> Skill:
    """A skill from its SKILL.md text; never raises (problems go to ``invalid``).
    ``front_matter`` reads the header (:func:`read_front_matter`, or a cache of it).

    Availability is not checked here; see :meth:`SkillsIndex.skills`.
    """
    fallback_name = path.parent.name
    split = _split_front_matter(text)
    if split is None:
        return Skill(fallback_name, "", path, builtin=builtin,
                     invalid="missing front matter (--- name, description ---)")
    header, body = split
    fields = front_matter(header)
    if isinstance(fields, str):
        return Skill(fallback_name, "", path, builtin=builtin, invalid=fields)
    return Skill(path=path, body=body, builtin=builtin, **fields)


class FrontMatterCache:
    """:func:`read_front_matter`'s answers by the digest of the header's text, kept in
    ``path`` between processes (None: in memory only). The answer is a function of the
    text alone, so an entry is never stale; :meth:`save` keeps the headers of the last scan.
    ``write`` off (read-only commands): the file is read, never written."""

    VERSION = 1

    def __init__(self, path: Path | None, *, write: bool = True) -> None:
        self.path = path
        self.write = write and path is not None
        self._known: dict[str, dict[str, Any] | str] | None = None
        self._used: set[str] = set()
        self._dirty = False
        self._lock = threading.Lock()

    def __call__(self, header: str) -> dict[str, Any] | str:
        key = hashlib.blake2b(header.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        with self._lock:
            known = self._load()
            found = known.get(key)
            self._used.add(key)
        if found is None:
            found = read_front_matter(header)
            with self._lock:
                known[key] = found
                self._dirty = True
        return dict(found) if isinstance(found, dict) else found

    def _load(self) -> dict[str, dict[str, Any] | str]:
        if self._known is None:
            self._known = {}
            if self.path is not None:
                self._known = _decode_front_matter(self.path)
        return self._known

    def save(self) -> None:
        """Write what the scans parsed, if anything was new (never raises)."""
        with self._lock:
            if not (self._dirty and self.write and self.path is not None):
                return
            known = self._load()
            entries = {k: _encode_entry(v) for k, v in known.items() if k in self._used}
            self._dirty = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"version": self.VERSION, "entries": entries}))
        except OSError as exc:  # derived state: the next start parses again
            log.debug("could not keep the skills' front matter in %s: %s", self.path, exc)


def _encode_entry(value: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(value, str):
        return {"invalid": value}
    return {"fields": {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}}


def _decode_front_matter(path: Path) -> dict[str, dict[str, Any] | str]:
    """The entries of a cache file; anything unreadable or malformed is left out (and parsed
    again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != FrontMatterCache.VERSION:
        return {}
    entries = data.get("entries")
    out: dict[str, dict[str, Any] | str] = {}
    for key, entry in (entries.items() if isinstance(entries, dict) else ()):
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("invalid"), str):
            out[key] = entry["invalid"]
            continue
        fields = entry.get("fields")
        if not isinstance(fields, dict):
            continue
        try:  # the same validation a freshly parsed header gets
            out[key] = _fields({
                "name": fields["name"], "description": fields["description"],
                "always": fields["always"],
                "requires": {"bins": fields["requires_bins"] or None, "env": fields["requires_env"] or None},
            })
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _missing(skill: Skill, env: Mapping[str, str], which: Callable[[str], str | None]) -> str | None:
    reasons = []
    bins = [b for b in skill.requires_bins if which(b) is None]
    if bins:
        reasons.append("missing binary: " + ", ".join(bins))
    names = [e for e in skill.requires_env if not env.get(e)]
    if names:
        reasons.append("missing env: " + ", ".join(names))
    return "; ".join(reasons) or None


class SkillsIndex:
    """The skills of a workspace plus the built-in ones, sorted by name.

    ``env`` is the environment availability is checked against (``None``: the process
    environment, read at call time); ``which`` finds binaries (``shutil.which``);
    ``front_matter`` keeps parsed headers (default: in this process only).
    """

    def __init__(
        self,
        workspace: Path,
        builtin: bool = True,
        *,
        env: Mapping[str, str] | None = None,
        which: Callable[[str], str | None] = shutil.which,
        builtin_dir: Path | None = None,
        cache: FileCache | None = None,
        max_skill_chars: int = 20_000,
        front_matter: FrontMatterCache | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        self._roots: list[tuple[Path, bool]] = []
        if builtin:
            self._roots.append((builtin_dir or builtin_skills_dir(), True))
        self._roots.append((Workspace(self.workspace).skills_dir, False))  # later roots override
        self._env = env
        self._which = which
        self._files = cache or FileCache(max_chars=max_skill_chars)
        self._front = front_matter or FrontMatterCache(None)
        self._dirs: dict[Path, tuple[tuple[int, int], tuple[Path, ...]]] = {}
        self._parsed: dict[Path, tuple[FileText, Skill]] = {}
        self._last: tuple[Skill, ...] = ()
        self._lock = threading.Lock()

    @property
    def disk_reads(self) -> int:
        return self._files.disk_reads

    def skills(self) -> tuple[Skill, ...]:
        """All skills (valid, unavailable and invalid), sorted by name."""
        env = self._env if self._env is not None else os.environ
        by_name: dict[str, Skill] = {}
        for root, is_builtin in self._roots:
            for skill_dir in self._subdirs(root):
                # a workspace skill may link elsewhere in the workspace, never out of it
                within = root if is_builtin else self.workspace
                skill = self._parse(skill_dir / SKILL_FILE, is_builtin, within)
                if skill is not None:
                    by_name[skill.name] = skill
        self._front.save()
        result = []
        for name in sorted(by_name):
            skill = by_name[name]
            if skill.invalid is None:
                reason = _missing(skill, env, self._which)
                if reason is not None:
                    skill = replace(skill, available=False, reason=reason)
            result.append(skill)
        current = tuple(result)
        with self._lock:
            if current == self._last:
                return self._last  # same object: callers can cache on identity
            self._last = current
        return current

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills() if s.name == name), None)

    def _subdirs(self, root: Path) -> tuple[Path, ...]:
        try:
            st = root.stat()
        except OSError:
            return ()
        key = (st.st_mtime_ns, st.st_ino)
        cached = self._dirs.get(root)
        if cached and cached[0] == key and st.st_mtime_ns < time.time_ns() - RACY_WINDOW_NS:
            return cached[1]  # a recently changed directory is listed again (coarse mtimes)
        try:
            subdirs = tuple(sorted(p for p in root.iterdir() if p.is_dir()))
        except OSError:
            subdirs = ()
        self._dirs[root] = (key, subdirs)
        return subdirs

    def _parse(self, path: Path, is_builtin: bool, within: Path) -> Skill | None:
        text = self._files.read(path, within=within)
        if not text.exists:
            self._parsed.pop(path, None)
            return None
        cached = self._parsed.get(path)
        if cached and cached[0] is text:
            return cached[1]
        skill = parse_skill(text.text, path, builtin=is_builtin, front_matter=self._front)
        self._parsed[path] = (text, skill)
        return skill
