"""Token counting: exact offline, a calibrated estimator, cached per content."""

from __future__ import annotations

import json

import pytest

from hippobot.context import tokens

ENGLISH = """\
The garden behind the old library had been left alone for years. Nobody remembered who had
planted the pear trees, but every autumn they dropped more fruit than the neighbours could
carry home. Children climbed the wall after school, filled their pockets and argued about
whether the biggest tree was really haunted. The librarian pretended not to notice. She
kept a small notebook in which she wrote down the date of the first frost, the names of the
birds she saw from her window and, occasionally, a sentence overheard from the street.
When the council finally decided to sell the land, it was that notebook, read aloud at a
public meeting, that changed their minds. People laughed at the entries about the
quarrelling magpies and went quiet at the one about the winter the river froze.
"""

CODE = '''\
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Inventory:
    """Items on a shelf, persisted as JSON next to the shop's ledger."""

    path: Path
    items: dict[str, int] = field(default_factory=dict)

    def add(self, sku: str, count: int = 1) -> None:
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        self.items[sku] = self.items.get(sku, 0) + count

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.items, indent=2, sort_keys=True))
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> "Inventory":
        if not path.exists():
            return cls(path)
        return cls(path, json.loads(path.read_text()))
'''

JSON_TEXT = json.dumps(
    {
        "orders": [
            {
                "id": 1000 + i,
                "customer": {"name": f"Customer {i}", "email": f"c{i}@example.org"},
                "lines": [{"sku": "TEA-01", "qty": i % 3 + 1, "price": 4.5}],
                "status": ["open", "paid", "shipped"][i % 3],
            }
            for i in range(12)
        ]
    },
    indent=2,
)

CHINESE = """\
周末的早晨，我们沿着河边慢慢散步。岸边的柳树刚刚发芽，空气里有一点泥土的味道。
外婆说，她小时候每年春天都会和姐妹们来这里放风筝，风大的时候线会断，风筝就飞到对岸的田里去。
后来城市越来越大，田地变成了公园和住宅楼，但这条河一直没有变。
我们在一家小茶馆坐下，点了一壶龙井和几样点心。老板认出了外婆，说她的父亲以前也常来这里下棋。
那天下午，我们听了很多从来没有听过的故事，也第一次觉得这座城市有了自己的记忆。
"""

MARKDOWN = """\
# Trip plan

## Day 1 — Lisbon
- Arrive 10:40, taxi to the hotel (Rua da Prata 23).
- Lunch near Praça do Comércio; walk up to the castle at 15:00.
- Dinner: book a table for 4 at 20:30.

## Day 2 — Sintra
1. Train from Rossio, every 20 minutes, about 40 min.
2. Pena Palace tickets: buy online the day before (~€20 each).
3. Back by 18:00; pack for the flight.

> Remember: passports, chargers, the green umbrella.
"""

SAMPLES = {"english": ENGLISH, "code": CODE, "json": JSON_TEXT, "chinese": CHINESE, "markdown": MARKDOWN}


@pytest.fixture(autouse=True)
def auto_mode():
    tokens.set_mode("auto")
    yield
    tokens.set_mode("auto")


@pytest.fixture
def fresh_process(monkeypatch):
    """Counting state as in a new process: no encoder loaded yet."""
    monkeypatch.setattr(tokens, "_state", tokens._Counter())


def test_exact_counts_use_the_offline_table():
    tokens.set_mode("exact")
    assert tokens.current_mode() == "exact"
    assert tokens.count_text("hello world") == 2
    assert tokens.count_text("") == 0


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_estimator_is_within_15_percent_of_exact(name):
    text = SAMPLES[name]
    tokens.set_mode("exact")
    exact = tokens.count_text(text)
    estimate = tokens.estimate_text(text)
    assert exact > 100
    assert abs(estimate - exact) / exact <= 0.15, (name, exact, estimate)


def test_missing_tokenizer_falls_back_to_the_estimator(fresh_process, monkeypatch, caplog):
    def broken():
        raise ImportError("no tiktoken here")

    monkeypatch.setattr(tokens, "_load_encoder", broken)
    tokens.set_mode("auto")
    n = tokens.count_text(ENGLISH)
    assert n == tokens.estimate_text(ENGLISH)
    assert tokens.current_mode() == "estimate"
    assert "estimates" in caplog.text
    # and whole messages still count, with no crash
    assert tokens.count_messages([{"role": "user", "content": ENGLISH}]) == n + tokens.MESSAGE_OVERHEAD


