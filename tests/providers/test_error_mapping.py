"""What each endpoint failure becomes: type, fields and a one-line message."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from hippobot.errors import (
    AuthError,
    BadRequestError,
    ContextTooLongError,
    EndpointUnreachableError,
    ProviderTimeoutError,
    RateLimitError,
    ServerError,
)
from hippobot.providers._errors import Endpoint, from_status, parse_retry_after, unreachable

EP = Endpoint(
    name="openrouter", api_base="https://openrouter.ai/api/v1", timeout=30.0, kind="openai"
)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_headers(headers, expected):
    assert parse_retry_after(headers) == expected


def test_retry_after_as_an_http_date():
    now = 1_700_000_000.0
    header = {"Retry-After": formatdate(now + 30, usegmt=True)}

    assert parse_retry_after(header, now=now) == 30.0
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0.0


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, AuthError),
        (403, AuthError),
        (400, BadRequestError),
        (404, BadRequestError),
        (422, BadRequestError),
        (429, RateLimitError),
        (408, ProviderTimeoutError),
        (500, ServerError),
        (502, ServerError),
        (503, ServerError),
        (529, ServerError),
    ],
)
def test_status_codes_map_to_typed_errors(status, cls):
    err = from_status(EP, status, headers=None, body={"error": {"message": "nope\nsecond line"}})

    assert type(err) is cls
    assert err.status == status and err.provider == "openrouter"
    assert "\n" not in str(err)


def test_auth_message_names_the_variable_and_the_config_key():
    err = from_status(EP, 401, headers=None, body=None)

    assert (
        str(err)
        == "the endpoint rejected the API key (401): check HIPPOBOT_API_KEY / providers.openrouter.apiKey"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "x", "code": "context_length_exceeded"}},
        {"message": "x", "type": "invalid_request_error", "code": "context_length_exceeded"},
        {"error": {"message": "This model's maximum context length is 8192 tokens."}},  # vLLM
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "prompt is too long: 9 > 8"},
        },
    ],
)
def test_context_too_long_is_recognised_from_codes_first_then_prose(body):
    assert isinstance(from_status(EP, 400, headers=None, body=body), ContextTooLongError)


def test_an_ordinary_bad_request_is_not_a_context_error():
    err = from_status(EP, 400, headers=None, body={"error": {"message": "unknown field 'foo'"}})

    assert type(err) is BadRequestError


def test_error_events_inside_a_stream_are_typed_by_their_body():
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    too_long = {"code": "context_length_exceeded", "message": "too long"}

    assert isinstance(from_status(EP, None, headers=None, body=overloaded), ServerError)
    assert isinstance(from_status(EP, None, headers=None, body=too_long), ContextTooLongError)
    assert isinstance(from_status(EP, None, headers=None, body="something broke"), ServerError)


def test_rate_limit_message_says_how_long_the_server_asked_to_wait():
    err = from_status(EP, 429, headers={"retry-after": "20"}, body=None)

    assert err.retry_after == 20.0 and "retry after 20s" in str(err)


def test_unreachable_message_reads_the_cause_chain():
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as inner:
            raise RuntimeError("transport failed") from inner
    except RuntimeError as outer:
        err = unreachable(EP, outer)

    assert isinstance(err, EndpointUnreachableError)
    assert str(err).startswith("cannot reach https://openrouter.ai/api/v1 (connection refused):")
