"""History entries, text cleaning and secret redaction: the pure parts of the memory store."""

from __future__ import annotations

import json

import pytest

from hippobot.memory.history import (
    HistoryEntry,
    HistorySource,
    parse_line,
    split_legacy_history,
    strip_think,
)
from hippobot.redact import REDACTED, redact_exact, redact_secrets

# --- HistoryEntry serialisation ------------------------------------------------------------


def test_to_json_matches_the_spec_example_byte_for_byte():
    entry = HistoryEntry(
        cursor=42,
        timestamp="2026-04-03 00:02",
        content="- User prefers dark mode\n- Decided to use PostgreSQL",
        session_key="cli:direct",
    )
    assert entry.to_json() == (
        '{"cursor": 42, "timestamp": "2026-04-03 00:02", "content": '
        '"- User prefers dark mode\\n- Decided to use PostgreSQL", "session_key": "cli:direct"}'
    )


def test_source_is_written_last_with_from_and_to():
    entry = HistoryEntry(
        cursor=7,
        timestamp="2026-04-03 00:02",
        content="- fact",
        session_key="cli:direct",
        source=HistorySource(session="cli:direct", start=12, end=40),
    )
    line = entry.to_json()
    assert line.endswith('"source": {"session": "cli:direct", "from": 12, "to": 40}}')
    assert list(json.loads(line)) == ["cursor", "timestamp", "content", "session_key", "source"]
    assert parse_line(line) == entry


def test_none_fields_are_omitted_and_non_ascii_is_kept_literal():
    line = HistoryEntry(cursor=1, timestamp="2026-01-01 10:00", content="用户喜欢深色模式").to_json()
    assert line == '{"cursor": 1, "timestamp": "2026-01-01 10:00", "content": "用户喜欢深色模式"}'
    assert "\n" not in HistoryEntry(1, "t", "a\nb").to_json()


def test_is_raw_marks_failed_summaries_only():
    assert HistoryEntry(1, "t", "[RAW] 3 messages\n...").is_raw
    assert not HistoryEntry(1, "t", "- summary mentioning [RAW] later").is_raw
    assert not HistoryEntry(1, "t", "[RAW]no space").is_raw


# --- parse_line validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "not json",
        '{"cursor": 1, "timestamp": "t", "content": "c"',  # torn
        "null",
        "[1, 2]",
        "true",
        '"text"',
        '{"timestamp": "t", "content": "c"}',  # no cursor
        '{"cursor": true, "timestamp": "t", "content": "c"}',
        '{"cursor": -1, "timestamp": "t", "content": "c"}',
        '{"cursor": 1.5, "timestamp": "t", "content": "c"}',
        '{"cursor": "3", "timestamp": "t", "content": "c"}',
        '{"cursor": 1, "timestamp": 20260101, "content": "c"}',
        '{"cursor": 1, "timestamp": "t", "content": null}',
        '{"cursor": 1, "timestamp": "t", "content": ["c"]}',
        '{"cursor": 1, "timestamp": "t", "content": "c", "session_key": 5}',
    ],
)
def test_invalid_lines_are_rejected(line):
    assert parse_line(line) is None


def test_valid_nanobot_line_without_session_key_parses():
    entry = parse_line('{"cursor": 118, "timestamp": "2026-08-21 17:02", "content": "- x"}\n')
    assert entry == HistoryEntry(118, "2026-08-21 17:02", "- x")
    assert entry.session_key is None and entry.source is None


def test_explicit_null_session_key_is_accepted():
    entry = parse_line('{"cursor": 0, "timestamp": "t", "content": "", "session_key": null}')
    assert entry is not None and entry.cursor == 0 and entry.session_key is None


@pytest.mark.parametrize(
    "source",
    [
        '"cli:direct"',
        '{"session": "cli:direct", "from": 5}',
        '{"session": 3, "from": 0, "to": 1}',
        '{"session": "s", "from": true, "to": 4}',
        '{"session": "s", "from": 9, "to": 4}',
    ],
)
def test_malformed_source_is_dropped_but_the_entry_kept(source):
    line = '{"cursor": 3, "timestamp": "t", "content": "- fact", "source": ' + source + "}"
    entry = parse_line(line)
    assert entry == HistoryEntry(3, "t", "- fact")


