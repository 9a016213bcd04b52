"""Keep credentials out of the archive.

History entries are summaries of conversations, and conversations contain pasted
configs, ``curl`` commands and tool output. Whatever reaches ``memory/history.jsonl`` is
shown in prompts, indexed for search and kept for a long time, so secrets are replaced
with ``[REDACTED]`` before an entry is written.

Two mechanisms:

* :func:`redact_secrets` recognises well-known token shapes (vendor prefixes, PEM
  private keys, ``Authorization: Bearer``, ``api_key = "..."`` assignments). Patterns
  require a vendor prefix plus enough random-looking characters, so ordinary words
  ("sk-learn", "the bearer of bad news", "max_tokens: 4096") are left alone.
* :func:`redact_exact` removes the keys hippobot itself was configured with, whatever
  their shape, and their simple encodings (:func:`secret_forms`: base64 and URL-safe
  base64 of the key, with or without the newline ``echo`` adds, and hex). An encoding
  that starts mid-stream (the key base64-encoded inside a longer text), a wrapped base64
  line, or anything encrypted or reversed is not recognised.

Both are pure functions; where a key name is part of the match it is kept and only the
value is replaced, so the text still says *what* was there.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable

__all__ = ["REDACTED", "redact_exact", "redact_secrets", "secret_forms"]

REDACTED = "[REDACTED]"

# Characters a token body is made of; used for the "no more token after this" guard so a
# pattern never replaces only the front half of a longer token.
_TAIL = r"(?![A-Za-z0-9_\-])"

# Whole-token patterns: the entire match is replaced.
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-, sk-admin-) and Anthropic (sk-ant-api03-...).
    # Random bodies contain a digit; hyphenated prose ("sk-this-is-...") does not.
    re.compile(r"(?<![A-Za-z0-9_\-])sk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"),
    # Stripe secret / restricted keys.
    re.compile(r"(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}" + _TAIL),
    # GitHub personal, OAuth, user-to-server, server and refresh tokens.
    re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}" + _TAIL),
    re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}" + _TAIL),
    # AWS access key ids (long-term AKIA, temporary ASIA).
    re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    # Slack bot / app / user / refresh / legacy tokens.
    re.compile(r"(?<![A-Za-z0-9_])xox[abprs]-[A-Za-z0-9\-]{10,}" + _TAIL),
    # Google API keys: "AIza" + 35 characters.
    re.compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}" + _TAIL),
    # Hugging Face access tokens.
    re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}" + _TAIL),
    # PEM private keys, including a block cut off before its END line.
    re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*\Z)",
        re.DOTALL,
    ),
)

# "Bearer <token>": the word stays, the token goes. A real token is long and has a
# digit somewhere, which the English noun is never followed by.
_BEARER = re.compile(
    r"(?P<keep>\bBearer\s+)(?P<value>(?=[A-Za-z0-9._~+/=\-]*\d)[A-Za-z0-9._~+/=\-]{16,})",
    re.IGNORECASE,
)

# ``api_key = "..."``, ``"apiKey": "..."``, ``CLIENT_SECRET=...``, ``password: '...'``.
# The name must *end* in one of these words so ``max_tokens`` or ``token_count`` do not
# match. Quoted values of 8+ characters are replaced; unquoted ones must also contain a
# digit, so prose like ``token: required`` survives. JSON inside a string may carry
# escaped quotes (\"apiKey\": \"...\").
# The name starts where a word starts, and name prefix and value are bounded: unbounded
# runs backtrack quadratically through long blobs (base64, minified JSON) in tool output.
_SECRET_NAME = (
    r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{0,40}?"
    r"(?:api[_\-]?key|apikey|secret|secret[_\-]?key|token|password|passwd)"
)
_ASSIGNMENT_QUOTED = re.compile(
    r"(?P<keep>(?P<q1>\\?[\"']?)" + _SECRET_NAME + r"(?P=q1)\s*[:=]\s*(?P<q2>\\?[\"']))"
    r"(?P<value>[^\"'\\\n]{8,256})(?=(?P=q2))",
    re.IGNORECASE,
)
_ASSIGNMENT_BARE = re.compile(
    r"(?P<keep>" + _SECRET_NAME + r"\s*[:=]\s*)"
    r"(?P<value>(?=[^\s\"',;]{0,256}?\d)[^\s\"',;]{8,256})",
    re.IGNORECASE,
)


def _keep_name(match: re.Match[str]) -> str:
    return match.group("keep") + REDACTED


def redact_secrets(text: str) -> str:
    """``text`` with recognised credentials replaced by ``[REDACTED]``.

    Idempotent: redacting twice gives the same text as redacting once.
    """
    if not text:
        return text
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    text = _BEARER.sub(_keep_name, text)
    text = _ASSIGNMENT_QUOTED.sub(_keep_name, text)
    text = _ASSIGNMENT_BARE.sub(_keep_name, text)
    return text


def redact_exact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret longer than 8 characters replaced.

    For keys hippobot was configured with (``providers.*.apiKey``): they may have any
    shape, but we know them exactly. Short strings are ignored because replacing them
    would mangle ordinary text. Longer secrets are replaced first, so a secret that
    contains another is removed whole.
    """
    wanted = tuple(sorted({s for s in secrets if isinstance(s, str) and len(s) > 8}))
    if not text or not wanted:
        return text
    return _exact_pattern(wanted).sub(REDACTED, text)


def secret_forms(secret: str) -> list[str]:
    """``secret`` and the encodings a shell one-liner makes of it (see the module doc)."""
    raw = secret.encode("utf-8")
    forms = {secret}
    for data in (raw, raw + b"\n"):
        for encoded in (base64.b64encode(data), base64.urlsafe_b64encode(data)):
            text = encoded.decode("ascii")
            forms.update((text, text.rstrip("=")))
        forms.add(binascii.hexlify(data).decode("ascii"))
        forms.add(binascii.hexlify(data).decode("ascii").upper())
    # Base64 of "key" and "key\n" share a prefix; the shorter form must not stop early.
    return sorted(forms, key=len, reverse=True)


@functools.lru_cache(maxsize=16)
def _exact_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    forms = {f for s in secrets for f in secret_forms(s)}
    # Longest first, so a secret (or form) that contains another is removed whole.
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))
