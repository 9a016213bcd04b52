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
  base64 of the key, with or without the newline ``echo`` adds, and hex), **in any letter
  case** (an upper-cased key still gives most of it away), and the key **without its
  well-known prefix** (``sk-proj-``, ``sk-ant-api03-``: the random part is the secret). An
  encoding that starts mid-stream (the key base64-encoded inside a longer text), a wrapped
  base64 line, or anything encrypted or reversed is not recognised.

Both are pure functions; where a key name is part of the match it is kept and only the
value is replaced, so the text still says *what* was there.

:class:`Redactor` is the one way hippobot applies them: built once per agent from the
configured keys and handed to every writer (history entries, session messages, memory
files the model writes, version commits, the search index, error texts), so each spelling
of a key is removed the same way wherever it would be kept.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable

from hippobot.lazy_regex import lazy_compile

__all__ = ["REDACTED", "Redactor", "redact_exact", "redact_secrets", "secret_forms"]

REDACTED = "[REDACTED]"

# Characters a token body is made of; used for the "no more token after this" guard so a
# pattern never replaces only the front half of a longer token.
_TAIL = r"(?![A-Za-z0-9_\-])"

# Whole-token patterns: the entire match is replaced.
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-, sk-admin-) and Anthropic (sk-ant-api03-...), in
    # any letter case. Random bodies contain a digit; hyphenated prose ("sk-this-is-...")
    # does not.
    lazy_compile(r"(?<![A-Za-z0-9_\-])[sS][kK]-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"),
    # Stripe secret / restricted keys.
    lazy_compile(r"(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}" + _TAIL),
    # GitHub personal, OAuth, user-to-server, server and refresh tokens.
    lazy_compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}" + _TAIL),
    lazy_compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}" + _TAIL),
    # AWS access key ids (long-term AKIA, temporary ASIA).
    lazy_compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    # Slack bot / app / user / refresh / legacy tokens.
    lazy_compile(r"(?<![A-Za-z0-9_])xox[abprs]-[A-Za-z0-9\-]{10,}" + _TAIL),
    # Google API keys: "AIza" + 35 characters.
    lazy_compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}" + _TAIL),
    # Hugging Face access tokens.
    lazy_compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}" + _TAIL),
    # PEM private keys, including a block cut off before its END line.
    lazy_compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*\Z)",
        re.DOTALL,
    ),
)