def test_unknown_keys_are_tolerated():
    entry = parse_line('{"cursor": 2, "timestamp": "t", "content": "c", "extra": {"a": 1}}')
    assert entry == HistoryEntry(2, "t", "c")


# --- strip_think ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- plain summary", "- plain summary"),
        ("<think>let me see</think>- User likes tea", "- User likes tea"),
        ("<think>\nmulti\nline\n</think>\n\n- fact one\n- fact two", "- fact one\n- fact two"),
        ("<THINKING>x</THINKING>- fact", "- fact"),
        ("- fact <think>aside</think> more", "- fact  more"),
        ("- fact\n<think>never closed, reasoning to the end", "- fact"),
        ("reasoning without an opening tag</think>- fact", "- fact"),
        ("<think>only reasoning</think>", ""),
        ("<|im_start|>assistant\n- fact<|im_end|>", "- fact"),
        ("<|im_end|>", ""),
        ("use a <div> or <thinker> tag", "use a <div> or <thinker> tag"),
        ("<think>a<think>nested</think>- fact", "- fact"),
        ("<think>a</think>b</think>- fact", "- fact"),
        ("<think>" * 20_000 + "- lost", ""),  # also pins that this is not quadratic
    ],
)
def test_strip_think(text, expected):
    assert strip_think(text) == expected


# --- legacy HISTORY.md splitting ------------------------------------------------------------


def test_split_blank_lines_and_timestamps():
    text = "[2026-01-10 09:15] First.\n\n[2026-01-11 14:02] Second.\n[2026-01-11 18:40] Third.\n"
    entries = split_legacy_history(text, "2000-01-01 00:00")
    assert [(e.cursor, e.timestamp, e.content) for e in entries] == [
        (1, "2026-01-10 09:15", "First."),
        (2, "2026-01-11 14:02", "Second."),
        (3, "2026-01-11 18:40", "Third."),
    ]


def test_split_keeps_raw_block_together_and_later_events_split():
    text = (
        "[2026-01-12 10:00] [RAW] 2 messages\n"
        "[2026-01-12T09:58] USER: check the disk\n"
        "[?] ASSISTANT [tools: exec]: Checking.\n"
        "[2026-01-12 10:30] Cleaned old snapshots.\n"
    )
    entries = split_legacy_history(text, "2000-01-01 00:00")
    assert len(entries) == 2
    assert entries[0].is_raw
    assert entries[0].content == (
        "[RAW] 2 messages\n[2026-01-12T09:58] USER: check the disk\n"
        "[?] ASSISTANT [tools: exec]: Checking."
    )
    assert entries[1].content == "Cleaned old snapshots."


def test_split_non_standard_header_starts_entry_with_fallback_time():
    text = "[2026-01-10 09:15] First.\n[2026-01-13] Week plan.\nmore of the plan\n"
    entries = split_legacy_history(text, "2026-02-01 12:00")
    assert [(e.timestamp, e.content) for e in entries] == [
        ("2026-01-10 09:15", "First."),
        ("2026-02-01 12:00", "[2026-01-13] Week plan.\nmore of the plan"),
    ]


def test_split_accepts_iso_style_and_seconds_in_header():
    entries = split_legacy_history("[2026-01-10T09:15:33] Fact.", "x")
    assert (entries[0].timestamp, entries[0].content) == ("2026-01-10 09:15", "Fact.")


def test_split_keeps_partial_text_without_header():
    entries = split_legacy_history("just some notes\nwith two lines\n\n\n", "2026-02-01 12:00")
    assert [(e.timestamp, e.content) for e in entries] == [
        ("2026-02-01 12:00", "just some notes\nwith two lines")
    ]
    assert split_legacy_history("\n\n  \n", "x") == []


# --- redaction ------------------------------------------------------------------------------

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
    "sk-proj-Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789_abc-DEF",
    "sk-ant-api03-AbCdEf0123456789ghIJklMNopQRstUVwxYZ-abcdEFGH_ijkl",
    "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij",
    "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp-1234-5678-abcdEFGH",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    "sk_live_51H8abcdefghijklmnopqrstu",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEF12",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_known_token_shapes_are_redacted_in_context(secret):
    text = f"the key is {secret}, keep it safe"
    assert redact_secrets(text) == f"the key is {REDACTED}, keep it safe"


