"""Build the provider for a configuration: an adapter wrapped in the retry policy.

Vendors differ by data (:data:`KNOWN_ENDPOINTS`), not by subclass. Importing this module
does not import any vendor SDK; the adapters do that on their first request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from hippobot.providers.base import ChatRequest, Provider
from hippobot.providers.echo import RuntimeEchoFilter
from hippobot.providers.metering import MeteredProvider, UsageSink
from hippobot.providers.retry import RetryingProvider, RetryPolicy
from hippobot.providers.serial import EndpointGate, SerialProvider
from hippobot.providers.text_tools import TextToolCallProvider, text_tools_enabled

__all__ = ["KNOWN_ENDPOINTS", "LOCAL_TIMEOUT_S", "REMOTE_TIMEOUT_S", "ProviderKind", "make_provider"]

ProviderKind = Literal["openai", "anthropic"]

# Default base URL by provider name (the ``providers.<name>`` key in config.json).
# ``None``: the vendor SDK's own default.
KNOWN_ENDPOINTS: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "llamacpp": "http://localhost:8080/v1",
    "anthropic": None,
}

#: Seconds without a byte before a request is given up (the wait for the first byte too).
REMOTE_TIMEOUT_S = 120.0
#: The same for an endpoint that works on one request at a time (a local model): reading a
#: long prompt takes minutes on a laptop (8,000 tokens at 10 tokens/s is over 13 minutes),
#: and servers that send nothing until the first token (llama.cpp's, Ollama) must get them.
LOCAL_TIMEOUT_S = 900.0


def make_provider(
    kind: ProviderKind,
    *,
    api_key: str,
    api_base: str | None,
    extra_headers: dict[str, str] | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    name: str | None = None,
    text_tool_calls: str = "auto",
    usage: UsageSink | None = None,
    estimate: Callable[[ChatRequest], int] | None = None,
    gate: EndpointGate | None = None,
) -> Provider:
    """A ready provider: the ``kind`` adapter inside a :class:`RetryingProvider`.

    Between them: :class:`RuntimeEchoFilter` (a copy of the runtime-context block is taken out
    of the reply), and optionally :class:`TextToolCallProvider` (tool calls written as text become
    real calls; ``text_tool_calls`` is ``auto`` (local endpoints only), ``on`` or ``off``) and
    :class:`MeteredProvider` (every attempt recorded to ``usage``; ``estimate`` counts the
    prompt of a request whose endpoint reported no usage).

    With a ``gate`` (an endpoint that works on one request at a time, see
    :mod:`hippobot.providers.serial`) every attempt waits its turn there, a request is never
    re-sent while the server may still be working on it (``RetryPolicy.resend_in_flight``
    off), and ``timeout`` defaults to :data:`LOCAL_TIMEOUT_S` instead of
    :data:`REMOTE_TIMEOUT_S`: the seconds without a byte from the server, not the whole reply.

    ``name`` is the config key the user knows the endpoint by (``openrouter``, ``ollama``,
    ...); error messages point at ``providers.<name>``. It defaults to ``kind``, and when
    ``api_base`` is None a known name supplies its base URL.
    """
    label = name or kind
    base = api_base if api_base is not None else KNOWN_ENDPOINTS.get(label)
    if timeout is None:
        timeout = LOCAL_TIMEOUT_S if gate is not None else REMOTE_TIMEOUT_S
    policy = retry or RetryPolicy()
    adapter: Provider
    if kind == "anthropic":  # each adapter is imported when chosen: a process uses one
        from hippobot.providers.anthropic import AnthropicProvider

        adapter = AnthropicProvider(
            api_key=api_key, api_base=base, extra_headers=extra_headers, timeout=timeout, name=label
        )
    elif kind == "openai":
        from hippobot.providers.openai_compat import OpenAICompatProvider

        adapter = OpenAICompatProvider(
            api_key=api_key, api_base=base, extra_headers=extra_headers, timeout=timeout, name=label
        )
    else:
        raise ValueError(f"unknown provider kind {kind!r}: expected 'openai' or 'anthropic'")
    if gate is not None:
        adapter = SerialProvider(adapter, gate)
        policy = dataclasses.replace(policy, resend_in_flight=False)
    adapter = RuntimeEchoFilter(adapter)
    if text_tools_enabled(text_tool_calls, provider=label if kind == "openai" else kind, api_base=base):
        adapter = TextToolCallProvider(adapter)
    if usage is not None:
        adapter = MeteredProvider(adapter, usage, estimate)
    return RetryingProvider(adapter, policy)
