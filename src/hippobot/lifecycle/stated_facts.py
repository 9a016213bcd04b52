"""Facts the user stated, kept in the archive whatever the model's summary made of them.

A small model's summary drops facts ("I'm Maya" left out) or tags them ``[ephemeral]`` (a
cat). So the consolidator does not rely on it alone: it finds the user's own statement-like
sentences in the slice (a name, a place, a code, "remember that…"), and each one no durable
line of the summary states (by the one fact matcher, :func:`hippobot.memory.facts.states`)
is added to the entry in the user's words, turned to the third person so that the prompt's
Recent History and Dream read it as a fact about the user: "Remember this: my locker code at
work is 4417" becomes ``- [permanent] User's locker code at work is 4417``.

Only the user's messages count (not the assistant's, not tool results); questions, requests
and small talk are not statements. A "remember …" sentence is ``[permanent]`` (the user asked
for it to be kept), any other statement ``[durable]``. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hippobot.factmatch import Said, split_sentences, unsaid_names
from hippobot.lazy_regex import lazy_compile
from hippobot.lifecycle.summaries import ParsedSummary
from hippobot.memory.facts import fact_lines, keywords, states
from hippobot.memory.remember import asked_to_keep
from hippobot.messages import Message, public_text, runtime_text

__all__ = ["StatedFact", "about_the_user", "stated_facts", "with_stated_facts", "without_invented", "without_recalled"]

MAX_FACTS = 20  # per slice: a pasted document is not a list of facts about the user
MAX_MESSAGE_CHARS = 1500  # longer user messages are documents, not statements
MAX_SENTENCE_CHARS = 300

# Words that open a sentence without changing what it states.
_OPENER = lazy_compile(
    r"^(?:(?:hi|hello|hey|oh|well|so|also|and|but|btw|by the way|actually|ok|okay|yes|"
    r"correction|update|fyi|just so you know|for the record)\b[\s,!:.\-–]*)+",
    re.I,
)
_TOPIC = lazy_compile(r"^[^:.!?]{1,40}:\s+(?=(?:i|i'm|i’m|my|we|our)\b)", re.I)  # "About the garden: I ..."
_I_AM = r"i(?:'m|’m|\s+am)"
_SMALL_TALK = lazy_compile(
    _I_AM + r"\s+(?:fine|good|great|ok|okay|sorry|sure|not sure|glad|wondering|trying|curious|"
    r"confused|thinking|done|back|here|just|asking|kidding|joking|afraid|looking|going to ask)\b"
    r"|i\s+(?:think|guess|mean|see|wonder|hope|want|need|would like|'d like|have a question|"
    r"have an idea|have no idea|have to|don't know|do not know|like (?:it|that|this|them)|"
    r"love (?:it|that|this|them)|hate (?:it|that|this))\b",
    re.I,
)
_STATEMENT = lazy_compile(
    _I_AM + r"\s+\S"
    r"|i(?:'ve|’ve)\s+\S"
    r"|i\s+(?:live|lived|work|worked|moved|have|had|own|owned|study|studied|teach|use|used|prefer|"
    r"like|love|hate|enjoy|dislike|speak|drive|play|grew up|was born|was|got|adopted|bought|"
    r"started|joined|left|quit|married|met|go|went|visit|visited|decided|chose|picked|switched|"
    r"changed|am allergic|can't eat|cannot eat|don't eat|do not eat|never|always|usually)\b"
    r"|my\s+\w+"
    r"|call me\s+\S"
    r"|we\s+(?:decided|agreed|chose|picked|switched|moved|will use|are using|use|settled)\b",
    re.I,
)
_SENTENCE_END = lazy_compile(r"(?<=[.!?])\s+")
_LIST_MARK = lazy_compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_NAME_ONLY = lazy_compile(r"^(?i:i(?:'m|’m|\s+am))\s+([A-Z][\w'-]+)$")  # "I'm Maya"

_SUBJECTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (lazy_compile(pattern, re.I), replacement)
    for pattern, replacement in (
        (r"^" + _I_AM + r"\s+", "User is "),
        (r"^i(?:'ve|’ve|\s+have)\s+", "User has "),
        (r"^i(?:'ll|’ll|\s+will)\s+", "User will "),
        (r"^i(?:'d|’d)\s+", "User would "),
        (r"^i\s+(?:don't|do not)\s+", "User does not "),
        (r"^i\s+(?:didn't|did not)\s+", "User did not "),
        (r"^i\s+(?:can't|cannot)\s+", "User cannot "),
        (r"^my\s+", "User's "),
        (r"^call me\s+", "User wants to be called "),
        (r"^our\s+", "User's "),
    )
)
_PRONOUNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (lazy_compile(pattern, re.I), replacement)
    for pattern, replacement in (
        (r"\b" + _I_AM + r"\b", "they are"),
        (r"\bmyself\b", "themselves"),
        (r"\bmine\b", "theirs"),
        (r"\bmy\b", "their"),
        (r"\bme\b", "them"),
        (r"\bI\b", "they"),
    )
)
_UNCHANGED_VERBS = frozenset({
    "was", "had", "got", "grew", "went", "met", "left", "bought", "began", "came", "found",
    "made", "took", "saw", "knew", "thought", "ran", "won", "lost", "sold", "taught", "wrote",
    "chose", "can", "could", "should", "would", "must", "may", "might", "will", "never",
    "always", "usually", "also", "still", "just", "really",
})
_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "am": "is"}


@dataclass(frozen=True, slots=True)
class StatedFact:
    """One statement of the user's, as a fact line: ``kind`` and the third-person ``claim``."""

    kind: str  # permanent | durable
    claim: str
    message: int  # index of the message it came from, in the session
    said: str = ""  # the sentence as the user wrote it

    def render(self) -> str:
        return f"- [{self.kind}] {self.claim}"


