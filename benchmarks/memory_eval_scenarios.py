"""The scenarios of the memory evaluation: sessions a user has, then questions in a fresh one.

Each scenario is several sessions (each ends with ``/new``), on simulated days, holding planted
facts, a correction, an explicit "remember this", distractor chatter, and facts a later question
needs from an older session or by time ("what did I say last week about…"). A fact is found in
a text when every group of ``keys`` has one alternative in it (case-insensitive); ``stale``
words are what a correction replaced and must not survive in the memory files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SCENARIOS", "Fact", "Scenario", "Session"]


@dataclass(frozen=True, slots=True)
class Fact:
    id: str
    kind: str  # planted | correction | remember | older-session | temporal
    question: str
    keys: tuple[tuple[str, ...], ...]  # all groups must match, any alternative within a group
    stale: tuple[str, ...] = ()

    def found_in(self, text: str) -> bool:
        low = text.lower()
        return all(any(k in low for k in group) for group in self.keys)


@dataclass(frozen=True, slots=True)
class Session:
    days_ago: int
    messages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    sessions: tuple[Session, ...]
    facts: tuple[Fact, ...] = field(default_factory=tuple)


CORE = Scenario(
    name="core",
    sessions=(
        Session(10, (
            "Hi! I'm Maya. Please remember that I work at Initech as a nurse.",
            "My cat is called Luna, she is a grey tabby.",
            "What is a good name for a sourdough starter?",
            "By the way, I live in Tokyo.",
        )),
        Session(7, (
            "The weather is awful today, rainy again.",
            "About the garden: I decided to plant tomatoes and basil this spring.",
            "Can you suggest a quick pasta recipe?",
        )),
        Session(2, (
            "Correction: I moved. I live in Osaka now, not in Tokyo.",
            "Remember this: my locker code at work is 4417.",
            "Thanks, that's all for today.",
        )),
    ),
    facts=(
        Fact("name", "planted", "What is my name?", (("maya",),)),
        Fact("work", "remember", "Where do I work?", (("initech",),)),
        Fact("cat", "older-session", "What is my cat called?", (("luna",),)),
        Fact("city", "correction", "Which city do I live in?", (("osaka",),), stale=("tokyo",)),
        Fact("garden", "temporal", "What did I say last week about the garden?", (("tomato", "basil"),)),
        Fact("locker", "remember", "What is my locker code at work?", (("4417",),)),
    ),
)

PROJECTS = Scenario(
    name="projects",
    sessions=(
        Session(12, (
            "I'm starting project Apollo at work; we chose PostgreSQL 16 for it.",
            "Any tips for staying focused in long meetings?",
        )),
        Session(5, (
            "Apollo update: we switched from PostgreSQL to SQLite, it is simpler for us.",
            "Please remember: the Apollo demo is on March 3rd.",
            "Tell me a joke about databases.",
        )),
    ),
    facts=(
        Fact("db", "correction", "Which database does project Apollo use?", (("sqlite",),), stale=("postgresql 16",)),
        Fact("demo", "remember", "When is the Apollo demo?", (("march 3", "3rd of march", "3 march"),)),
    ),
)

# The smallest full pipeline (one session, two facts): for endpoints too slow for "core".
MINI = Scenario(
    name="mini",
    sessions=(Session(3, ("Please remember that I work at Initech as a nurse.", "My cat is called Luna.")),),
    facts=(
        Fact("work", "remember", "Where do I work?", (("initech",),)),
        Fact("cat", "planted", "What is my cat called?", (("luna",),)),
    ),
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (CORE, PROJECTS, MINI)}
