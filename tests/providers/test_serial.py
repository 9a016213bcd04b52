"""A local endpoint gets one request at a time from a hippobot home, chats first, and a request
is sent again only when the server cannot be working on it. Real lock files, real HTTP to the
scripted model; delays are scripted, timeouts short."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from hippobot.errors import ProviderTimeoutError, StreamInterruptedError
from hippobot.providers import OpenAICompatProvider, Provider, RetryingProvider, make_provider
from hippobot.providers.base import ChatRequest, Queued, Retrying, Started, collect
from hippobot.providers.endpoints import endpoint_key, is_local
from hippobot.providers.metering import usage_job
from hippobot.providers.retry import RetryPolicy
from hippobot.providers.serial import EndpointGate, SerialProvider, background
from hippobot.testing import ScriptedModel, ScriptedServer
from hippobot.workspace import Home


def _ask(text: str) -> ChatRequest:
    return ChatRequest(model="scripted-model", messages=[{"role": "user", "content": text}])


def _gate(home: Path, base: str) -> EndpointGate:
    return EndpointGate(Home(home).endpoint(endpoint_key(base)))


def _local(home: Path, base: str, *, timeout: float = 10.0) -> Provider:
    """The provider hippobot builds for a local endpoint (as ModelClient does), no backoff."""
    return make_provider("openai", api_key="k", api_base=base, timeout=timeout, name="llamacpp",
                         gate=_gate(home, base), retry=RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0))


def _local_with_sleep(home: Path, base: str, sleep) -> Provider:
    """The same layers, retries waiting through ``sleep``."""
    adapter = SerialProvider(OpenAICompatProvider(api_key="k", api_base=base, name="llamacpp"), _gate(home, base))
    return RetryingProvider(adapter, RetryPolicy(resend_in_flight=False, jitter=0.0), sleep=sleep)


async def test_a_first_byte_later_than_the_timeout_is_not_sent_again(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.reply("too late", delay=1.5)  # "reading the prompt", nothing sent meanwhile
    provider = _local(hippobot_home, scripted_server.base_url, timeout=0.3)

    with pytest.raises(ProviderTimeoutError) as info:
        await collect(provider.stream(_ask("a long prompt")))

    assert len(scripted_model.requests) == 1  # the server may still be computing it
    assert "not sent again" in str(info.value) and "providers.llamacpp.timeout" in str(info.value)


async def test_a_server_that_keeps_the_connection_alive_is_waited_for(
    hippobot_home, scripted_server, scripted_model
):
    # llama-cpp-python sends its headers at once and a ": ping" comment every 15 s while it reads
    # the prompt: the timeout counts from the last byte, so a slow prompt is never cut off.
    scripted_model.reply("worth the wait", delay=1.2, keepalive=0.2)
    provider = _local(hippobot_home, scripted_server.base_url, timeout=0.5)

    assert (await collect(provider.stream(_ask("a long prompt")))).text == "worth the wait"
    assert len(scripted_model.requests) == 1


async def test_a_stall_after_the_first_bytes_is_not_sent_again(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("The answer is forty-two.", pause=(6, 1.5))
    provider = _local(hippobot_home, scripted_server.base_url, timeout=0.3)
    seen: list[object] = []

    with pytest.raises(ProviderTimeoutError):
        await collect(provider.stream(_ask("q")), seen.append)

    assert len(scripted_model.requests) == 1
    assert not any(isinstance(e, Retrying) for e in seen)


async def test_a_cut_stream_from_a_local_endpoint_is_not_sent_again(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.cut_stream(5).reply("a reply that never arrives whole")
    provider = _local(hippobot_home, scripted_server.base_url)

    with pytest.raises(StreamInterruptedError) as info:
        await collect(provider.stream(_ask("q")))

    assert len(scripted_model.requests) == 1 and scripted_model.pending() == 1
    assert "not sent again" in str(info.value)


async def test_a_refused_connection_is_retried_and_the_retry_says_why(hippobot_home):
    with socket.socket() as probe:  # a port nobody listens on, until the retry's wait
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = ScriptedModel().reply("up now")
    server = ScriptedServer(model, port=port)

    async def server_comes_up(_seconds: float) -> None:
        server.start()

    base = f"http://127.0.0.1:{port}/v1"
    provider = _local_with_sleep(hippobot_home, base, server_comes_up)
    events: list[object] = []
    try:
        reply = await collect(provider.stream(_ask("q")), events.append)
    finally:
        server.stop()

    assert reply.text == "up now" and len(model.requests) == 1
    retries = [e for e in events if isinstance(e, Retrying)]
    assert len(retries) == 1 and retries[0].attempt == 2 and "connection refused" in retries[0].reason


async def test_an_error_status_before_any_byte_is_retried_after_what_the_server_asks(
    hippobot_home, scripted_server, scripted_model
):
    scripted_model.fail(503, retry_after=2).reply("served")
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    provider = _local_with_sleep(hippobot_home, scripted_server.base_url, fake_sleep)
    events: list[object] = []

    assert (await collect(provider.stream(_ask("q")), events.append)).text == "served"
    assert waits == [2.0] and len(scripted_model.requests) == 2
    assert [(e.attempt, e.wait) for e in events if isinstance(e, Retrying)] == [(2, 2.0)]


async def test_a_waiting_chat_goes_before_waiting_background_work_and_nothing_overlaps(hippobot_home):
    model = ScriptedModel()
    model.fallback = lambda request: f"answer to {request.last_user_text()}"
    model.reply("dream one", delay=0.8)  # the request running when the others arrive
    with ScriptedServer(model) as server:
        # Separate providers and gates, as separate processes and workspaces of one home have.
        dream, later, chat = (_local(hippobot_home, server.base_url) for _ in range(3))

        async def dreaming(provider, text: str) -> str:
            with usage_job("dream"), background():
                return (await collect(provider.stream(_ask(text)))).text

        running = asyncio.create_task(dreaming(dream, "dream 1"))
        while not model.requests:
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(dreaming(later, "dream 2"))  # background work, waiting
        await asyncio.sleep(0.15)
        events: list[object] = []
        asked = time.monotonic()
        answer = await collect(chat.stream(_ask("chat")), events.append)
        waited = time.monotonic() - asked
        results = [await running, await waiting]

    assert answer.text == "answer to chat" and results == ["dream one", "answer to dream 2"]
    assert [r.last_user_text() for r in model.requests] == ["dream 1", "chat", "dream 2"]
    assert model.peak_in_flight == 1  # the server never had two requests at once
    assert events[:2] == [Queued("Dream"), Started()]  # queued behind the running Dream request
    assert waited < 5  # it waited for that request only


async def test_background_work_waits_for_a_whole_chat_turn(hippobot_home, scripted_server, scripted_model):
    scripted_model.fallback = lambda request: f"answer to {request.last_user_text()}"
    gate = _gate(hippobot_home, scripted_server.base_url)
    provider = _local(hippobot_home, scripted_server.base_url)

    async def consolidation() -> str:
        with background():
            return (await collect(provider.stream(_ask("archive")))).text

    async with gate.chat_turn():
        await collect(provider.stream(_ask("chat step 1")))
        archive = asyncio.create_task(consolidation())
        await asyncio.sleep(0.3)  # a tool runs between the turn's two requests
        await collect(provider.stream(_ask("chat step 2")))
    await archive

    assert [r.last_user_text() for r in scripted_model.requests] == ["chat step 1", "chat step 2", "archive"]


def test_local_endpoints_are_told_apart_from_remote_ones():
    assert is_local("openai", "http://127.0.0.1:8081/v1") and is_local("openai", "http://localhost:1234/v1")
    assert is_local("custom", "http://192.168.1.20:11434/v1") and is_local("openai", "http://[::1]:8080/v1")
    assert is_local("ollama", "https://ollama.example.com/v1")  # the provider says so
    assert not is_local("openai", "https://api.openai.com/v1")
    assert not is_local("openrouter", "https://openrouter.ai/api/v1")
    assert endpoint_key("http://localhost:8081/v1") == endpoint_key("http://127.0.0.1:8081/v1/")
    assert endpoint_key("http://127.0.0.1:8081/v1") != endpoint_key("http://127.0.0.1:8082/v1")


def test_a_remote_endpoint_keeps_its_bounded_retry_of_a_cut_stream(scripted_server, scripted_model):
    # No gate (a remote API): a cut stream is retried, as the adapters' tests pin.
    scripted_model.cut_stream(5).reply("whole at last")
    provider = make_provider("openai", api_key="k", api_base=scripted_server.base_url,
                             retry=RetryPolicy(base_delay=0.0, max_delay=0.0, jitter=0.0))
    assert asyncio.run(collect(provider.stream(_ask("q")))).text == "whole at last"
    assert len(scripted_model.requests) == 2
