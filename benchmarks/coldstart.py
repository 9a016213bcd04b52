"""Cold start of the real command line, and where its import time goes.

*Cold start* is ``hippobot agent -m "..."`` from ``exec`` of the interpreter until the model
receives the first request: interpreter start, imports (the OpenAI SDK included, since the
request goes through it), loading config and the session, building the prompt, and the HTTP
request to :class:`ScriptedServer` on 127.0.0.1. The server's fallback notes the arrival
time on the benchmark's clock, so there is no clock skew between the two processes.
The child's peak RSS comes from ``wait4``.

Import time comes from ``python -X importtime``: once for ``import hippobot.cli.main``, and
once for a whole ``agent -m`` run (which also imports what the command loads lazily),
summed per top-level package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.turns import peak_rss_mb
from benchmarks.workload import bench_env
from hippobot.testing.scripted import RecordedRequest, ScriptedModel
from hippobot.testing.server import ScriptedServer

__all__ = ["Arrivals", "cli_command", "cold_start", "import_times", "process_start"]

MESSAGE = "What did we decide about the database backups?"


@dataclass
class Arrivals:
    """First-request times noted by the server thread, one per run."""

    first: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: RecordedRequest) -> str:
        now = time.perf_counter()
        with self.lock:
            if self.first is None:
                self.first = now
        return "Nightly dumps at 02:00, kept for 30 days."


def cli_command() -> list[str]:
    """The installed ``hippobot`` script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("hippobot")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "hippobot"]


def _child_env(home: Path, api_base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env.update(bench_env(home, api_base))
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    return env


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, float]:
    """Exit code and peak RSS (MB) of a child: its ``VmHWM``, polled until it exits
    (``ru_maxrss`` from ``wait4`` would include this parent's size, see
    :func:`benchmarks.turns.peak_rss_mb`)."""
    deadline = time.monotonic() + timeout
    peak = 0.0
    while True:
        rss = peak_rss_mb(proc.pid)
        peak = max(peak, rss or 0.0)
        pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, peak
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            return -9, peak
        time.sleep(0.002)


def cold_start(template: Path, work: Path, runs: int, *, timeout: float = 120.0) -> dict[str, Any]:
    """``runs`` cold starts, each on a fresh copy of the home ``template``."""
    arrivals = Arrivals()
    model = ScriptedModel()
    model.fallback = arrivals.answer
    samples: list[dict[str, Any]] = []
    with _served(model) as server:
        for r in range(runs):
            home = work / f"cold-{r}"
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(template, home, symlinks=True)
            arrivals.first = None
            command = [*cli_command(), "agent", "-m", MESSAGE]
            t0 = time.perf_counter()
            proc = subprocess.Popen(command, env=_child_env(home, server.base_url),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            code, rss = _wait(proc, timeout)
            t_exit = time.perf_counter()
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
            if code != 0 or arrivals.first is None:
                raise RuntimeError(f"hippobot agent -m failed (exit {code}): {err.strip()[-800:]}")
            samples.append({"first_request_s": arrivals.first - t0, "exit_s": t_exit - t0,
                            "peak_rss_mb": rss})
            shutil.rmtree(home, ignore_errors=True)
            model.requests.clear()
    return {"command": " ".join(Path(c).name for c in cli_command()) + " agent -m",
            "samples": samples}


class _served:
    def __init__(self, model: ScriptedModel) -> None:
        self.server = ScriptedServer(model)

    def __enter__(self) -> ScriptedServer:
        return self.server.start()

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def process_start(code: str, runs: int) -> list[float]:
    """Seconds for ``python -c code`` from spawn to exit (interpreter start baselines)."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def parse_importtime(stderr: str) -> dict[str, float]:
    """Cumulative seconds per top-level package from ``-X importtime`` output."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "[us]" in line:
            continue
        _self, cumulative, name = line.split("|", 2)
        name = name.rstrip()
        if len(name) - len(name.lstrip()) != 1:  # one space after the bar: top level
            continue
        package = name.strip().split(".")[0]
        totals[package] = totals.get(package, 0.0) + int(cumulative) / 1e6
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def import_times(template: Path, work: Path) -> dict[str, Any]:
    """``-X importtime`` of the CLI module alone and of a whole ``agent -m`` run."""
    cli = subprocess.run([sys.executable, "-X", "importtime", "-c", "import hippobot.cli.main"],
                         capture_output=True, text=True, check=True)
    cli_import = parse_importtime(cli.stderr)
    model = ScriptedModel()
    model.fallback = Arrivals().answer
    home = work / "importtime"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home, symlinks=True)
    with _served(model) as server:
        run = subprocess.run([sys.executable, "-X", "importtime", "-m", "hippobot", "agent", "-m", MESSAGE],
                             env=_child_env(home, server.base_url), capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120)
    shutil.rmtree(home, ignore_errors=True)
    if run.returncode != 0:
        raise RuntimeError(f"importtime run failed: {run.stderr[-800:]}")
    agent_import = parse_importtime(run.stderr)
    return {
        "cli_import_s": sum(cli_import.values()),
        "cli_top": _top(cli_import),
        "agent_run_import_s": sum(agent_import.values()),
        "agent_run_top": _top(agent_import),
    }


def _top(totals: dict[str, float], n: int = 8) -> dict[str, float]:
    return {k: round(v, 4) for k, v in list(totals.items())[:n]}
