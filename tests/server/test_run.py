"""``hippobot serve`` as a real process: address rules, start-up line, SIGTERM."""

from __future__ import annotations

import signal

import openai
import pytest

from hippobot.errors import UserError
from hippobot.server.run import bind_socket, resolve_bind
from hippobot.testing.process import spawn_serve

from .serving import session_messages


@pytest.mark.parametrize(
    ("host", "key", "bound", "warned"),
    [
        ("0.0.0.0", None, "127.0.0.1", True),
        ("192.168.1.20", None, "127.0.0.1", True),
        ("0.0.0.0", "a-key-long-enough", "0.0.0.0", False),
        ("127.0.0.1", None, "127.0.0.1", False),
        ("::1", None, "::1", False),
        ("localhost", None, "localhost", False),
    ],
)
def test_without_a_key_only_loopback_is_bound(host, key, bound, warned):
    address, warning = resolve_bind(host, key)

    assert address == bound
    assert (warning is not None) == warned
    if warning:
        assert host in warning and "HIPPOBOT_SERVE_KEY" in warning


def test_a_port_in_use_is_a_clear_error():
    taken = bind_socket("127.0.0.1", 0)
    try:
        with pytest.raises(UserError, match=r"cannot listen on 127\.0\.0\.1:\d+.*--port"):
            bind_socket("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def test_the_real_process_serves_and_stops_on_sigterm(make_agent, scripted_server, scripted_model):
    agent = make_agent()  # an onboarded workspace in this test's HIPPOBOT_HOME
    scripted_model.fallback = lambda req: f"heard: {req.last_user_words()}"
    served = spawn_serve(agent.settings.home, scripted_server.base_url, "--host", "0.0.0.0")
    try:
        url = served.wait_line(r"listening on (http://127\.0\.0\.1:\d+/v1)").group(1)
        token = served.wait_line(r"memory page: http://127\.0\.0\.1:\d+/\?token=(\S+)").group(1)
        with pytest.raises(openai.AuthenticationError):  # loopback alone is no key
            openai.OpenAI(base_url=url, api_key="none", max_retries=0).models.list()
        client = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
        reply = client.chat.completions.create(
            model="hippobot", user="proc", messages=[{"role": "user", "content": "ping"}]
        )
        served.proc.send_signal(signal.SIGTERM)
        served.wait_line(r"hippobot serve: stopped")
        served.proc.wait(30)
    finally:
        served.stop()
    seen = served.seen

    assert any("will not listen on 0.0.0.0" in line for line in seen)
    token_file = agent.settings.home / "serve-token"
    assert token_file.read_text().strip() == token and token_file.stat().st_mode & 0o777 == 0o600
    assert reply.choices[0].message.content == "heard: ping"
    assert session_messages(agent, "api:proc") == [("user", "ping"), ("assistant", "heard: ping")]
