"""The pytest plugin: network guard, home isolation and the scripted-model fixtures."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from hippobot.testing.pytest_plugin import NetworkBlockedError


def test_connecting_outside_the_machine_is_blocked():
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(NetworkBlockedError, match="blocked"),
    ):
        sock.connect(("203.0.113.7", 443))  # TEST-NET-3: never reached, the guard fires first


def test_connect_ex_and_ipv6_are_guarded_too():
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(NetworkBlockedError),
    ):
        sock.connect_ex(("198.51.100.1", 80))
    with (
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock,
        pytest.raises(NetworkBlockedError),
    ):
        sock.connect(("2001:db8::1", 80, 0, 0))


def test_loopback_and_unix_sockets_are_allowed(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            assert client.getpeername() == server.getsockname()
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            assert client.getpeername() == path


def test_home_is_isolated_and_provider_variables_are_cleared(hippobot_home):
    assert os.environ["HIPPOBOT_HOME"] == str(hippobot_home)
    assert not any(name.startswith(("OPENAI_", "ANTHROPIC_")) for name in os.environ)


INNER_TESTS = """
import socket
import httpx
import pytest

def test_unscripted_http_call(scripted_server):
    httpx.post(scripted_server.base_url + "/chat/completions",
               json={"model": "m", "messages": [{"role": "user", "content": "where are my keys?"}]})

def test_scripted_call(scripted_server, scripted_model):
    scripted_model.reply("in the drawer")
    r = httpx.post(scripted_server.base_url + "/chat/completions",
                   json={"model": "m", "messages": [{"role": "user", "content": "where?"}]})
    assert r.json()["choices"][0]["message"]["content"] == "in the drawer"

@pytest.mark.allow_network
def test_opted_out():
    assert socket.socket.connect.__qualname__ == "socket.connect"

def test_the_callers_settings_are_gone_the_test_runs_settings_stay():
    import os
    assert "HIPPOBOT_MODEL" not in os.environ and "OPENAI_API_KEY" not in os.environ
    assert os.environ["HIPPOBOT_TEST_FRESH_CLI"] == "1"
"""


def test_fixtures_fail_unscripted_calls_and_honour_the_marker(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TESTS))
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HIPPOBOT_MODEL": "the-callers-model",
           "OPENAI_API_KEY": "sk-the-callers-key", "HIPPOBOT_TEST_FRESH_CLI": "1"}

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hippobot.testing.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "-rA", "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    out = result.stdout
    assert "4 passed, 1 error" in out, (
        out
    )  # the unscripted test passes its body, errors at teardown
    assert "ERROR at teardown of test_unscripted_http_call" in out
    assert "where are my keys?" in out
