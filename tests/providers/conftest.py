"""Helpers shared by the provider tests."""

from __future__ import annotations

import socket

import pytest

from hippobot.providers import RetryingProvider, RetryPolicy
from hippobot.providers.base import Provider


class FakeSleep:
    """Records the waits a retry policy asks for instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def fake_sleep() -> FakeSleep:
    return FakeSleep()


@pytest.fixture
def retrying(fake_sleep: FakeSleep):
    """Wrap a provider in the default retry policy with the fake sleep."""

    def wrap(inner: Provider, **policy: float) -> RetryingProvider:
        return RetryingProvider(inner, RetryPolicy(**policy), sleep=fake_sleep)  # type: ignore[arg-type]

    return wrap


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
