"""The read-only memory page at ``/``: what the agent remembers, escaped, in one document."""

from __future__ import annotations

import re
import shutil


def test_the_page_shows_memory_files_history_and_versions(serve, make_agent):
    agent = make_agent()
    ws = agent.workspace
    (ws / "SOUL.md").write_text("# Soul\nBe kind. <script>alert('x')</script>\n")
    (ws / "USER.md").write_text("# User\nName: Ada & friends\n")
    (ws / "memory" / "MEMORY.md").write_text("# Memory\n- Has a cat named Luna\n")
    agent.git.commit("dream: 2026-04-03 00:02, 1 change(s)")
    done = agent.memory.append_history("- Decided to use PostgreSQL", session_key="api:ada")
    agent.memory.set_dream_cursor(done.cursor)
    agent.memory.append_history("- Prefers dark mode", session_key="api:ada")
    srv = serve(agent=agent)

    response = srv.http.get(f"{srv.root}/")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<script>alert" not in page and "&lt;script&gt;alert('x')&lt;/script&gt;" in page
    assert "Name: Ada &amp; friends" in page and "Has a cat named Luna" in page
    # Newest first; only the entry Dream has not processed is pending.
    assert page.index("Prefers dark mode") < page.index("Decided to use PostgreSQL")
    assert page.count("pending Dream</span>") == 1
    assert page.index("pending Dream</span>") < page.index("Decided to use PostgreSQL")
    # The Dream commit with its diff, and the initial commit below it.
    assert "dream: 2026-04-03 00:02, 1 change(s)" in page
    assert '<span class=add>+- Has a cat named Luna</span>' in page
    assert page.index("dream: 2026-04-03") < page.index("init: memory store")


def test_the_page_says_why_versions_are_missing(serve, make_agent):
    agent = make_agent()
    shutil.rmtree(agent.workspace / ".git")
    srv = serve(agent=agent)

    page = srv.http.get(f"{srv.root}/").text

    assert "Versioning is not started yet" in page
    assert "No history entries yet." in page


def test_memory_files_are_rendered_as_markdown_and_their_html_is_text(serve, make_agent):
    agent = make_agent()
    (agent.workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n## Pets\n- Has a *cat* named **Luna**\n- Feeds her at `07:30`\n\n"
        "```\n<b>fed</b>\n```\n\n"
        "<img src=x onerror=alert(1)> <a href='#' onclick='steal()'>x</a>\n\n"
        "[docs](https://example.org/a) [bad](javascript:alert(1)) ![pixel](https://t.example/p.gif)\n"
    )
    srv = serve(agent=agent)

    page = srv.http.get(f"{srv.root}/").text

    body = page.split('id="files"', 1)[1].split('id="prompt-files"', 1)[0]
    assert "<h4>Memory</h4>" in body and "<h5>Pets</h5>" in body
    assert "<li>Has a <em>cat</em> named <strong>Luna</strong></li>" in body
    assert "<code>07:30</code>" in body and "<pre><code>&lt;b&gt;fed&lt;/b&gt;" in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body  # shown, not obeyed
    assert '<a href="https://example.org/a" rel="nofollow noopener noreferrer">docs</a>' in body
    tags = re.findall(r"<[a-zA-Z][^>]*>", page)
    assert not [t for t in tags if re.search(r"\s(on[a-z]+|style)\s*=", t)]  # nothing for a CSP to block
    assert not [t for t in tags if t.startswith(("<img", "<script")) or "javascript:" in t]


def test_the_page_is_sent_with_a_policy_that_runs_no_script_and_loads_nothing(serve, make_agent):
    # Over plain HTTP (the browser test checks what Chromium does with it, where it can run).
    srv = serve(agent=make_agent())
    response = srv.http.get(f"{srv.root}/")
    assert response.status_code == 200
    policy = {d.split()[0]: d.split()[1:] for d in response.headers["content-security-policy"].split("; ")}
    assert policy["default-src"] == ["'none'"]  # no script, image, frame or connection
    assert "script-src" not in policy
    assert [s for s in policy["style-src"] if not s.startswith("'sha256-")] == []  # only the page's own CSS
    assert policy["frame-ancestors"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"
