"""CPU per request through the real OpenAI SDK adapter, by conversation length.

``python -m benchmarks.sdk_request`` sends one conversation of 20, 200 and 1,000 messages
through :class:`~hippobot.providers.openai_compat.OpenAICompatProvider` to the scripted
model on 127.0.0.1, eight times each, and prints the median CPU time per request (this
process: the adapter, the SDK, and the scripted server's thread). The second row sends the
same requests with the bulky parameters through the SDK's own parameter transform, as
hippobot did before: the cost it avoids, which grows with the conversation.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import hippobot.providers.openai_compat as oc
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
        for label, patch in (("as is (now)", None), ("through the SDK transform (before)", lambda p: p)):
            real = oc.sent_as_is
            if patch:
                oc.sent_as_is = patch
            p = OpenAICompatProvider(api_key="sk-x", api_base=srv.base_url)
            row = [f"{n}: {await run(p, n):.1f} ms" for n in (20, 200, 1000)]
            await p.aclose()
            oc.sent_as_is = real
            print(f"{label:38s}", ", ".join(row))


if __name__ == "__main__":
    asyncio.run(main())
