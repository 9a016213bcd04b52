"""While another process holds every lock hippobot uses, ``hippobot serve`` keeps
answering: waiting for a lock happens off the event loop, never on it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx

from hippobot.memory.gitstore import GitStore
from hippobot.session.keys import SESSIONS_DIR, key_to_relpath
from hippobot.workspace import VERSIONED_FILES, Workspace

HOLDER = """
import sys
from contextlib import ExitStack
from hippobot.locks import locked
with ExitStack() as stack:
    for path in sys.argv[1:]:
        stack.enter_context(locked(path, timeout=10))
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def every_lock(ws: Workspace, keys: list[str]) -> list[str]:
    paths = {str(p) for p in ws.all_lock_paths()}
    paths |= {str(ws.git_lock), str(ws.dream_lock), str(ws.history_lock)}
    paths |= {str(ws.file_lock_path(ws.root / name)) for name in VERSIONED_FILES}
    for key in keys:
        relative = key_to_relpath(key).relative_to(SESSIONS_DIR)
        paths |= {str(ws.turn_lock(key)), str(ws.consolidate_lock(key)), str(ws.session_lock(relative))}
    return sorted(paths)


async def test_healthz_answers_at_once_while_another_process_holds_every_lock(
    make_agent, scripted_model, serve
):
    agent = make_agent()
    scripted_model.fallback = lambda request: "fine"
    await agent.turn("api:x", "an old conversation")
    # A /new whose archiving did not finish: the server resumes it at start.
    session = agent.sessions.get("api:x")
    session.metadata["fresh_start"] = len(session.messages)
    await agent.sessions.save_meta(session)
    user_md = agent.workspace / "USER.md"
    user_md.write_text(user_md.read_text(encoding="utf-8") + "\n- likes tea\n", encoding="utf-8")
    sha = GitStore(agent.workspace).commit("manual: tea")
    await agent.aclose()

    ws = Workspace(agent.workspace)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *every_lock(ws, ["api:x", "api:y"])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        srv = serve(type(agent)(agent.settings))  # a new serve process' agent, same workspace
        async with httpx.AsyncClient(base_url=srv.root, timeout=60) as client:

            def chat(user: str, text: str):
                body = {"model": "hippobot", "user": user, "messages": [{"role": "user", "content": text}]}
                return asyncio.ensure_future(client.post("/v1/chat/completions", json=body))

            waiting = [
                chat("x", "hello again"),  # waits for the turn lock
                chat("y", "a new session"),  # waits for its session file lock
                chat("z", f"/dream-restore {sha[:8]}"),  # waits for the memory files' locks
                chat("w", "/dream"),  # Dream's lock is taken: busy
                asyncio.ensure_future(client.get("/")),  # the memory page
            ]
            await asyncio.sleep(0.3)  # let them all reach their lock
            slowest = 0.0
            for _ in range(10):
                started = time.perf_counter()
                answer = await client.get("/healthz")
                slowest = max(slowest, time.perf_counter() - started)
                assert answer.status_code == 200
                await asyncio.sleep(0.05)
            # a loop blocked on one of those locks would answer only once the holder lets go
            # (never, here); a second covers a busy machine's scheduling, not a blocked wait
            assert slowest < 1.0, f"/healthz took {slowest * 1000:.0f} ms: the event loop was blocked"
            assert not any(t.done() for t in waiting[:3]), "a request did not wait for its lock"

            holder.stdin.close()  # let go of every lock: everything that waited completes
            results = await asyncio.gather(*waiting)
        assert [r.status_code for r in results] == [200] * 5
        replies = [r.json()["choices"][0]["message"]["content"] for r in results[:4]]
        assert replies[0] == replies[1] == "fine"
        assert "Undid" in replies[2]
    finally:
        if holder.stdin and not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(10)
