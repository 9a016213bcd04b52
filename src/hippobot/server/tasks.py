"""Client task prompts, answered without memory.

Chat front ends ask the model for chores of their own: Open WebUI generates a title, tags,
follow-up questions and autocompletions with prompts that start with ``### Task:`` and
embed the chat history. Stored as user turns they would be archived and dreamt on as if
the user had said them, so they are answered statelessly instead: the client's messages go
to the model as they are, in one call without tools, and nothing is read from or written
to the workspace (no session, no history, no Dream, no recall).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hippobot.errors import ProviderError
from hippobot.providers.base import ChatRequest, collect

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent, TurnResult
    from hippobot.server.wire import ChatCall

__all__ = ["answer_task"]


async def answer_task(agent: Agent, call: ChatCall) -> TurnResult:
    """One model call on the client's own messages (see the module docstring)."""
    from hippobot.agent.agent import TurnResult
    from hippobot.loop.runner import RunResult

    defaults = agent.settings.defaults
    messages = [
        {"role": "system" if role == "developer" else role, "content": text}
        for role, text in call.messages
    ]
    request = ChatRequest(
        model=agent.model,
        messages=messages,
        max_tokens=min(call.max_tokens or defaults.reply_tokens, defaults.reply_tokens),
        temperature=agent.llm.temperature,
        stop=call.stop,
    )
    try:
        response = await collect(agent.provider.stream(request))
    except ProviderError as exc:  # an endpoint may echo the key it rejected
        exc.args = (agent.redact(str(exc)), *exc.args[1:])
        raise
    run = RunResult(reply=response.text, iterations=1, usage=response.usage, requests=1)
    if response.usage is not None:
        run.total_usage = response.usage
    run.finish_reason = response.finish_reason
    return TurnResult(reply=response.text, run=run)
