"""The memory page's search box in a real browser: type, press the button, read the hits."""

from __future__ import annotations

from .test_memory_page_login import wait_until


def test_typing_into_the_search_box_shows_the_hits_and_keeps_the_query(browser, serve_process):
    from selenium.webdriver.common.by import By

    served = serve_process()
    (served.workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n## Work\n- Uses PostgreSQL for the <invoices> service\n", encoding="utf-8"
    )
    browser.get(served.login_url)
    wait_until(browser, lambda d: "Memory files" in d.find_element(By.TAG_NAME, "body").text)

    box = browser.find_element(By.ID, "q")
    box.send_keys("postgresql invoices")
    browser.find_element(By.CSS_SELECTOR, "form[role=search] button[type=submit]").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "search"))
    hits = browser.find_elements(By.CSS_SELECTOR, ".hits .entry")
    label = browser.find_element(By.CSS_SELECTOR, "label[for=q]").text

    assert browser.current_url == served.root + "/?q=postgresql+invoices"
    assert browser.find_element(By.ID, "q").get_attribute("value") == "postgresql invoices"
    assert label == "Search memory"
    first = hits[0].text
    assert "memory/MEMORY.md, line" in first and "section “Work”" in first
    assert "matched by words" in first
    assert "Uses «PostgreSQL» for the <«invoices»> service" in first  # text, not markup


def test_the_page_keeps_its_styles_and_forms_under_its_content_security_policy(browser, serve_process):
    """The page is sent with a CSP that allows its own stylesheet and nothing else: the
    styles apply, the search form works, and a script in a memory file would not run."""
    import httpx
    from selenium.webdriver.common.by import By

    served = serve_process()
    (served.workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n- likes tea\n</pre><script>document.title='pwned'</script><pre>\n", encoding="utf-8"
    )
    with httpx.Client(follow_redirects=True) as client:  # the login form, then the page
        pages = [client.get(served.root + "/"), client.get(served.login_url)]
    for page in pages:
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "style-src 'sha256-" in policy
    browser.get(served.login_url)
    wait_until(browser, lambda d: "Memory files" in d.find_element(By.TAG_NAME, "body").text)
    width = browser.execute_script("return getComputedStyle(document.body).maxWidth")
    assert width == "960px"  # the inline stylesheet is allowed by its hash (60rem)
    assert browser.title == "hippobot memory"
    browser.find_element(By.ID, "q").send_keys("tea")
    browser.find_element(By.CSS_SELECTOR, "form[role=search] button[type=submit]").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "search"))
    assert browser.current_url == served.root + "/?q=tea"
