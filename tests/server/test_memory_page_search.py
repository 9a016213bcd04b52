"""The memory page's search box (``GET /?q=...``): hybrid recall over the asking user's own
workspace, every hit saying where it is from and whether its words or its meaning matched."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import httpx
import pytest

from hippobot.agent.agent import Agent
from hippobot.memory.history import HistorySource
from hippobot.server.security import cookie_name
from hippobot.server.web import QUERY_MAX_CHARS
from hippobot.testing import ScriptedModel
from hippobot.testing.server import ScriptedServer

from .serving import Running

KEY = "page-search-key-0123456789"
ALICE = "sk-alice-search-0123456789"
# The workspace's configured model key: it must never show on the page.
MODEL_KEY = "sk-test-key-000000000000"

_AXES = {"car": 0, "automobile": 0, "dog": 1, "puppy": 1, "pet": 1, "cat": 1, "rain": 2, "umbrella": 2}


def concept_vector(text: str) -> list[float]:
    """A test double served as /v1/embeddings: a few words share an axis ("dog" is near
    "cat"), every other word lands on a fourth one. It is not a model."""
    vec = [0.0] * 4
    for word in re.findall(r"[a-z]+", text.lower()):
        vec[_AXES.get(word, 3)] += 1.0
    return vec


def semantic_config(home: Path, server: ScriptedServer, **extra: object) -> None:
    config = {
        "recall": {"embeddings": {"provider": "vllm", "model": "concepts", "dimensions": 4}},
        "providers": {"vllm": {"apiBase": server.base_url}},
        **extra,
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


MEMORY = """# Memory

## Pets
- Has a cat named Luna

## Work
- Uses PostgreSQL for the invoices service
"""


def results(page: str) -> str:
    """The "Search results" section of a page (empty when there is none)."""
    start = page.find('<h2 id="search">')
    if start < 0:
        return ""
    end = page.find("<h2 ", start + 1)
    return page[start:end]


def hit_blocks(page: str) -> list[str]:
    return re.findall(r"<div class=entry>.*?</pre></div>", results(page), flags=re.S)


def shown(block: str) -> str:
    """What a person reads in a piece of the page (tags gone, entities decoded, the «»
    around matched words dropped)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", block)).replace("«", "").replace("»", "")


def search(srv: Running, query: str, **kw: object) -> httpx.Response:
    return srv.http.get(f"{srv.root}/", params={"q": query}, **kw)  # type: ignore[arg-type]


@pytest.fixture
def semantic_agent(hippobot_home, scripted_server, scripted_model, make_agent) -> Agent:
    scripted_model.embedding = concept_vector
    semantic_config(hippobot_home, scripted_server)
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    return agent


def test_a_paraphrase_is_found_by_meaning_and_a_literal_query_by_its_words(serve, semantic_agent):
    srv = serve(agent=semantic_agent)

    by_meaning = search(srv, "dog")
    by_words = search(srv, "PostgreSQL")

    assert by_meaning.status_code == 200 and by_meaning.headers["cache-control"] == "no-store"
    (first, *_) = hit_blocks(by_meaning.text)
    assert "Has a cat named Luna" in shown(first)  # no shared word with "dog"
    assert "matched by <span class=how>meaning</span>" in first
    assert "memory/MEMORY.md, line " in first and "section “Pets”" in first
    (literal, *_) = hit_blocks(by_words.text)
    assert "Uses «PostgreSQL» for the invoices service" in literal  # the matched word marked
    assert "matched by <span class=how>words and meaning</span>" in literal
    assert "section “Work”" in literal
    # The results come first, the rest of the page still follows.
    page = by_meaning.text
    assert page.index("Search results") < page.index("Memory files")
    assert '<a href="#search">Search results</a>' in page


def test_each_hit_says_where_it_is_from_and_when(serve, make_agent, scripted_model):
    agent = make_agent()
    agent.memory.append_history(
        "- Decided to move the invoices database to PostgreSQL", session_key="api:ada",
        source=HistorySource("api:ada", 0, 2), timestamp="2026-03-01 10:15",
    )  # fmt: skip
    srv = serve(agent=agent)
    scripted_model.reply("PostgreSQL it is.")
    srv.client().chat.completions.create(
        model="hippobot", user="bo",
        messages=[{"role": "user", "content": "Should the invoices run on PostgreSQL?"}],
    )  # fmt: skip

    page = search(srv, "invoices PostgreSQL").text

    blocks = hit_blocks(page)
    history = next(b for b in blocks if "history entry" in b)
    assert "history entry #1 (conversation api:ada)" in history and "2026-03-01 10:15" in history
    assert "<code>history#1</code>" in history
    asked = next(b for b in blocks if "Should the invoices run" in shown(b))
    assert "conversation api:bo, message #0, user" in asked
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", asked)  # when it was said
    # Without recall.embeddings every hit is found by its words; nothing claims meaning.
    assert all("matched by <span class=how>words</span>" in b for b in blocks)
    assert "semantic recall" not in results(page)


