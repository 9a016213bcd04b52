"""A real ``hippobot serve`` process and a real headless Chromium driving it.

Chromium and its driver come from Debian's ``chromium`` and ``chromium-driver`` packages,
driven by Selenium (``.ci/run`` installs all three). Without them the browser tests skip
locally; under CI (``CI`` set) they fail instead, so a missing browser is never mistaken
for a passing test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hippobot.testing.process import ServeProcess, spawn_serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install {package})"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium with a profile of its own, quit at teardown."""
    why = _missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test cannot run in CI: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="hippobot-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Served:
    root: str  # http://127.0.0.1:<port>
    login_url: str  # what the start-up line printed for the memory page
    proc: subprocess.Popen[str]
    workspace: Path


@pytest.fixture
def serve_process(make_agent, scripted_server) -> Iterator[Callable[..., Served]]:
    """``serve_process(**env)`` starts ``hippobot serve --port 0`` on an onboarded home;
    every process is stopped at teardown."""
    started: list[ServeProcess] = []

    def start(**extra_env: str) -> Served:
        agent = make_agent()
        process = spawn_serve(agent.settings.home, scripted_server.base_url, env=extra_env)
        started.append(process)
        match = process.wait_line(r"memory page: (http://127\.0\.0\.1:\d+)/(\S*)")
        return Served(match.group(1), f"{match.group(1)}/{match.group(2)}", process.proc, agent.workspace)

    yield start
    for process in started:
        process.stop()
