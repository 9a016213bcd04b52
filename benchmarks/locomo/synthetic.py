"""A small made-up file of LoCoMo's shape, for tests and smoke runs (the real one is not
part of the project): ``python -m benchmarks.locomo.synthetic OUT.json``.

Each conversation is two friends chatting over a few sessions; a handful of turns carry a
fact (a pet, a trip, a hobby...), the rest is small talk that shares their names and
common words. Questions ask for the facts, some in the fact's words, some in others, and the
file includes the awkward cases of the real one: a malformed evidence list
(``"D1:3; D2:4"``), a question with no evidence, an adversarial (category 5) question.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

__all__ = ["make", "write"]

_PEOPLE = [("Nora", "Felix"), ("Ines", "Tomas"), ("Priya", "Jonah"), ("Lea", "Omar")]
# (fact said by speaker A, literal question, paraphrased question, category)
# ... and the short gold answer (the question-answering benchmark scores replies against it)
_FACTS = [
    ("I adopted a grey kitten called Pixel last week.", "What is the name of {a}'s kitten?",
     "Which animal did {a} bring home?", 4, ("Pixel", "a grey kitten")),
    ("We finally booked the trip to Lisbon for October.", "Where is {a} travelling in October?",
     "Which city will {a} visit in the autumn?", 2, ("Lisbon", "Lisbon")),
    ("I started pottery classes on Tuesday evenings.", "What classes did {a} start?",
     "What craft does {a} practise?", 4, ("pottery classes", "pottery")),
    ("My sister Maya just moved to Toronto for her new job.", "Who moved to Toronto?",
     "Where does {a}'s sibling live now?", 1, ("Maya", "Toronto")),
    ("I ran my first half marathon and finished in two hours.", "How long did {a}'s half marathon take?",
     "How fast was {a}'s first long race?", 4, ("two hours", "two hours")),
    ("I have been reading a lot of science fiction, mostly Le Guin.", "Which author has {a} been reading?",
     "What books does {a} enjoy?", 3, ("Le Guin", "science fiction")),
]
_SMALL_TALK = [
    "Hey {b}! How have you been?", "Good to hear from you, {a}. Busy week here.",
    "Work has been hectic but fine.", "That sounds nice, tell me more.",
    "Haha, same here. The weather was lovely today.", "I need to sleep more, honestly.",
    "Did you watch the game last night?", "Not really, I was out with friends.",
    "Let's catch up again soon!", "Sure, talk to you later {a}.",
]
_DATES = ["1:56 pm on 8 May, 2023", "10:15 am on 25 May, 2023", "7:30 pm on 9 June, 2023",
          "4:04 pm on 1 July, 2023"]


def make(conversations: int = 2, sessions: int = 3, seed: int = 7) -> list[dict[str, Any]]:
    """The file's content: ``conversations`` conversations of ``sessions`` sessions each."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for c in range(conversations):
        a, b = _PEOPLE[c % len(_PEOPLE)]
        conv: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
        facts = list(_FACTS)
        rng.shuffle(facts)
        qa: list[dict[str, Any]] = []
        for s in range(1, sessions + 1):
            turns: list[dict[str, Any]] = []
            talk = rng.sample(_SMALL_TALK, 6)
            for i, line in enumerate(talk):
                speaker = a if i % 2 == 0 else b
                turns.append({"speaker": speaker, "dia_id": f"D{s}:{i + 1}",
                              "text": line.format(a=a, b=b)})
            for fact, literal, paraphrase, category, (said, meant) in facts[(s - 1) * 2 : s * 2]:
                dia_id = f"D{s}:{len(turns) + 1}"
                turns.append({"speaker": a, "dia_id": dia_id, "text": fact})
                turns.append({"speaker": b, "dia_id": f"D{s}:{len(turns) + 1}",
                              "text": "Oh wow, that's great news!"})
                qa.append({"question": literal.format(a=a), "answer": said, "evidence": [dia_id],
                           "category": category})
                qa.append({"question": paraphrase.format(a=a), "answer": meant,
                           "evidence": [dia_id], "category": category})
            conv[f"session_{s}_date_time"] = _DATES[(s - 1) % len(_DATES)]
            conv[f"session_{s}"] = turns
        qa.append({"question": f"Who did {a} meet first?", "answer": "-",
                   "evidence": ["D1:3; D2:4"], "category": 1})
        qa.append({"question": f"Would {a} like opera?", "answer": "-", "evidence": [],
                   "category": 3})
        qa.append({"question": f"What did {b} say about {a}'s dragon?",
                   "adversarial_answer": "-", "evidence": ["D1:1"], "category": 5})
        out.append({"sample_id": f"synth-{c + 1}", "conversation": conv, "qa": qa})
    return out


def write(path: Path, conversations: int = 2, sessions: int = 3) -> Path:
    path.write_text(json.dumps(make(conversations, sessions), indent=1), encoding="utf-8")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m benchmarks.locomo.synthetic OUT.json", file=sys.stderr)
        raise SystemExit(2)
    print(write(Path(sys.argv[1])))
