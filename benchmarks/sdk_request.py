"""CPU per request through the OpenAI-compatible adapter, by conversation length.

``python -m benchmarks.sdk_request`` sends one conversation of 20, 200 and 1,000 messages
through :class:`~hippobot.providers.openai_compat.OpenAICompatProvider` (hippobot's own
client over httpx) to the scripted model on 127.0.0.1, eight times each, and prints the
median CPU time per request (this process: the adapter, httpx, and the scripted server's
thread).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from hippobot.providers.base import ChatRequest
from hippobot.providers.openai_compat import OpenAICompatProvider
from hippobot.testing.scripted import ScriptedModel
from hippobot.testing.server import ScriptedServer


def conversation(n: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "You are hippobot. " * 50}]
    for i in range(n // 2):
        msgs.append({"role": "user", "content": f"question {i} " * 20})
        msgs.append({"role": "assistant", "content": f"answer {i} " * 30})
    return msgs



async def run(provider: OpenAICompatProvider, n: int, reps: int = 8) -> float:
    req = ChatRequest(model="scripted-model", messages=conversation(n), max_tokens=50)
    cpu = []
    for _ in range(reps):
        t = time.process_time()
        async for _ev in provider.stream(req):
            pass
        cpu.append((time.process_time() - t) * 1000)
    return statistics.median(cpu[1:])



async def main() -> None:
    model = ScriptedModel()
    model.fallback = lambda r: "ok"
    with ScriptedServer(model) as srv:
        p = OpenAICompatProvider(api_key="sk-x", api_base=srv.base_url)
        row = [f"{n}: {await run(p, n):.1f} ms" for n in (20, 200, 1000)]
        await p.aclose()
        print(f"{'CPU per request':38s}", ", ".join(row))


if __name__ == "__main__":
    asyncio.run(main())