def _third_person_verb(verb: str) -> str:
    low = verb.lower()
    if low in _UNCHANGED_VERBS or low.endswith("ed"):
        return verb
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if re.search(r"(?:s|sh|ch|x|z|o)$", low):
        return verb + "es"
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    return verb + "s"


def as_claim(sentence: str) -> str:
    """A first-person sentence as a fact about the user ("I live in Osaka" → "User lives in
    Osaka"); anything else unchanged but for its pronouns."""
    text = sentence.strip().rstrip(".!;,").strip()
    named = _NAME_ONLY.match(text)
    if named:
        return f"User's name is {named.group(1)}"
    for pattern, replacement in _SUBJECTS:
        if pattern.match(text):
            text = pattern.sub(replacement, text, count=1)
            break
    else:
        verb = re.match(r"^i\s+([a-z]+)\b", text, re.I)
        if verb:
            text = f"User {_third_person_verb(verb.group(1))}{text[verb.end():]}"
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(replacement, text)
    return text[:1].upper() + text[1:]


_FIRST_PERSON = lazy_compile(r"\b(?:i|i'm|i’m|i've|i’ve|i'll|i’ll|i'd|i’d|my|me|mine|myself)\b", re.I)


def about_the_user(fact: str) -> str:
    """A fact line about the user in the third person, sentence by sentence ("I moved. I live
    in Osaka now" → "User moved. User lives in Osaka now"); a greeting or an opener dropped,
    "please remember that" dropped (the consolidator's history lines are sometimes the
    user's own words). A sentence that does not start in the first person is left as it is.

    Why: the memory files are shown to the model as what hippobot knows about the user, and a
    1.5B model asked "What did I say about the garden?" answered with a first-person line of
    them ("I moved. I live in Osaka now"), quoting it as if the user had just said it; and
    "Hi! I'm Maya. Please remember that I work at Initech as a nurse" sat beside "User works
    at Initech as a nurse", the same fact in another voice."""
    text = fact.strip()
    if not _FIRST_PERSON.search(text):
        return text
    out = []
    for sentence in split_sentences(text):
        _kind, body = _what_it_says(sentence)
        if not body.strip(".!;, "):
            continue  # "Hi!"
        # Only a sentence about the user as its subject: "User's favourite song is 'I Will
        # Survive'" keeps its "I".
        out.append(as_claim(body) if _FIRST_PERSON.match(body) else body.rstrip(".!;,").strip())
    return ". ".join(out) if out else text


def _sentences(text: str) -> Iterable[str]:
    for line in text.splitlines():
        line = _LIST_MARK.sub("", line).strip()
        for sentence in _SENTENCE_END.split(line):
            if sentence.strip():
                yield sentence.strip()


def _what_it_says(sentence: str) -> tuple[str, str]:
    """``(kind, body)``: the sentence without its opener ("Hi!", "Correction:"), its topic
    ("About the garden:") and a "remember that" (then ``permanent``, else ``durable``)."""
    body = _OPENER.sub("", sentence).strip()
    kind = "durable"
    asked = asked_to_keep(body)  # the one "remember that..." detector, as at turn time
    if asked:
        kind, body = "permanent", asked
    return kind, _OPENER.sub("", _TOPIC.sub("", body)).strip()