def test_forced_exact_mode_reports_a_missing_tokenizer(fresh_process, monkeypatch):
    def broken():
        raise RuntimeError("table missing")

    monkeypatch.setattr(tokens, "_load_encoder", broken)
    tokens.set_mode("exact")
    with pytest.raises(RuntimeError):
        tokens.count_text("hi")


def test_estimate_mode_never_loads_the_encoder(fresh_process, monkeypatch):
    def must_not_load():
        raise AssertionError("encoder loaded in estimate mode")

    monkeypatch.setattr(tokens, "_load_encoder", must_not_load)
    tokens.set_mode("estimate")
    assert tokens.count_text(CODE) == tokens.estimate_text(CODE)


def test_message_count_includes_tool_calls_ids_and_overhead():
    tokens.set_mode("exact")
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}
    plain = tokens.count_message({"role": "assistant", "content": "Reading it."})
    with_call = tokens.count_message({"role": "assistant", "content": "Reading it.", "tool_calls": [call]})
    assert with_call > plain + 10
    result = tokens.count_message({"role": "tool", "tool_call_id": "call_1", "content": "x"})
    assert result >= tokens.MESSAGE_OVERHEAD + 2


def test_images_count_as_a_fixed_cost_not_their_base64():
    big = "data:image/png;base64," + "A" * 200_000
    msg = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": big}}, {"type": "text", "text": "what is this?"}],
    }
    n = tokens.count_message(msg)
    assert tokens.IMAGE_TOKENS < n < tokens.IMAGE_TOKENS + 20


def test_bookkeeping_keys_are_not_counted():
    base = {"role": "user", "content": "hello"}
    noisy = {**base, "timestamp": "2026-01-01T00:00:00", "_runtime_context": {"version": 1, "suffix": "x" * 500}}
    assert tokens.count_message(noisy) == tokens.count_message(base)


def test_counts_are_cached_by_content_not_identity(monkeypatch):
    tokens.set_mode("exact")
    encoder = tokens._state.encoder_or_none()
    calls = []

    class Spy:
        def encode(self, text, **kw):
            calls.append(len(text))
            return encoder.encode(text, **kw)

    monkeypatch.setattr(tokens._state, "encoder", Spy())
    history = [{"role": "user", "content": ENGLISH * 2}, {"role": "assistant", "content": CODE}]
    first = tokens.count_messages(history)
    copy = json.loads(json.dumps(history))  # equal content, different objects
    assert tokens.count_messages(copy) == first
    assert len(calls) == 2  # only the first pass encoded anything
    tokens.count_messages([*copy, {"role": "user", "content": "one more"}])
    assert len(calls) == 3  # a new turn costs only its new text


def test_tool_schemas_are_counted_once_per_text():
    schemas = [{"type": "function", "function": {"name": "exec", "description": "Run a command", "parameters": {"type": "object"}}}]
    assert tokens.count_tools(schemas) == tokens.count_tools(json.loads(json.dumps(schemas))) > 5
    assert tokens.count_tools([]) == 0


def test_prompt_estimate_uses_provider_usage_plus_new_messages():
    from hippobot.context.budget import usage_estimate
    from hippobot.session.model import Session, SessionUsage

    history = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": ENGLISH},
    ]
    session = Session(key="cli:direct", messages=list(history))
    assert usage_estimate(session) is None  # no report yet: the caller counts the prompt
    # the provider said the request with the first message cost 1000 tokens
    session.usage = SessionUsage(prompt_tokens=1000, messages_at=1, replay_start=0)
    assert usage_estimate(session) == 1000 + tokens.count_messages(history[1:])
    # usage that covers more messages than exist (history was consolidated) is ignored
    session.usage = SessionUsage(prompt_tokens=1000, messages_at=3, replay_start=0)
    session.messages = history[:1]
    assert usage_estimate(session) is None


def test_set_mode_rejects_unknown_modes():
    with pytest.raises(ValueError):
        tokens.set_mode("fast")  # type: ignore[arg-type]


def test_importing_the_module_does_not_load_tiktoken():
    import subprocess
    import sys

    code = "import sys, hippobot.context.tokens; print('tiktoken' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
