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

from benchmarks import ROOT
from benchmarks.turns import peak_rss_mb
from benchmarks.workload import bench_env
from hippobot.testing.scripted import RecordedRequest, ScriptedModel
from hippobot.testing.server import ScriptedServer

__all__ = [
    "Arrivals",
    "OneShot",
    "cli_command",
    "cold_start",
    "compare_one_shots",
    "import_times",
    "process_start",
    "run_one_shot",
]

MESSAGE = "What did we decide about the database backups?"
VENV_ROW = "hippobot-venv"
REPLY = "Nightly dumps at 02:00, kept for 30 days."


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
        return REPLY


def cli_command() -> list[str]:
    """The installed ``hippobot`` script next to this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("hippobot")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "hippobot"]


def _child_env(home: Path, api_base: str) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE left out: without bytecode every run would compile hippobot's
    # source again (~0.2 s), which an installed copy (or llm's, or nanobot's) never does; the
    # untimed warm-up run writes it.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_")) and k != "PYTHONDONTWRITEBYTECODE"}
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


# --- one-shot side by side: hippobot, llm, nanobot -----------------------------------------


@dataclass
class OneShot:
    """One process answering one message: seconds from spawn until the whole reply was on
    its stdout and until it exited, and its peak RSS."""

    reply_s: float | None
    exit_s: float
    peak_rss_mb: float
    code: int
    stderr: str = ""


def run_one_shot(argv: list[str], env: dict[str, str], cwd: Path | None = None, *,
                 reply: str = REPLY, timeout: float = 120.0) -> OneShot:
    """Spawn ``argv``; a reader thread notes when ``reply`` is complete on its stdout (the
    bytes as they arrive, on this process's clock) while this thread polls its ``VmHWM``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: dict[str, float] = {}
    want = reply.encode()
    stderr: list[bytes] = []

    def read_out() -> None:
        assert proc.stdout is not None
        buf = b""
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk
            if "reply" not in seen and want in buf:
                seen["reply"] = time.perf_counter()

    def read_err() -> None:
        assert proc.stderr is not None
        stderr.append(proc.stderr.read())

    readers = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in readers:
        t.start()
    code, rss = _wait(proc, timeout)
    t_exit = time.perf_counter()
    for t in readers:
        t.join(5)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    got = seen.get("reply")
    return OneShot(None if got is None else got - t0, t_exit - t0, rss, code,
                   b"".join(stderr).decode(errors="replace"))


def _hippobot_one_shot(template: Path, home: Path, api_base: str, message: str,
                       command: list[str] | None = None) -> Any:
    from benchmarks.peers import PeerSetup

    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home, symlinks=True)
    return PeerSetup([*(command or cli_command()), "agent", "-m", message], _child_env(home, api_base), home)


def _checkout() -> Path | None:
    """The source checkout this benchmark runs from, when it is one (a pyproject beside it)."""
    return ROOT if (ROOT / "pyproject.toml").exists() and (ROOT / "src" / "hippobot").is_dir() else None