def test_memory_text_and_the_query_are_escaped_and_keys_redacted(serve, make_agent):
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n- Luna <script>alert('luna')</script> & <b>friends</b>\n"
        f"- Luna's feeder app key is {MODEL_KEY}\n",
        encoding="utf-8",
    )
    srv = serve(agent=agent)

    page = search(srv, "Luna <img src=x onerror=alert(1)>").text

    blocks = hit_blocks(page)
    (block,) = blocks
    assert "&lt;script&gt;" in block and "&lt;b&gt;" in block  # shown as text, never run
    assert "Luna <script>alert('luna')</script> & <b>friends</b>" in shown(block)
    assert "<script>" not in page and "<img" not in page and "<b>friends" not in page
    assert 'value="Luna &lt;img src=x onerror=alert(1)&gt;"' in page  # the box keeps the query
    assert MODEL_KEY not in results(page) and "feeder app key is [REDACTED]" in shown(block)


def test_the_form_works_without_scripts_and_blank_or_unknown_queries(serve, make_agent):
    srv = serve(agent=make_agent())

    plain = srv.http.get(f"{srv.root}/").text
    blank = search(srv, "   ").text
    nothing = search(srv, "zeppelin").text

    form = re.search(r"<form method=get action=/ role=search>.*?</form>", plain, flags=re.S)
    assert form is not None
    assert "<label for=q>Search memory</label>" in form.group(0)
    assert "<input id=q name=q type=search" in form.group(0)
    assert "<script" not in plain and "Search results" not in plain
    assert "Search results" not in blank
    assert "<p>No matches.</p>" in results(nothing) and 'value="zeppelin"' in nothing


def test_another_users_memory_is_never_found(hippobot_home, make_agent, serve):
    config = {"serve": {"apiKey": KEY, "users": {"alice": {"apiKey": ALICE}}}}
    (hippobot_home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    owner = make_agent()
    (owner.workspace / "USER.md").write_text("# User\nThe owner collects stamps.\n")
    srv = serve(agent=owner, api_key=KEY)
    alice_ws = srv.app.state.users.workspace("alice")
    alice = srv.browser()
    assert alice.post("/login", data={"token": ALICE}).status_code == 303
    (alice_ws / "USER.md").write_text("# User\nAlice keeps bees on the roof.\n")
    owner_browser = srv.browser()
    owner_browser.get("/", params={"token": KEY})

    alice_bees = alice.get("/", params={"q": "bees"}).text
    alice_stamps = alice.get("/", params={"q": "stamps"}).text
    owner_bees = owner_browser.get("/", params={"q": "bees"}).text
    owner_stamps = owner_browser.get("/", params={"q": "stamps"}).text

    assert "Alice keeps bees on the roof." in shown(results(alice_bees))
    assert "<p>No matches.</p>" in results(alice_stamps) and "stamps." not in alice_stamps
    assert "<p>No matches.</p>" in results(owner_bees) and "Alice keeps bees" not in owner_bees
    assert "The owner collects stamps." in shown(results(owner_stamps))
    alice.close()
    owner_browser.close()


def test_a_search_without_login_gets_the_login_form(serve, make_agent):
    agent = make_agent()
    (agent.workspace / "USER.md").write_text("# User\nThe locker code is 4711.\n")
    srv = serve(agent=agent, api_key=KEY)

    anonymous = search(srv, "locker")
    wrong = search(srv, "locker", headers={"Authorization": "Bearer nope-nope-nope"})
    forger = srv.browser()
    forger.cookies.set(cookie_name(srv.port), "forged-" + "0" * 40)
    cookie_only = forger.get("/", params={"q": "locker"})
    with_key = search(srv, "locker", headers={"Authorization": f"Bearer {KEY}"})

    for refused in (anonymous, wrong, cookie_only):
        assert refused.status_code == 401
        assert "<form method=post action=/login>" in refused.text
        assert "4711" not in refused.text and "Search results" not in refused.text
    assert with_key.status_code == 200 and "The locker code is 4711." in shown(results(with_key.text))


def test_a_query_over_the_limit_says_so_and_the_page_still_renders(serve, make_agent):
    srv = serve(agent=make_agent())

    too_long = search(srv, "luna " * 101).text
    at_limit = search(srv, "l" * QUERY_MAX_CHARS).text

    assert f"use at most {QUERY_MAX_CHARS}." in results(too_long)
    assert "Memory files" in too_long and "History" in too_long
    assert "use at most" not in at_limit and "<p>No matches.</p>" in results(at_limit)


def test_a_broken_index_is_one_line_and_the_rest_of_the_page_renders(serve, make_agent):
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text("# Memory\n- Has a cat named Luna\n")
    (agent.workspace / ".hippobot" / "recall.sqlite3").mkdir(parents=True)  # cannot be opened
    srv = serve(agent=agent)

    response = search(srv, "Luna")

    assert response.status_code == 200
    section = results(response.text)
    assert section.count("role=alert") == 1 and "Search is unavailable" in section
    assert "hippobot memory reindex" in section
    assert "Has a cat named Luna" in response.text  # the memory files are still shown
    assert "History" in response.text and "Memory versions" in response.text


def test_a_failing_embedder_still_shows_the_word_matches_with_a_warning(
    hippobot_home, scripted_server, scripted_model: ScriptedModel, make_agent, serve
):
    semantic_config(hippobot_home, scripted_server)  # the scripted model answers 404 here
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    srv = serve(agent=agent)

    page = search(srv, "PostgreSQL").text
    again = search(srv, "PostgreSQL").text

    for each in (page, again):
        section = results(each)
        assert "searching by keywords only" in section
        (hit,) = hit_blocks(each)
        assert "Uses PostgreSQL" in shown(hit) and "matched by <span class=how>words</span>" in hit
