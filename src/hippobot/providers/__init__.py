"""Model providers: one streaming protocol, typed events, typed errors, bounded retries.

Importing this package imports no vendor SDK (``openai`` and ``anthropic`` are loaded on the
first request), so commands that never call a model start fast.
"""

from __future__ import annotations

from hippobot.providers.anthropic import AnthropicProvider
from hippobot.providers.base import (
    ChatRequest,
    ChatResponse,
    Finish,
    Provider,
    Restart,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
    collect,
)
from hippobot.providers.factory import KNOWN_ENDPOINTS, ProviderKind, make_provider
from hippobot.providers.openai_compat import OpenAICompatProvider
from hippobot.providers.retry import RetryingProvider, RetryPolicy

__all__ = [
    "KNOWN_ENDPOINTS",
    "AnthropicProvider",
    "ChatRequest",
    "ChatResponse",
    "Finish",
    "OpenAICompatProvider",
    "Provider",
    "ProviderKind",
    "Restart",
    "RetryPolicy",
    "RetryingProvider",
    "StreamEvent",
    "TextDelta",
    "ToolCallEvent",
    "Usage",
    "collect",
    "make_provider",
]
