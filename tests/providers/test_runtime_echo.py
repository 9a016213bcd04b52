"""A reply never carries a copy of the runtime-context block the model saw in its prompt."""

from __future__ import annotations

import pytest

from hippobot.messages import RUNTIME_CONTEXT_FOOTER, RUNTIME_CONTEXT_HEADER
from hippobot.providers.echo import EchoGate

BLOCK = f"{RUNTIME_CONTEXT_HEADER}\nCurrent Time: 2026-12-01 10:00 (Tuesday)\nChannel: cli\n{RUNTIME_CONTEXT_FOOTER}"


def through(text: str, size: int) -> str:
    gate = EchoGate()
    out = [gate.feed(text[i : i + size]) for i in range(0, len(text), size)]
    return "".join(out) + gate.flush()


@pytest.mark.parametrize("size", [1, 2, 7, 1000])
@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        # seen with Qwen2.5-Coder-1.5B: the answer, then the copied block cut off
        (f"The cat is called Luna.\n\n{RUNTIME_CONTEXT_HEADER}\nCurrent Time: 2026-", "The cat is called Luna."),
        (f"{BLOCK}\nYou work at Initech.", "You work at Initech."),
        (f"Hi.\n{BLOCK}\nBye.", "Hi.\nBye."),
        ("Two lines\n\nof text.\n", "Two lines\n\nof text.\n"),
        ("Arrays start at [0] and [Runtime is fine].", "Arrays start at [0] and [Runtime is fine]."),
        ("ends with [", "ends with ["),
    ],
)
def test_the_copied_block_is_removed_however_the_stream_is_cut(reply: str, shown: str, size: int) -> None:
    assert through(reply, size) == shown


async def test_over_http_the_user_never_sees_the_copied_block(make_agent, scripted_model) -> None:
    agent = make_agent()
    scripted_model.reply(f"The cat is called Luna.\n\n{BLOCK}")
    result = await agent.turn("cli:direct", "what is my cat called?")
    assert result.reply.strip() == "The cat is called Luna."
    stored = agent.sessions.get("cli:direct").messages[-1]
    assert RUNTIME_CONTEXT_HEADER not in str(stored.get("content"))
