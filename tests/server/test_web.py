"""The read-only memory page at ``/``: what the agent remembers, escaped, in one document."""

from __future__ import annotations

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
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
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
