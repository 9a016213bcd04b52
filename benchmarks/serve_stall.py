"""How long a large message stalls ``hippobot serve`` for everyone else.

``python -m benchmarks.serve_stall [--mb 1 4] [--shape prose|dense]`` runs the real server
in-process (uvicorn on 127.0.0.1, an agent that talks HTTP to the scripted model), warms it
up with a short turn (tokenizer tables, imports), sends one message of each size, and meanwhile polls ``/healthz`` every 10 ms. It prints the longest
gap between two health answers (the event loop's worst stall), the turn's wall time, and
``redact_secrets`` throughput on the same text.

``dense`` text is one credential-like assignment after another, the worst case for
redaction; ``prose`` is ordinary words.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from hippobot.agent.agent import Agent
from hippobot.cli.onboard import onboard
from hippobot.config import load_settings
from hippobot.redact import redact_secrets
from hippobot.server.app import create_app
from hippobot.server.run import GracefulServer, bind_socket
from hippobot.server.security import WebPolicy
from hippobot.testing.scripted import ScriptedModel
from hippobot.testing.server import ScriptedServer

WORDS = ["the", "a", "memory", "of", "notes", "kept", "in", "files", "we", "decided", "to", "use", "postgres", "yesterday"]


def text_of(shape: str, size: int) -> str:
    rng = random.Random(7)
    if shape == "dense":
        unit = "token=abc12345678 password: 'x' api_key = \"short\" "
        return (unit * (size // len(unit) + 1))[:size]
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def measure(mb: float, shape: str, home: Path, scripted: ScriptedServer) -> dict[str, float]:
    env = {
        "HIPPOBOT_HOME": str(home),
        "HIPPOBOT_MODEL": "scripted-model",
        "HIPPOBOT_API_BASE": scripted.base_url,
        "HIPPOBOT_API_KEY": "sk-bench-000000000000000",
    }
    settings = load_settings(env)
    onboard(settings)
    app = create_app(Agent(settings), api_key=None, run_schedulers=False,
                     policy=WebPolicy.of(max_body_bytes=64 * 1024 * 1024))
    sock = bind_socket("127.0.0.1", 0)
    server = GracefulServer(uvicorn.Config(app, log_level="warning", lifespan="on"), app, 5.0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    root = f"http://127.0.0.1:{sock.getsockname()[1]}"
    text = text_of(shape, int(mb * 1024 * 1024))
    warm = {"messages": [{"role": "user", "content": "hello"}]}  # tokenizer, imports
    httpx.post(f"{root}/v1/chat/completions", json=warm, timeout=60, headers={"X-Session-Id": "w"})
    gaps: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=60) as client:
            last = time.perf_counter()
            while not done.is_set():
                client.get(f"{root}/healthz")
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
                time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(0.2)
    started = time.perf_counter()
    response = httpx.post(
        f"{root}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": text}]},
        timeout=300,
    )
    wall = time.perf_counter() - started
    done.set()
    poller.join()
    server.should_exit = True
    thread.join(30)
    t0 = time.perf_counter()
    redact_secrets(text)
    redact_s = time.perf_counter() - t0
    return {
        "status": response.status_code,
        "turn_s": wall,
        "worst_stall_ms": max(gaps) * 1000 - 10,
        "redact_s_per_mb": redact_s / mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--shape", choices=["prose", "dense"], nargs="+", default=["prose", "dense"])
    args = parser.parse_args()
    model = ScriptedModel()
    model.fallback = lambda request: "ok"
    print(f"{'shape':6} {'MB':>5} {'status':>6} {'turn s':>7} {'worst stall ms':>15} {'redact s/MB':>12}")
    with ScriptedServer(model) as scripted, tempfile.TemporaryDirectory() as tmp:
        for shape in args.shape:
            for mb in args.mb:
                home = Path(tmp) / f"{shape}-{mb}"
                os.makedirs(home)
                row = measure(mb, shape, home, scripted)
                print(f"{shape:6} {mb:5.1f} {row['status']:6d} {row['turn_s']:7.2f} "
                      f"{row['worst_stall_ms']:15.0f} {row['redact_s_per_mb']:12.3f}")


if __name__ == "__main__":
    main()