# "Bearer <token>": the word stays, the token goes. A real token is long and has a
# digit somewhere, which the English noun is never followed by.
_BEARER = lazy_compile(
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
_ASSIGNMENT_QUOTED = lazy_compile(
    r"(?P<keep>(?P<q1>\\?[\"']?)" + _SECRET_NAME + r"(?P=q1)\s*[:=]\s*(?P<q2>\\?[\"']))"
    r"(?P<value>[^\"'\\\n]{8,256})(?=(?P=q2))",
    re.IGNORECASE,
)
_ASSIGNMENT_BARE = lazy_compile(
    r"(?P<keep>" + _SECRET_NAME + r"\s*[:=]\s*)"
    r"(?P<value>(?=[^\s\"',;]{0,256}?\d)[^\s\"',;]{8,256})",
    re.IGNORECASE,
)


def _keep_name(match: re.Match[str]) -> str:
    return match.group("keep") + REDACTED


# Literals a match of each token pattern must contain: a pattern whose literals are all
# absent is skipped, which is exact and keeps long texts without credentials fast.
_TOKEN_LITERALS: tuple[tuple[str, ...], ...] = (
    ("sk-", "SK-", "Sk-", "sK-"),
    ("k_live_", "k_test_"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("AKIA", "ASIA"),
    ("xox",),
    ("AIza",),
    ("hf_",),
    ("PRIVATE KEY-----",),
)

# Assignment matches are found from the secret's name: its last word (the alternation of
# _SECRET_NAME) ends a run of name characters and is followed by ":" or "=", and the match
# starts at that run's start, or one or two characters before it (an opening quote, maybe
# escaped). Searching for the words
# and trying only those starts gives exactly the matches of a full scan, in linear time.
_NAME_WORDS = r"(?:api[_\-]?key|apikey|secret|secret[_\-]?key|token|password|passwd)"
# A name is followed by its closing quote (if any) and ":" or "=", in both patterns.
_ASSIGNS = r"(?=\\?[\"']?\s*[:=])"
_NAME_END = lazy_compile(_NAME_WORDS + r"(?![A-Za-z0-9_\-])" + _ASSIGNS, re.IGNORECASE)
# The same on lowercased ASCII text (same positions, no costly case folding).
_NAME_END_ASCII = lazy_compile(_NAME_WORDS + r"(?![a-z0-9_\-])" + _ASSIGNS)
_NAME_HINTS = ("key", "secret", "token", "passw")
_NAME_CHAR = lazy_compile(r"[A-Za-z0-9_\-]", re.IGNORECASE)  # as the patterns see it: "ſ" is one
_ASCII_NAME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_LONGEST_NAME = 40 + len("secret_key")


def _run_start(text: str, end: int) -> int | None:
    """Where the run of name characters ending at ``end`` starts; None if it is too long."""
    start, floor = end, max(0, end - _LONGEST_NAME - 1)
    while start > floor:
        char = text[start - 1]
        if char not in _ASCII_NAME and (char.isascii() or not _NAME_CHAR.match(char)):
            return start
        start -= 1
    return start if start == 0 else None


def _sub_named(pattern: re.Pattern[str], text: str, *, quoted: bool) -> str:
    """``pattern.sub(_keep_name, text)`` for an assignment pattern, trying only the start
    positions a match can have (see above)."""
    if text.isascii():
        lowered = text.lower()
        if not any(hint in lowered for hint in _NAME_HINTS):
            return text
        hits = _NAME_END_ASCII.finditer(lowered)
    else:
        hits = _NAME_END.finditer(text)
    out: list[str] = []
    emitted = 0  # text[:emitted] is in out
    for hit in hits:
        word = hit.start()
        if word < emitted:
            continue  # inside a value already replaced
        run = _run_start(text, word)
        if run is None:
            continue  # the name would be longer than any the pattern allows
        starts = (run - 2, run - 1, run) if quoted else (run,)
        for start in starts:
            if start < emitted:
                continue
            match = pattern.match(text, start)
            if match is not None:
                out.append(text[emitted : match.start()])
                out.append(_keep_name(match))
                emitted = match.end()
                break
    if not out:
        return text
    out.append(text[emitted:])
    return "".join(out)


def redact_secrets(text: str) -> str:
    """``text`` with recognised credentials replaced by ``[REDACTED]``.

    Idempotent: redacting twice gives the same text as redacting once. Linear in the
    length of the text (about 0.1 s per MB of prose).
    """
    if not text:
        return text
    for pattern, literals in zip(_TOKEN_PATTERNS, _TOKEN_LITERALS, strict=True):
        if any(literal in text for literal in literals):
            text = pattern.sub(REDACTED, text)
    if "bearer" in text.lower():
        text = _BEARER.sub(_keep_name, text)
    text = _sub_named(_ASSIGNMENT_QUOTED, text, quoted=True)
    text = _sub_named(_ASSIGNMENT_BARE, text, quoted=False)
    return text


def redact_exact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret longer than 8 characters replaced.

    For keys hippobot was configured with (``providers.*.apiKey``): they may have any
    shape, but we know them exactly. Short strings are ignored because replacing them
    would mangle ordinary text. Longer secrets are replaced first, so a secret that
    contains another is removed whole.
    """
    return _redact_wanted(text, _wanted(secrets))


def _wanted(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if isinstance(s, str) and len(s) > 8}))


def _redact_wanted(text: str, wanted: tuple[str, ...]) -> str:
    if not text or not wanted:
        return text
    # Any letter case: the UTF-8 bytes with their ASCII letters lowered (same length, same
    # positions) are matched against the lowered forms. That is ten times faster than a
    # case-insensitive pattern, which cannot use the regex engine's literal search.
    data = text.encode("utf-8", "surrogatepass")
    out: list[bytes] = []
    emitted = 0
    for match in _exact_pattern(wanted).finditer(data.lower()):
        out += [data[emitted : match.start()], _REDACTED_BYTES]
        emitted = match.end()
    if not out:
        return text
    out.append(data[emitted:])
    return b"".join(out).decode("utf-8", "surrogatepass")


_PREFIX_PARTS = 24  # a well-known prefix ("sk-ant-api03-") ends within this many characters
_BARE_MIN = 16  # the part after it must stay this long to be as unmistakable as a key


def secret_forms(secret: str) -> list[str]:
    """``secret``, the key without its well-known prefix (the part after each ``-`` or
    ``_`` near its start: ``sk-proj-XYZ`` gives ``proj-XYZ`` and ``XYZ``), and the encodings
    a shell one-liner makes of it (see the module doc)."""
    raw = secret.encode("utf-8")
    forms = {secret}
    forms.update(
        secret[i:] for i in range(1, min(_PREFIX_PARTS, len(secret)))
        if secret[i - 1] in "-_" and len(secret) - i >= _BARE_MIN
    )
    for data in (raw, raw + b"\n"):
        for encoded in (base64.b64encode(data), base64.urlsafe_b64encode(data)):
            text = encoded.decode("ascii")
            forms.update((text, text.rstrip("=")))
        forms.add(binascii.hexlify(data).decode("ascii"))
        forms.add(binascii.hexlify(data).decode("ascii").upper())
    # Base64 of "key" and "key\n" share a prefix; the shorter form must not stop early.
    return sorted(forms, key=len, reverse=True)


_REDACTED_BYTES = REDACTED.encode("ascii")


@functools.lru_cache(maxsize=16)
def _exact_pattern(secrets: tuple[str, ...]) -> re.Pattern[bytes]:
    """Every form of every secret as UTF-8 with ASCII letters lowered (a match can only
    start and end on a character boundary: a form starts and ends with a whole character)."""
    forms = {f.encode("utf-8", "surrogatepass").lower() for s in secrets for f in secret_forms(s)}
    # Longest first, so a secret (or form) that contains another is removed whole.
    return re.compile(b"|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)))


class Redactor:
    """The redaction every writer applies: the configured keys first (every form of
    :func:`secret_forms`: any letter case, without their prefix, simple encodings), then the
    well-known token shapes (:func:`redact_secrets`). Keys go first so that a token shape
    found inside an encoded key cannot leave the rest of the encoding behind.

    Built once (``Agent`` makes one from ``Settings.secrets()``) and passed to whatever
    keeps text. Calling it is pure and idempotent; its ``repr`` never shows a key.
    """

    __slots__ = ("secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: tuple[str, ...] = _wanted(secrets)

    def __call__(self, text: str) -> str:
        return redact_secrets(_redact_wanted(text, self.secrets))

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} configured key(s))"
