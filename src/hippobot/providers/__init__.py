"""Model providers: one streaming protocol, typed events, typed errors, bounded retries.

Importing this package imports no vendor SDK and no adapter: each name below is loaded from
its module on first use, so a process that imports one provider module (a chat on an
OpenAI-compatible endpoint) never loads the others (the Anthropic adapter).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "AnthropicProvider": "anthropic",
    "KNOWN_ENDPOINTS": "factory",
    "ProviderKind": "factory",
    "make_provider": "factory",
    "OpenAICompatProvider": "openai_compat",
    "RetryingProvider": "retry",
    "RetryPolicy": "retry",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_HOME.get(name, 'base')}")
    value = getattr(module, name)
    globals()[name] = value
    return value