def compare_one_shots(template: Path, work: Path, runs: int, *, peers: bool = True,
                      log: Any = None) -> dict[str, Any]:
    """hippobot's ``agent -m``, ``llm``'s and nanobot's one-shot against the same scripted
    model, alternating run by run (one untimed warm-up each), plus ``hippobot --help``.

    A peer that cannot be installed (no package index) is reported as not installed; with
    ``peers`` off none is tried (the quick run)."""
    from benchmarks.peers import PEERS, ensure_checkout_venv, ensure_installed

    say = log or (lambda msg: None)
    model = ScriptedModel()
    model.fallback = lambda request: REPLY
    setups: dict[str, Any] = {}
    status: dict[str, str] = {"hippobot": "this checkout, this interpreter"}
    with _served(model) as server:
        setups["hippobot"] = _hippobot_one_shot(template, work / "oneshot-hippobot", server.base_url, MESSAGE)
        checkout = _checkout()
        if peers and checkout is not None:
            # the like-for-like row: hippobot from the same kind of venv as llm and nanobot
            script = ensure_checkout_venv(checkout, log=say)
            if isinstance(script, str):
                status[VENV_ROW] = script
            else:
                setups[VENV_ROW] = _hippobot_one_shot(template, work / "oneshot-hippobot-venv",
                                                      server.base_url, MESSAGE, [str(script)])
                status[VENV_ROW] = f"this checkout, in a venv ({script.parent.parent})"
        for peer in PEERS:
            if not peers:
                status[peer.name] = "not run (--quick skips the third-party installs)"
                continue
            script = ensure_installed(peer, log=say)
            if isinstance(script, str):
                status[peer.name] = script
                continue
            home = work / f"oneshot-{peer.name}"
            shutil.rmtree(home, ignore_errors=True)
            try:
                setups[peer.name] = peer.setup(script, home, server.base_url, MESSAGE)
            except Exception as exc:  # a peer that cannot be configured: say so, go on
                status[peer.name] = f"not configured ({type(exc).__name__}: {str(exc)[:200]})"
                continue
            status[peer.name] = f"{peer.requirement} ({script.parent.parent})"
        samples: dict[str, list[OneShot]] = {name: [] for name in setups}
        for r in range(runs + 1):  # run 0 warms caches (pyc files, first-run set-up) and is dropped
            for name, setup in list(setups.items()):
                sample = run_one_shot(setup.argv, setup.env, setup.cwd)
                if sample.code == 0 and sample.reply_s is not None:
                    if r:
                        samples[name].append(sample)
                    continue
                if name == "hippobot":
                    raise RuntimeError(f"hippobot agent -m failed (exit {sample.code}): "
                                       f"{sample.stderr.strip()[-800:]}")
                status[name] = f"failed (exit {sample.code}): {sample.stderr.strip()[-300:]}"
                del setups[name], samples[name]
    help_runs = [run_one_shot([*cli_command(), "--help"], _child_env(work, "http://127.0.0.1:9/v1"),
                              reply="Usage") for _ in range(runs)]
    return {"runs": runs, "message": MESSAGE, "status": status,
            "samples": {name: [{"reply_s": s.reply_s, "exit_s": s.exit_s, "peak_rss_mb": s.peak_rss_mb}
                               for s in got] for name, got in samples.items()},
            "help": [{"exit_s": s.exit_s, "peak_rss_mb": s.peak_rss_mb} for s in help_runs]}


def one_shot_table(result: dict[str, Any]) -> str:
    """The side-by-side table of :func:`compare_one_shots` (medians over the runs)."""
    from benchmarks.report import spread

    rows = []
    base = result["samples"].get("llm")
    base_m = {k: spread(s[k] for s in base)["median"] for k in ("reply_s", "exit_s", "peak_rss_mb")} if base else None
    for name, state in result["status"].items():
        got = result["samples"].get(name)
        if not got:
            rows.append(f"{name:<14} {state}")
            continue
        m = {k: spread(s[k] for s in got) for k in ("reply_s", "exit_s", "peak_rss_mb")}
        ratio = ""
        if base_m and name != "llm":
            ratio = "  vs llm: " + ", ".join(f"{m[k]['median'] / base_m[k]:.2f}x" for k in ("reply_s", "exit_s", "peak_rss_mb"))
        rows.append(f"{name:<14} reply {m['reply_s']['median']:.3f} s [{m['reply_s']['min']:.3f}-{m['reply_s']['max']:.3f}]"
                    f"  exit {m['exit_s']['median']:.3f} s [{m['exit_s']['min']:.3f}-{m['exit_s']['max']:.3f}]"
                    f"  peak RSS {m['peak_rss_mb']['median']:.0f} MB{ratio}")
    helps = result.get("help") or []
    if helps:
        h = {k: spread(s[k] for s in helps) for k in ("exit_s", "peak_rss_mb")}
        rows.append(f"{'--help':<14} hippobot --help exit {h['exit_s']['median']:.3f} s "
                    f"[{h['exit_s']['min']:.3f}-{h['exit_s']['max']:.3f}]  peak RSS {h['peak_rss_mb']['median']:.0f} MB")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.coldstart [--runs N] [--no-peers]``: the one-shot comparison alone."""
    import argparse
    import tempfile

    from benchmarks.workload import Workload, prepare_home

    parser = argparse.ArgumentParser(prog="python -m benchmarks.coldstart", description=main.__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--turns", type=int, default=50, help="turns in the hippobot session (default 50)")
    parser.add_argument("--no-peers", action="store_true", help="hippobot only (no installs)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hippobot-oneshot-"))
    try:
        template = work / "template"
        prepare_home(template, args.turns, context_window=128_000, workload=Workload())
        result = compare_one_shots(template, work, args.runs, peers=not args.no_peers,
                                   log=lambda m: sys.stderr.write(m + "\n"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(one_shot_table(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
