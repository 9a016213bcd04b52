"""A real ``hippobot serve`` process for tests: started, its stderr read line by line, stopped.

Tests that need the process itself (signals, file-descriptor limits, a browser talking to it)
use :func:`spawn_serve`; everything else runs the app in-process. The process points at the
scripted model through the usual environment variables, so it is configured the way a user's
would be.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TEST_API_KEY", "ServeProcess", "process_running", "spawn_serve"]

TEST_API_KEY = "sk-test-key-000000000000"


@dataclass
class ServeProcess:
    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    reader: threading.Thread
    seen: list[str] = field(default_factory=list)  # every stderr line read so far

    def wait_line(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """The first stderr line from now on matching ``pattern``; fails if the process exits."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "hippobot serve exited early:\n" + "".join(self.seen)
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout``; drain what it said."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get() or "")


def spawn_serve(
    home: Path,
    model_url: str,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> ServeProcess:
    """``hippobot serve --port 0 ARGS`` on ``home``, its model the scripted one at ``model_url``."""
    full_env = dict(
        os.environ,
        HIPPOBOT_HOME=str(home),
        HIPPOBOT_MODEL="scripted-model",
        HIPPOBOT_API_BASE=model_url,
        HIPPOBOT_API_KEY=TEST_API_KEY,
        **(env or {}),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hippobot", "serve", "--port", "0", *args],
        env=full_env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec_fn,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return ServeProcess(proc, lines, reader)


def process_running(pid: int) -> bool:
    """Whether ``pid`` still runs; a zombie waiting for its parent to reap it has ended."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the kernel (a zombie then counts as running)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
