"""A chat while Dream runs, on a local model: what the terminal shows, how long each takes,
and whether any request reaches the server twice or two at once.

    python -m benchmarks.local_contention --endpoint http://127.0.0.1:8081/v1 --model qwen2.5-coder-1.5b

A fresh hippobot home gets a few pending facts; ``hippobot dream`` starts, and once its first
request is at the server ``hippobot agent -m`` asks a question, its stderr on a
pseudo-terminal (stdout piped, as a script would). Every request goes through a timing proxy
(``benchmarks.recording_proxy``). The report (JSON on stdout): each request's kind, start,
end and status; how many overlapped; identical requests sent more than once; the chat's and
Dream's wall times and exit codes; the progress lines the terminal showed (the last reading
of each state). ``--hippobot 'CMD'`` runs another build (e.g. an older checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.recording_proxy import ProxyRecord, RecordingProxy
from hippobot.memory.history import HistorySource
from hippobot.memory.store import MemoryStore
from hippobot.testing.archivist import PHASE1_MARK, PHASE2_MARK

FACTS = [
    "User's sister Maren lives in Tromsø",
    "User rides a green cargo bike called Otto",
    "User is allergic to hazelnuts",
    "User plays the cello on Thursdays",
    "User's flat is on the fourth floor of Nordbahnstraße 12",
    "User works night shifts at the observatory",
]


class TimingProxy(RecordingProxy):
    """The recording proxy, with when each request began and ended."""

    def __init__(self, upstream: str, *, timeout: float) -> None:
        super().__init__(upstream, timeout=timeout)
        self.t0 = time.monotonic()
        self.started: list[tuple[float, ProxyRecord]] = []
        self.ended: dict[int, float] = {}

    def start_record(self, request: dict[str, Any]) -> ProxyRecord:
        record = super().start_record(request)
        with self._lock:
            self.started.append((time.monotonic() - self.t0, record))
        return record

    def finish_record(self, record: ProxyRecord) -> None:
        with self._lock:
            self.ended[id(record)] = time.monotonic() - self.t0
        super().finish_record(record)


def _kind(record: ProxyRecord) -> str:
    system = str(record.messages[0].get("content", "")) if record.messages else ""
    if PHASE1_MARK in system or PHASE2_MARK in system:
        return "dream"
    text = json.dumps(record.messages, ensure_ascii=False)
    return "archive" if "archive" in text[-2000:].lower() else "chat"


def _progress_lines(screen: str) -> list[str]:
    """Each state the progress line showed, at its last reading ("waiting for … · 37 s")."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    readings = [part.strip(" ⠁⠂⠄⡀⢀⠠⠐⠈⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏\n") for part in re.split(r"[\r\n]", plain)]
    last: dict[str, str] = {}
    for reading in readings:
        if not reading:
            continue
        state = reading.split(" · ")[0]
        last.pop(state, None)
        last[state] = reading
    return list(last.values())


def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(args.keep or tempfile.mkdtemp(prefix="hippobot-contention-"))
    workspace = home / "workspace"
    cmd = shlex.split(args.hippobot) if args.hippobot else [sys.executable, "-m", "hippobot"]
    with TimingProxy(args.endpoint, timeout=args.timeout + 60) as proxy:
        config = {
            "agents": {"defaults": {
                "model": args.model, "provider": "llamacpp", "workspace": str(workspace),
                "contextWindowTokens": args.context_window, "maxTokens": args.max_tokens,
                "dream": {"auto": False},
            }},
            "providers": {"llamacpp": {"apiBase": proxy.base_url}},
        }
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.json").write_text(json.dumps(config, indent=2))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
        env.update(HIPPOBOT_HOME=str(home), TERM="xterm", COLUMNS="120")
        subprocess.run([*cmd, "onboard"], env=env, capture_output=True, check=True)
        store = MemoryStore(workspace)
        for n, fact in enumerate(FACTS[: args.facts]):
            store.append_history(f"- [permanent] {fact}", session_key="cli:direct",
                                 source=HistorySource("cli:direct", 2 * n, 2 * n + 2))

        t0 = proxy.t0 = time.monotonic()
        dream = subprocess.Popen([*cmd, "dream"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        while not proxy.started and dream.poll() is None:
            time.sleep(0.05)
        time.sleep(args.chat_after)
        leader, follower = pty.openpty()
        chat_start = time.monotonic() - t0
        chat = subprocess.Popen([*cmd, "agent", "-m", args.message], env=env, stdout=subprocess.PIPE,
                                stderr=follower, stdin=subprocess.DEVNULL)
        os.close(follower)
        screen = bytearray()
        done = threading.Event()

        def read_terminal() -> None:
            while not done.is_set():
                ready, _, _ = select.select([leader], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(leader, 65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    screen.extend(chunk)

        reader = threading.Thread(target=read_terminal, daemon=True)
        reader.start()
        reply, _ = chat.communicate()
        chat_end = time.monotonic() - t0
        done.set()
        reader.join(2)
        os.close(leader)
        dream_out, dream_err = dream.communicate()
        dream_end = time.monotonic() - t0

    started = sorted(proxy.started, key=lambda item: item[0])
    requests = []
    for start, record in started:
        end = proxy.ended.get(id(record))
        requests.append({"kind": _kind(record), "start_s": round(start, 1),
                         "end_s": None if end is None else round(end, 1), "status": record.status,
                         "error": record.error, "prompt_tokens": record.prompt_tokens})
    overlaps = sum(1 for i, a in enumerate(requests) for b in requests[i + 1:]
                   if a["end_s"] is None or b["start_s"] < a["end_s"])
    bodies = [json.dumps(r.messages, sort_keys=True) for _, r in started]
    return {
        "home": str(home),
        "chat": {"start_s": round(chat_start, 1), "end_s": round(chat_end, 1),
                 "seconds": round(chat_end - chat_start, 1), "exit": chat.returncode,
                 "stdout": reply.decode("utf-8", "replace")},
        "dream": {"seconds": round(dream_end, 1), "exit": dream.returncode,
                  "stdout": dream_out[-600:], "stderr": dream_err[-600:]},
        "terminal": _progress_lines(screen.decode("utf-8", "replace")),
        "requests": requests,
        "overlapping_pairs": overlaps,
        "sent_twice": len(bodies) - len(set(bodies)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.local_contention",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", required=True, help="the model server's OpenAI-compatible base URL")
    p.add_argument("--model", required=True)
    p.add_argument("--context-window", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--facts", type=int, default=4, help="pending history entries for Dream")
    p.add_argument("--message", default="In one sentence: what is a good name for a cargo bike?")
    p.add_argument("--chat-after", type=float, default=2.0, help="seconds after Dream's first request")
    p.add_argument("--timeout", type=float, default=900.0, help="the proxy's upstream timeout base")
    p.add_argument("--hippobot", default="", help="command that runs hippobot (default: this one)")
    p.add_argument("--keep", default="", help="hippobot home to use and keep")
    args = p.parse_args(argv)
    print(json.dumps(run(args), indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
