"""What kind of server an endpoint address names: a local model, and which one.

One definition of "local" for every decision that depends on it: queueing requests
(:mod:`hippobot.providers.serial`), how long to wait for a byte, recovering tool calls a
model writes as text (:mod:`hippobot.providers.text_tools`).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["LOCAL_PROVIDERS", "endpoint_key", "is_local"]

#: The sampling temperature sent to a local server when ``agents.defaults.temperature`` is
#: unset (nanobot's default). Left to the server, llama.cpp and Ollama sample at 0.8, and
#: Qwen2.5-Coder-1.5B answered the same six questions of one planted memory 1 to 6 times
#: from run to run. Elsewhere an unset temperature is not sent: some hosted models (OpenAI's
#: reasoning models) refuse any but their own.
LOCAL_TEMPERATURE = 0.1

#: Providers that are local servers whatever their address.
LOCAL_PROVIDERS = frozenset({"ollama", "vllm", "llamacpp", "lmstudio", "lm_studio"})
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _loopback_name(host: str) -> bool:
    return host in _LOOPBACK_NAMES or host.endswith(".localhost")


def is_local(provider: str, api_base: str | None) -> bool:
    """A local model server: a provider that is one (``ollama``, ``vllm``, ``llamacpp``, LM
    Studio), or an address on this machine or a private network (loopback, 10/8, 172.16/12,
    192.168/16, link-local, IPv6 unique-local)."""
    if provider in LOCAL_PROVIDERS:
        return True
    host = (urlsplit(api_base).hostname or "") if api_base else ""
    if not host:
        return False
    if _loopback_name(host.lower()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified


def endpoint_key(api_base: str) -> str:
    """The server an address names (``loopback:8081``), so ``http://localhost:8081/v1`` and
    ``http://127.0.0.1:8081/v1/`` are one server."""
    parts = urlsplit(api_base)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = _loopback_name(host)
    return f"{'loopback' if loopback else host}:{port}"
