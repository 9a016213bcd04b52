"""``redact_secrets`` finds credentials by their names instead of scanning every position:
it must redact exactly what a plain scan with the same patterns redacts."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hippobot import redact
from hippobot.redact import REDACTED, redact_secrets

PIECES = [
    "token", "api_key", "apiKey", "API-KEY", "secret", "secret_key", "SECRET-KEY", "password",
    "passwd", "my_db_password", "=", ":", " ", "\n", "\t", '"', "'", "\\", "abc123456789",
    "x", "-", "_", "Bearer ", "sk-", "1234567890abcdefghij", "\u017fecret", "\u212a", "ey",
    "a" * 45, "é",
]


def plain_scan(text: str) -> str:
    for pattern in redact._TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    text = redact._BEARER.sub(redact._keep_name, text)
    text = redact._ASSIGNMENT_QUOTED.sub(redact._keep_name, text)
    return redact._ASSIGNMENT_BARE.sub(redact._keep_name, text)


@settings(max_examples=300)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_redaction_by_name_equals_a_full_scan(text):
    assert redact_secrets(text) == plain_scan(text)


def test_redaction_by_name_equals_a_full_scan_on_many_more_texts():
    # Hypothesis finds the edge cases above and shrinks a failure; drawing its examples costs
    # ten times what checking them does, so the bulk of the texts come from a seeded sweep.
    rng = random.Random(20261201)
    for _ in range(12_000):
        pieces = PIECES if rng.random() < 0.7 else rng.sample(PIECES, 3)  # repeats, too
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert redact_secrets(text) == plain_scan(text), text


def test_assignments_are_still_redacted_in_long_text():
    filler = "notes about the project, nothing secret here. " * 20_000
    text = filler + 'config: {"apiKey": "abcd1234efgh5678"} and DB_PASSWORD=hunter2hunter2 ' + filler

    clean = redact_secrets(text)

    assert "abcd1234efgh5678" not in clean and "hunter2hunter2" not in clean
    assert '"apiKey": "[REDACTED]"' in clean and "DB_PASSWORD=[REDACTED]" in clean
    assert clean.startswith(filler) and clean.endswith(" " + filler)