def _statement(sentence: str) -> StatedFact | None:
    """The fact a sentence states (``message`` left 0), or ``None`` for anything else."""
    if sentence.endswith("?") or len(sentence) > MAX_SENTENCE_CHARS:
        return None
    kind, body = _what_it_says(sentence)
    if not body:
        return None
    if kind == "durable" and (not _STATEMENT.match(body) or _SMALL_TALK.match(body)):
        return None
    claim = as_claim(body)
    salient, other = keywords(claim)
    # "I moved." says too little to be a fact on its own (the next sentence says where).
    if not salient and (not other or (kind == "durable" and len(body.split()) < 3)):
        return None
    return StatedFact(kind, claim, 0, body)


def stated_facts(messages: Sequence[Message], *, first_index: int = 0) -> list[StatedFact]:
    """The user's statements in ``messages`` (which start at ``first_index`` of the session),
    in order, each once; at most :data:`MAX_FACTS`."""
    found: list[StatedFact] = []
    seen: set[str] = set()
    for offset, message in enumerate(messages):
        if message.get("role") != "user" or message.get("_command"):
            continue
        text = public_text(message)
        if len(text) > MAX_MESSAGE_CHARS:
            continue
        for sentence in _sentences(text):
            fact = _statement(sentence)
            if fact is None or fact.claim.lower() in seen:
                continue
            seen.add(fact.claim.lower())
            found.append(StatedFact(fact.kind, fact.claim, first_index + offset, fact.said))
            if len(found) >= MAX_FACTS:
                return found
    return found


def _covered(fact: StatedFact, lines: Sequence[str]) -> bool:
    """Whether a durable line of the summary states ``fact``, or a correction speaks of it
    (its new value replaces what the user said before: the old words must not come back)."""
    salient, _ = keywords(fact.claim)
    for line in fact_lines("\n".join(lines)):
        if not line.durable:
            continue  # an [ephemeral] line does not keep a fact
        if states(line.text, fact.claim) or (fact.said and states(line.text, fact.said)):
            return True  # in the summary's words, or in the user's own
        if line.kind == "correction" and salient & keywords("x " + line.text)[0]:
            return True
    return False


def with_stated_facts(parsed: ParsedSummary, facts: Sequence[StatedFact]) -> ParsedSummary:
    """``parsed`` plus every stated fact none of its durable lines states, in the user's
    words, after the model's lines."""
    lines = list(parsed.lines)
    added = [f.render() for f in facts if not _covered(f, lines)]
    lines.extend(line for line in added if line not in lines)
    if not lines:
        return parsed
    return ParsedSummary(tuple(lines), rejected=parsed.rejected)


def without_recalled(parsed: ParsedSummary, messages: Sequence[Message]) -> ParsedSummary:
    """``parsed`` without the durable lines that only repeat memory recalled for the slice's
    messages (the runtime context of a user message carries the hits recall found): what
    hippobot showed the model is not something the user said again, and a weak model's
    summary that restates it would bring back a line the user undid, or count as a second
    source. A line the conversation itself states (user, assistant or tool) stays."""
    recalled = "\n".join(
        runtime_text(m) for m in messages if m.get("_runtime_context")
    ).strip()
    if not recalled:
        return parsed
    said = "\n".join(public_text(m) for m in messages)
    kept = tuple(
        line
        for line in parsed.lines
        if not any(
            f.durable and states(recalled, f.text) and not states(said, f.text) for f in fact_lines(line)
        )
    )
    if kept == parsed.lines:
        return parsed
    return ParsedSummary(kept, nothing=not kept, rejected=parsed.rejected)


def without_invented(parsed: ParsedSummary, source: str) -> ParsedSummary:
    """``parsed`` without the lines that name someone or something ``source`` (the request
    the model answered) never mentions (kept in ``invented``, for the log).
    Qwen2.5-Coder-1.5B summarised a session about a locker code and a move to Osaka with "[correction] The user corrected
    their name from Maya to Lily"; Dream placed it and the next session's memory said so. A
    line the code drops loses nothing the user said: the stated facts are added after."""
    said = Said.of(source)
    kept: list[str] = []
    dropped: list[str] = []
    for line in parsed.lines:
        facts = fact_lines(line)
        (dropped if any(unsaid_names(f.text, said) for f in facts) else kept).append(line)
    if not dropped:
        return parsed
    return ParsedSummary(tuple(kept), nothing=not kept, rejected=parsed.rejected, invented=tuple(dropped))
