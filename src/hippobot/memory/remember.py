""""Remember that…" is never only a claim.

When a user asks hippobot to keep something ("remember that I'm vegetarian", "don't forget
my locker code is 4417", "note that…") and the model's turn wrote no memory file, the agent
records the request itself, in the user's own words, as a pending ``[permanent]`` entry of
``memory/history.jsonl`` (through the memory store's one history writer, naming the message
it quotes), and says so in one line.

Why an archive entry and not a direct edit of a memory file: the entry is visible at once in
every chat (Recent History shows other chats' durable lines), in ``hippobot memory history
--pending`` and in search; Dream then files it where it belongs, next to what is already
known, and its accounting keeps the batch pending until the fact is placed, so nothing is
lost. A direct edit would need code to guess the file and heading from free text and would
bypass Dream's merging of duplicates and corrections (the model decides what, the code
decides how). Undo goes the usual way: the Dream commit that files it can be restored.

The detector is deliberately plain: a short list of imperative phrases per language, at the
start of a sentence (after an optional "please", "and", "also" or greeting). Questions about
memory ("do you remember…?", "remember when…?") and statements ("I remember that film") are
not requests.
"""

from __future__ import annotations

import re

from hippobot.lazy_regex import lazy_compile

__all__ = ["MAX_WORDS_CHARS", "asked_to_keep", "remember_entry", "remember_request"]

MAX_WORDS_CHARS = 600  # what is kept of a long message: the request and what follows it

# Imperatives, per language; matched case-insensitively at the start of a sentence.
_TRIGGERS = [
    # English
    r"remember(?:\s+(?:that|this|:)|\s*:|\s+(?=my\b|i\b|i'm\b|the\b|to\b|we\b|our\b))",
    r"(?:do\s+not|don't|dont|never)\s+forget",
    r"(?:please\s+)?(?:note|notice)\s+(?:that|this|down)\b",
    r"(?:make|take)\s+(?:a\s+)?note",
    r"keep\s+in\s+mind",
    r"for\s+(?:the\s+)?(?:record|future\s+reference)",
    r"(?:save|store|add|write)\s+(?:this|that|it)?\s*(?:to|in|into)\s+(?:your\s+)?memory",
    r"(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:remember|note|keep\s+in\s+mind)\b(?!\s+(?:when|what|how|if|whether|who|where))",
    # French
    r"(?:souviens|rappelle)[-\s]toi", r"retiens\s+(?:que|bien)", r"n'oublie\s+pas", r"note\s+(?:que|bien)",
    # German
    r"merk\s+dir", r"vergiss\s+nicht", r"denk\s+daran", r"bitte\s+merken", r"notier\s+(?:dir|dass)",
    # Spanish, Portuguese, Italian
    r"recuerda\s+que", r"no\s+olvides", r"acu[ée]rdate", r"toma\s+nota", r"ap[úu]nta(?:te)?\s+que",
    r"lembr[ae](?:-se)?\s+(?:que|de)", r"n[ãa]o\s+(?:se\s+)?esque[çc]a", r"anota\s+(?:que|a[ií])",
    r"ricorda(?:ti)?\s+che", r"non\s+dimenticare", r"prendi\s+nota",
    # Dutch, Russian
    r"onthoud\s+(?:dat|dit|goed)", r"vergeet\s+niet", r"запомни", r"не\s+забудь",
]
_LEADS = r"(?:(?:please|pls|also|and|oh|ok|okay|btw|by\s+the\s+way|hey|hi|s'il\s+te\s+pla[iî]t|bitte|por\s+favor|per\s+favore)[\s,!:]+)*"
_REQUEST = lazy_compile(
    rf"(?:^|(?<=[.!?;\n…])\s*|(?<=[,:]\s))\s*{_LEADS}(?:{'|'.join(_TRIGGERS)})",
    re.IGNORECASE,
)
# Chinese, Japanese and Korean write no spaces: the phrase anywhere will do.
_CJK = lazy_compile(r"(?:请|請)?(?:记住|記住|别忘了|別忘了|不要忘记|不要忘記|记下来|記下來|覚えておいて|忘れないで|기억해)")
# Questions and memories, not requests.
_NOT_A_REQUEST = lazy_compile(
    r"^\s*(?:do|did|don't|dont|can't|cant)\s+you\s+remember|^\s*remember\s+(?:when|how|what|who|where|the\s+time)\b",
    re.IGNORECASE,
)


def remember_request(text: str) -> str | None:
    """The words of ``text`` the user asks to keep (from the sentence that asks, to the end,
    or the whole message when it is short), or ``None`` when it asks nothing of the kind."""
    flat = text.strip()
    if not flat or flat.startswith("/"):
        return None
    match = _REQUEST.search(flat)
    if match is None:
        match = _CJK.search(flat)
    if match is None:
        return None
    sentence_start = match.start() + len(flat[match.start() : match.end()]) - len(
        flat[match.start() : match.end()].lstrip()
    )
    if _NOT_A_REQUEST.match(flat[sentence_start:]):
        return None
    if len(flat) <= MAX_WORDS_CHARS:
        return flat
    words = flat[sentence_start:].strip()
    return words if len(words) <= MAX_WORDS_CHARS else words[: MAX_WORDS_CHARS - 1].rstrip() + "…"


_SENTENCE_REQUEST = lazy_compile(rf"\s*{_LEADS}(?:{'|'.join(_TRIGGERS)})", re.IGNORECASE)
_THAT = lazy_compile(r"^(?:that|this|it)?\s*[:,\-–]?\s*(?:that\s+)?", re.IGNORECASE)


def asked_to_keep(sentence: str) -> str | None:
    """What one sentence asks to keep, without the asking ("Remember this: my code is 4417"
    -> "my code is 4417"), or ``None`` when the sentence is not such a request. The same
    phrases as :func:`remember_request`; the consolidator's stated facts use it too."""
    flat = sentence.strip()
    if _NOT_A_REQUEST.match(flat):
        return None
    match = _SENTENCE_REQUEST.match(flat) or _CJK.match(flat)
    if match is None:
        return None
    rest = _THAT.sub("", flat[match.end() :].lstrip(" ,:")).strip()
    return rest or None


def remember_entry(words: str, citation: str) -> str:
    """The history entry's content: one durable line holding the user's own words and
    nothing else (Dream's accounting checks that a memory file states its words), then an
    untagged line naming the message it quotes (``session cli:direct#4``, which memory_get
    opens).

    The pointer is in the text, not in the entry's ``source``: a ``source`` range says which
    messages an entry *summarises*, and the consolidator moves a session's archive pointer
    past the newest such range after a crash, which would skip the messages before this one."""
    return (
        f"- [permanent] {' '.join(words.split())}\n"
        f"  (the user's own words, asked to be remembered: {citation})"
    )
