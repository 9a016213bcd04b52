"""The memory files as a browser shows them: Markdown rendered, their HTML inert."""

from __future__ import annotations

from .test_memory_page_login import wait_until


def test_markdown_is_rendered_and_planted_html_never_runs(browser, serve_process):
    from selenium.webdriver.common.by import By

    served = serve_process()
    (served.workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n## Pets\n- Has a *cat* named **Luna**\n- Feeds her at `07:30`\n\n"
        "<script>document.title = 'owned'</script>\n\n"
        "<img src=x onerror=\"document.title = 'owned'\">\n",
        encoding="utf-8",
    )
    browser.get(served.login_url)
    wait_until(browser, lambda d: "Memory files" in d.find_element(By.TAG_NAME, "body").text)

    memory = browser.find_element(By.XPATH, "//h3[text()='memory/MEMORY.md']/following-sibling::div[1]")
    assert [h.text for h in memory.find_elements(By.CSS_SELECTOR, "h4, h5")] == ["Memory", "Pets"]
    items = memory.find_elements(By.TAG_NAME, "li")
    assert items[0].text == "Has a cat named Luna"
    assert items[0].find_element(By.TAG_NAME, "em").text == "cat"
    assert items[1].find_element(By.TAG_NAME, "code").text == "07:30"
    assert "<script>document.title = 'owned'</script>" in memory.text  # shown as text
    assert browser.title == "hippobot memory"
    assert browser.find_elements(By.TAG_NAME, "img") == []