@pytest.mark.parametrize("secret", SECRETS)
def test_token_at_line_start_and_in_quotes(secret):
    assert secret not in redact_secrets(f'{secret}\nexport X="{secret}"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_Abc-123'",
            f"curl -H 'Authorization: Bearer {REDACTED}'",
        ),
        ("bearer abcdef0123456789abcdef", f"bearer {REDACTED}"),
        ('api_key = "q8Zt-19fh_aa02"', f'api_key = "{REDACTED}"'),
        ('{"apiKey": "0f9e8d7c6b5a4"}', f'{{"apiKey": "{REDACTED}"}}'),
        ("client_secret: 'verysecretvalue'", f"client_secret: '{REDACTED}'"),
        ("DB_PASSWORD=hunter2hunter2", f"DB_PASSWORD={REDACTED}"),
        ("access_token=abc123def456ghi", f"access_token={REDACTED}"),
        ('\\"apiKey\\": \\"0f9e8d7c6b5a4\\"', f'\\"apiKey\\": \\"{REDACTED}\\"'),
    ],
)
def test_values_are_redacted_and_names_kept(text, expected):
    assert redact_secrets(text) == expected


def test_pem_private_key_block_is_redacted_whole():
    pem = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "AAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----"
    )
    assert redact_secrets(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"
    cut = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n... (truncated)"
    assert redact_secrets("x " + cut) == f"x {REDACTED}"


@pytest.mark.parametrize(
    "text",
    [
        "We use sk-learn and scikit-learn for the model.",
        "The task-management board and risk-assessment-framework docs.",
        "sk-this-is-a-long-hyphenated-phrase-without-digits",
        "He was the bearer of bad news.",
        "Bearer tokens expire after an hour.",
        "max_tokens: 4096 and input_tokens=123456789",
        "token_count: 12345678",
        "The password is required; token: required; api_key: see the docs",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
        "AKIA is a prefix; AKIAshort is not a key",
        "ghp_short and github_pat_ are prefixes",
        "commit 3f9c2b7e0d1a4c5f8e6b9a0d2c4e6f81 fixed it",
        "用户的 API 密钥已轮换",
        "",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact_secrets(text) == text


def test_redaction_is_idempotent():
    text = 'api_key = "q8Zt-19fh_aa02" and sk-abcdefghijklmnopqrstuvwxyz0123456789 Bearer 0123456789abcdefgh'
    once = redact_secrets(text)
    assert redact_secrets(once) == once
    assert once.count(REDACTED) == 3


def test_redact_exact_replaces_configured_keys_only_when_long_enough():
    text = "my key local-proxy-key-77 and short pass12 and local-proxy-key-77 again"
    out = redact_exact(text, ["local-proxy-key-77", "pass12", ""])
    assert out == f"my key {REDACTED} and short pass12 and {REDACTED} again"


def test_redact_exact_prefers_the_longer_overlapping_secret():
    out = redact_exact("token abcdefghij-extended here", ["abcdefghij", "abcdefghij-extended"])
    assert out == f"token {REDACTED} here"


def test_redact_exact_treats_secrets_literally():
    assert redact_exact("a.b*c+d?e(f) x", ["a.b*c+d?e(f)"]) == f"{REDACTED} x"
    assert redact_exact("nothing here", []) == "nothing here"


def test_redaction_of_huge_tool_output_stays_linear():
    # Shapes that make naive patterns backtrack quadratically; each is ~100 KB, so a
    # regression shows up as a test run of minutes, not as a flaky time limit.
    blobs = [
        "api_key=" * 12_000,
        "a-" * 50_000,
        "Bearer a" * 12_000,
        "sk-" + "a" * 100_000,
    ]
    for blob in blobs:
        assert redact_secrets(blob) == blob
    quoted = redact_secrets('api_key="' * 10_000)
    assert quoted.count(REDACTED) == 5_000  # every other name is the previous one's value
    key = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
    assert redact_secrets("x" * 100_000 + " " + key) == "x" * 100_000 + " " + REDACTED
