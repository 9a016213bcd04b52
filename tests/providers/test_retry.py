"""The retry policy and RetryingProvider, with the in-process scripted provider."""

from __future__ import annotations

import pytest

from hippobot.errors import (
    AuthError,
    BadRequestError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from hippobot.providers import (
    ChatRequest,
    Restart,
    RetryingProvider,
    RetryPolicy,
    TextDelta,
    collect,
)
from hippobot.testing import ScriptedModel, ScriptedProvider, UnscriptedCallError

REQUEST = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def test_backoff_doubles_from_the_base_delay_up_to_the_cap():
    policy = RetryPolicy(max_attempts=10, base_delay=0.5, max_delay=3.0, jitter=0.0)
    error = ServerError("boom", status=500)

    assert [policy.delay(n, error) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_jitter_spreads_the_delay_by_the_given_fraction():
    policy = RetryPolicy(base_delay=1.0, jitter=0.25)
    error = ServerError("boom")

    assert policy.delay(1, error, rand=lambda: 0.0) == 0.75
    assert policy.delay(1, error, rand=lambda: 1.0) == 1.25
    assert 0.75 <= policy.delay(1, error) <= 1.25


def test_retry_after_replaces_the_backoff_unless_it_is_too_long():
    policy = RetryPolicy(max_retry_after=60.0)

    assert policy.delay(1, RateLimitError("slow down", retry_after=12.0)) == 12.0
    assert policy.delay(3, RateLimitError("slow down", retry_after=0.0)) == 0.0
    assert policy.delay(1, RateLimitError("come back tomorrow", retry_after=86400.0)) is None


def test_errors_that_cannot_succeed_on_retry_are_never_retried():
    policy = RetryPolicy()

    assert policy.delay(1, AuthError("bad key", status=401)) is None
    assert policy.delay(1, BadRequestError("bad request", status=400)) is None
    assert policy.delay(1, ValueError("a bug, not a provider failure")) is None


def test_the_last_attempt_is_not_retried():
    policy = RetryPolicy(max_attempts=3)

    assert policy.delay(2, ServerError("boom")) is not None
    assert policy.delay(3, ServerError("boom")) is None


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


async def test_partial_output_is_followed_by_restart_before_the_retry(model, retrying):
    model.cut_stream(after_chars=5).reply("hello world")

    events = [e async for e in retrying(ScriptedProvider(model)).stream(REQUEST)]

    kinds = [type(e).__name__ for e in events]
    assert kinds.index("Restart") > kinds.index("TextDelta")
    restart = next(e for e in events if isinstance(e, Restart))
    assert restart.attempt == 2 and "stopped before its end" in restart.error
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hellohello world"
    assert (await collect(_replay(events))).text == "hello world"


async def test_no_restart_when_nothing_was_yielded(model, retrying):
    model.fail(503).reply("ok")

    events = [e async for e in retrying(ScriptedProvider(model)).stream(REQUEST)]

    assert not any(isinstance(e, Restart) for e in events)


async def test_on_retry_reports_attempt_error_and_wait(model, fake_sleep):
    seen = []
    model.fail(500).fail(429, retry_after=4).reply("ok")
    provider = RetryingProvider(
        ScriptedProvider(model),
        RetryPolicy(base_delay=1.0, jitter=0.0),
        sleep=fake_sleep,
        on_retry=lambda attempt, err, wait: seen.append((attempt, err.status, wait)),
    )

    assert (await collect(provider.stream(REQUEST))).text == "ok"

    assert seen == [(1, 500, 1.0), (2, 429, 4.0)]
    assert fake_sleep.waits == [1.0, 4.0]


async def test_exhausted_retries_raise_the_last_error_with_the_count(model, retrying):
    model.fail(500).fail(502).cut_stream(3).reply("never reached in time")

    with pytest.raises(StreamInterruptedError) as info:
        await collect(retrying(ScriptedProvider(model), max_attempts=3).stream(REQUEST))

    assert str(info.value).endswith(
        "stopped before its end (connection closed): try again (after 3 attempts)"
    )
    assert model.pending() == 1


async def test_a_single_failed_attempt_keeps_its_message_unchanged(model, retrying):
    model.fail(401)

    with pytest.raises(AuthError) as info:
        await collect(retrying(ScriptedProvider(model)).stream(REQUEST))

    assert "attempts" not in str(info.value)


async def test_unscripted_calls_are_bugs_and_never_retried(model, retrying, fake_sleep):
    with pytest.raises(UnscriptedCallError):
        await collect(retrying(ScriptedProvider(model)).stream(REQUEST))

    assert fake_sleep.waits == []


def test_retrying_provider_keeps_the_inner_name(model):
    assert RetryingProvider(ScriptedProvider(model, name="local"), RetryPolicy()).name == "local"


async def _replay(events):
    for event in events:
        yield event
