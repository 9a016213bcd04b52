"""The memory page in a real browser: log in once, stay logged in, and pages on other
origins cannot use the server."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

KEY = "configured-key-" + "4" * 30


def wait_until(driver, condition, timeout: float = 15.0):
    from selenium.common.exceptions import JavascriptException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page being replaced can hand out elements that are gone a moment later, or unload
    # under a script: look again.
    wait = WebDriverWait(
        driver, timeout, ignored_exceptions=(StaleElementReferenceException, JavascriptException)
    )
    return wait.until(condition)


def log_in_with_form(driver, token: str) -> None:
    from selenium.webdriver.common.by import By

    # Mark the old document: the answer to the post is a new document without the mark.
    # (Waiting for the old <html> element to go stale asks the browser about a node that
    # may already be gone, which Chromium sometimes answers with an inspector error.)
    driver.execute_script("window.__before_login = true")
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The form posts and the browser loads the answer: read nothing of the old page after this.
    wait_until(
        driver,
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && window.__before_login === undefined"
        ),
    )


def h1_and_body(driver) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "h1").text, driver.find_element(By.TAG_NAME, "body").text


def test_log_in_once_with_the_printed_token_and_stay_logged_in(browser, serve_process):
    served = serve_process()
    token = served.login_url.split("?token=", 1)[1]

    browser.get(served.root + "/")
    first = browser.find_element("tag name", "body").text
    log_in_with_form(browser, "not the token")
    wrong = browser.find_element("tag name", "body").text
    log_in_with_form(browser, token)
    wait_until(browser, lambda d: "Memory files" in d.find_element("tag name", "body").text)
    after_login = browser.current_url
    browser.refresh()
    _, reloaded = h1_and_body(browser)
    cookies = {c["name"]: c for c in browser.get_cookies()}

    assert "Log in with the token" in first and "Memory files" not in first
    assert "not right" in wrong
    assert after_login == served.root + "/"
    assert "Memory files" in reloaded and "History" in reloaded
    (cookie,) = cookies.values()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert token not in cookie["value"]
    # Scripts on the page cannot read the cookie.
    assert browser.execute_script("return document.cookie") == ""


def test_the_token_url_logs_in_with_a_configured_key_and_leaves_the_address_bar(
    browser, serve_process
):
    served = serve_process(HIPPOBOT_SERVE_KEY=KEY)
    assert "?token=" not in served.login_url  # a configured key is never printed

    browser.get(f"{served.root}/?token={KEY}")
    wait_until(browser, lambda d: "Memory files" in d.find_element("tag name", "body").text)
    landed = browser.current_url
    browser.get(served.root + "/")
    _, again = h1_and_body(browser)

    assert landed == served.root + "/"  # the redirect took the key out of the URL
    assert "Memory files" in again


ATTACK = """<!doctype html><html><body><p id=status>running</p>
<iframe name=sink></iframe>
<form id=form method=post enctype=text/plain target=sink action="{api}/v1/chat/completions">
<input name='{{"messages": [{{"role": "user", "content": "form says hi"}}], "x": "' value='"}}'>
</form>
<script>
const api = "{api}";
const results = {{}};
const body = JSON.stringify({{messages: [{{role: "user", content: "page says hi"}}]}});
async function attempt(name, request) {{
  try {{
    const response = await request();
    results[name] = response.type === "opaque" ? "opaque" : "read " + response.status;
  }} catch (e) {{
    results[name] = "blocked";
  }}
}}
(async () => {{
  await attempt("plain", () => fetch(api + "/v1/chat/completions", {{method: "POST",
    mode: "no-cors", credentials: "include", headers: {{"Content-Type": "text/plain"}}, body}}));
  await attempt("json", () => fetch(api + "/v1/chat/completions", {{method: "POST",
    credentials: "include", headers: {{"Content-Type": "application/json"}}, body}}));
  await attempt("page", () => fetch(api + "/", {{credentials: "include"}}));
  document.getElementById("form").submit();
  await new Promise(r => setTimeout(r, 1500));
  document.getElementById("status").textContent = JSON.stringify(results);
}})();
</script></body></html>"""


@pytest.fixture
def attack_site(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``attack_site(api_root)``: the URL of a page, served on another 127.0.0.1 port,
    that tries to run turns on ``api_root``."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def make(api_root: str) -> str:
        (tmp_path / "index.html").write_text(ATTACK.format(api=api_root))

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(tmp_path), **kwargs)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/index.html"

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_port_cannot_run_a_turn_even_when_logged_in(
    browser, serve_process, attack_site, scripted_model
):
    import json

    served = serve_process()
    browser.get(served.login_url)  # logged in: the cookie is set for 127.0.0.1
    wait_until(browser, lambda d: "Memory files" in d.find_element("tag name", "body").text)

    browser.get(attack_site(served.root))
    wait_until(browser, lambda d: d.find_element("id", "status").text != "running")
    results = json.loads(browser.find_element("id", "status").text)

    assert results == {"plain": "opaque", "json": "blocked", "page": "blocked"}
    assert scripted_model.requests == []  # no turn reached the model
    assert not (served.workspace / "sessions" / "api").exists()  # nor a session file
