"""The ledger of recent turns: which earlier turn a request repeats (a fake clock, no waiting)."""

from __future__ import annotations

import asyncio

import pytest

from hippobot.server.dedupe import TTL_S, WINDOW_S, IdempotencyConflict, TurnLedger
from hippobot.server.identity import Attempt

NEW = Attempt(retry_count=0)
RETRY = Attempt(retry_count=1)
SILENT = Attempt()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ledger():
    clock = Clock()
    return TurnLedger(capacity=3, clock=clock), clock


async def turn(ledger: TurnLedger, text: str, attempt: Attempt = NEW, *, session: str = "api:s",
               scope: str = "") -> asyncio.Task:
    task = asyncio.get_running_loop().create_future()
    ledger.add(scope, session, text, attempt, task, None)  # type: ignore[arg-type]
    return task


async def test_retries_match_the_sessions_newest_turn_only(ledger):
    book, _clock = ledger
    first = await turn(book, "yes")

    assert book.find("", "api:s", "yes", RETRY).task is first
    assert book.find("", "api:s", "yes", NEW) is None
    assert book.find("", "api:other", "yes", RETRY) is None
    assert book.find("bob", "api:s", "yes", RETRY) is None  # another user's session
    await turn(book, "no")
    assert book.find("", "api:s", "yes", RETRY) is None


async def test_clients_that_say_nothing_match_within_the_window_and_retries_until_the_ttl(ledger):
    book, clock = ledger
    await turn(book, "hello")

    clock.now += WINDOW_S + 1
    assert book.find("", "api:s", "hello", SILENT) is None
    assert book.find("", "api:s", "hello", RETRY) is not None
    clock.now += TTL_S
    assert book.find("", "api:s", "hello", RETRY) is None


async def test_idempotency_keys_match_exactly_and_refuse_another_message(ledger):
    book, _ = ledger
    keyed = Attempt(idempotency_key="k1", retry_count=0)
    first = await turn(book, "hello", keyed)

    assert book.find("", "api:s", "hello", keyed).task is first
    assert book.find("", "api:s", "hello", Attempt(idempotency_key="k2")) is None
    assert book.find("bob", "api:s", "hello", keyed) is None
    with pytest.raises(IdempotencyConflict):
        book.find("", "api:s", "bye", keyed)


async def test_the_ledger_keeps_only_its_capacity(ledger):
    book, _ = ledger
    keyed = Attempt(idempotency_key="old")
    await turn(book, "zero", keyed, session="api:0")
    for n in range(1, 4):
        await turn(book, str(n), session=f"api:{n}")

    assert len(book) == 3
    assert book.find("", "api:0", "zero", keyed) is None
    assert book.find("", "api:3", "3", RETRY) is not None


def test_attempt_reads_the_sdk_headers():
    assert Attempt.of({"x-stainless-retry-count": "2"}) == Attempt(None, 2)
    assert Attempt.of({"idempotency-key": " k ", "x-stainless-retry-count": "x"}) == Attempt("k")
    assert Attempt.of({}) == Attempt()
