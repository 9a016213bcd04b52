"""Other agents' command lines, installed in throwaway venvs, for the one-shot comparison.

Each peer is one pinned requirement installed with ``python -m venv`` + ``pip`` (as
docs/evaluation.md installs nanobot), in a cache directory kept between runs:
``$HIPPOBOT_BENCH_CACHE``, else ``$XDG_CACHE_HOME/hippobot-bench``, else
``~/.cache/hippobot-bench``. A venv is built under a temporary name and renamed when ``pip``
succeeded, so an interrupted install is never taken for a finished one. When the package
index cannot be reached the peer is reported as not installed and the benchmark goes on.

Each peer also knows how to point itself at the scripted model: ``llm`` through an
``extra-openai-models.yaml`` in its own ``LLM_USER_PATH``, nanobot through its
``config.json`` (``provider: "custom"``), as :mod:`benchmarks.nanobot_eval` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PEERS", "Peer", "PeerSetup", "cache_dir", "ensure_checkout_venv", "ensure_installed"]

REPLY_MODEL = "scripted-model"
INSTALL_TIMEOUT_S = 900.0


def cache_dir() -> Path:
    explicit = os.environ.get("HIPPOBOT_BENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hippobot-bench"


@dataclass(frozen=True)
class PeerSetup:
    """A peer ready to answer one message: its command line, environment and home."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


@dataclass(frozen=True)
class Peer:
    name: str  # as shown in the table
    requirement: str  # pinned, so every run compares the same release
    script: str  # the console script the package installs
    setup: Callable[[Path, Path, str, str], PeerSetup]  # (script, home, api_base, message)


def _base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HIPPOBOT_", "OPENAI", "ANTHROPIC", "NANOBOT_", "LLM_"))}
    env.update(HOME=str(home), NO_COLOR="1", PATH=os.environ.get("PATH", "/usr/bin:/bin"))
    return env


def _llm(script: Path, home: Path, api_base: str, message: str) -> PeerSetup:
    """``llm -m stub MESSAGE``, with ``stub`` an OpenAI-compatible model at ``api_base``."""
    user = home / "llm"
    user.mkdir(parents=True, exist_ok=True)
    (user / "extra-openai-models.yaml").write_text(
        f"- model_id: stub\n  model_name: {REPLY_MODEL}\n  api_base: \"{api_base}\"\n"
        "  api_key_name: stub\n", encoding="utf-8")
    (user / "keys.json").write_text(json.dumps({"stub": "sk-bench-not-needed"}) + "\n", encoding="utf-8")
    env = _base_env(home)
    env["LLM_USER_PATH"] = str(user)
    return PeerSetup([str(script), "-m", "stub", message], env, home)


def _nanobot(script: Path, home: Path, api_base: str, message: str) -> PeerSetup:
    """``nanobot agent -m MESSAGE`` in a fresh ``~/.nanobot`` pointed at ``api_base``."""
    from benchmarks.nanobot_eval import NanobotHome, NanobotOptions, tiktoken_cache

    home.mkdir(parents=True, exist_ok=True)
    nb = NanobotHome(str(script), home, 300.0, 60.0, tiktoken_cache(home))
    if not (nb.dot / "config.json").exists():
        nb.run("onboard")
        nb.configure(api_base, REPLY_MODEL, "sk-bench-not-needed", NanobotOptions())
    return PeerSetup([str(script), "agent", "-m", message], dict(nb.env), home)


PEERS: tuple[Peer, ...] = (
    Peer("llm", "llm==0.36", "llm", _llm),
    Peer("nanobot", "nanobot-ai==0.3.5", "nanobot", _nanobot),
)


def ensure_installed(peer: Peer, cache: Path | None = None, *, log: Callable[[str], None] = print) -> Path | str:
    """The peer's console script, installing it first when needed; a string saying why not
    when it cannot be installed (no package index, pip failed)."""
    venv = (cache or cache_dir()) / "venvs" / peer.requirement.replace("==", "-")
    return _venv_script(venv, [peer.requirement], peer.script, peer.requirement, log)


def ensure_checkout_venv(checkout: Path, cache: Path | None = None, *,
                         log: Callable[[str], None] = print) -> Path | str:
    """``hippobot`` installed from ``checkout`` into a throwaway venv, as the peers are, so
    that the three one-shots start from the same kind of interpreter (a system
    site-packages may run ``.pth`` hooks at every start that a fresh venv does not).

    The install is editable: the venv runs the checkout's code as it is now, and it is
    rebuilt only when ``pyproject.toml`` (the dependencies) changes."""
    project = (checkout / "pyproject.toml").read_bytes()
    key = hashlib.sha256(str(checkout.resolve()).encode() + b"\0" + project).hexdigest()[:12]
    venv = (cache or cache_dir()) / "venvs" / f"hippobot-checkout-{key}"
    return _venv_script(venv, ["-e", str(checkout)], "hippobot", f"hippobot from {checkout}", log)


def _venv_script(venv: Path, requirement: list[str], script_name: str, what: str,
                 log: Callable[[str], None]) -> Path | str:
    """A venv counts as installed only once its marker file is written after ``pip``
    succeeded, so an interrupted install is redone, never taken for a finished one."""
    script, marker = venv / "bin" / script_name, venv / ".installed"
    if marker.exists() and script.exists():
        return script
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"installing {what} into {venv} (once; cached for later runs)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=120)
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--disable-pip-version-check", *requirement],
                             capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        return f"not installed ({type(exc).__name__}: {exc})"
    if pip.returncode != 0 or not script.exists():
        shutil.rmtree(venv, ignore_errors=True)
        tail = (pip.stderr or pip.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"not installed (pip install {what} failed: {tail[0][:200]})"
    marker.write_text(what + "\n", encoding="utf-8")
    return script
