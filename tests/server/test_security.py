"""Web pages cannot drive ``hippobot serve``: Host, Origin/CORS, content type, body size,
the key and the memory page's login cookie."""

from __future__ import annotations

import os
import stat

import httpx
import openai
import pytest

from hippobot.server.run import TOKEN_FILE, install_token
from hippobot.server.security import WebPolicy, cookie_name

from .serving import session_path

KEY = "k-" + "7" * 40
ASK = {"model": "hippobot", "messages": [{"role": "user", "content": "run a turn"}]}


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def no_turn_ran(srv, scripted_model) -> bool:
    return not scripted_model.requests and not session_path(srv.agent, "api:default").exists()


# --- requests a web page can send without asking --------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", '{"messages": [{"role": "user", "content": "run a turn"}]}'),
        ("application/x-www-form-urlencoded", "messages=run+a+turn"),
        ("multipart/form-data; boundary=x", "--x\r\n\r\nrun a turn\r\n--x--\r\n"),
        (None, '{"messages": [{"role": "user", "content": "/new"}]}'),
    ],
)
def test_a_post_that_is_not_json_never_runs_a_turn(serve, scripted_model, content_type, body):
    srv = serve()  # even with no key at all
    headers = {"Content-Type": content_type} if content_type else {}

    response = srv.http.post(f"{srv.base_url}/chat/completions", content=body, headers=headers)

    assert response.status_code == 415
    assert error_code(response) == "unsupported_media_type"
    assert "application/json" in response.json()["error"]["message"]
    assert no_turn_ran(srv, scripted_model)


def test_a_json_post_from_a_foreign_page_is_refused(serve, scripted_model):
    srv = serve(api_key=KEY)

    response = srv.http.post(
        f"{srv.base_url}/chat/completions",
        json=ASK,
        headers=auth() | {"Origin": "https://evil.example"},
    )
    page = srv.http.get(f"{srv.root}/", headers=auth() | {"Origin": "null"})

    assert response.status_code == 403 and error_code(response) == "origin_not_allowed"
    assert "serve.corsOrigins" in response.json()["error"]["message"]
    assert "access-control-allow-origin" not in response.headers
    assert page.status_code == 403
    assert no_turn_ran(srv, scripted_model)


def test_the_servers_own_origin_is_welcome(serve, scripted_model):
    srv = serve(api_key=KEY)
    scripted_model.reply("fine")

    response = srv.http.post(
        f"{srv.base_url}/chat/completions", json=ASK, headers=auth() | {"Origin": srv.root}
    )

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "fine"


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8900", "127.0.0.1.nip.io"])
def test_dns_rebinding_names_get_nothing(serve, scripted_model, host):
    srv = serve(api_key=KEY)

    page = srv.http.get(f"{srv.root}/", headers=auth() | {"Host": host})
    turn = srv.http.post(f"{srv.base_url}/chat/completions", json=ASK, headers=auth() | {"Host": host})
    health = srv.http.get(f"{srv.root}/healthz", headers={"Host": host})

    for response in (page, turn, health):
        assert response.status_code == 403 and error_code(response) == "host_not_allowed"
        assert "serve.allowedHosts" in response.json()["error"]["message"]
    assert "hippobot memory" not in page.text
    assert no_turn_ran(srv, scripted_model)


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:1234", "hippo.localhost", "127.0.0.1:80", "[::1]:9", "10.0.0.7"]
)
def test_loopback_names_and_ip_addresses_are_served(serve, host):
    srv = serve(api_key=KEY)

    response = srv.http.get(f"{srv.base_url}/models", headers=auth() | {"Host": host})

    assert response.status_code == 200


def test_a_configured_host_name_is_served(serve):
    srv = serve(api_key=KEY, policy=WebPolicy.of(allowed_hosts=["Hippo.Lan"]))

    named = srv.http.get(f"{srv.base_url}/models", headers=auth() | {"Host": "hippo.lan:8900"})
    other = srv.http.get(f"{srv.base_url}/models", headers=auth() | {"Host": "other.lan"})

    assert named.status_code == 200 and other.status_code == 403


# --- CORS for configured origins --------------------------------------------------------------


def test_a_configured_origin_gets_cors_and_a_preflight_without_a_key(serve, scripted_model):
    app_origin = "https://chat.example"
    srv = serve(api_key=KEY, policy=WebPolicy.of(cors_origins=[app_origin + "/"]))
    scripted_model.reply("from the browser app")

    preflight = srv.http.options(
        f"{srv.base_url}/chat/completions",
        headers={
            "Origin": app_origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-session-id",
        },
    )
    turn = srv.http.post(
        f"{srv.base_url}/chat/completions", json=ASK, headers=auth() | {"Origin": app_origin}
    )
    no_key = srv.http.post(f"{srv.base_url}/chat/completions", json=ASK, headers={"Origin": app_origin})
    stranger = srv.http.options(
        f"{srv.base_url}/chat/completions",
        headers={"Origin": "https://other.example", "Access-Control-Request-Method": "POST"},
    )

    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == app_origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "x-session-id" in preflight.headers["access-control-allow-headers"]
    assert turn.status_code == 200
    assert turn.headers["access-control-allow-origin"] == app_origin
    assert "X-Session-Id" in turn.headers["access-control-expose-headers"]
    assert turn.json()["choices"][0]["message"]["content"] == "from the browser app"
    assert no_key.status_code == 401  # CORS lets the page talk; the key is still needed
    assert no_key.headers["access-control-allow-origin"] == app_origin  # so it can read why
    assert stranger.status_code == 403 and "access-control-allow-origin" not in stranger.headers


def test_a_star_in_cors_origins_allows_every_page(serve):
    srv = serve(api_key=KEY, policy=WebPolicy.of(cors_origins=["*"]))

    response = srv.http.get(f"{srv.base_url}/models", headers=auth() | {"Origin": "http://any.example"})

    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "http://any.example"


# --- body size ------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_a_413_in_openai_shape(serve, scripted_model):
    srv = serve(api_key=KEY, policy=WebPolicy.of(max_body_bytes=64 * 1024))
    huge = {"model": "hippobot", "messages": [{"role": "user", "content": "x" * 100_000}]}

    with pytest.raises(openai.APIStatusError) as sdk:
        srv.client(api_key=KEY).chat.completions.create(**huge)

    def chunks():  # no Content-Length: the limit applies while the body arrives
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"y" * 10_000
        yield b'"}]}'

    streamed = srv.http.post(
        f"{srv.base_url}/chat/completions",
        content=chunks(),
        headers=auth() | {"Content-Type": "application/json"},
    )

    assert sdk.value.status_code == 413
    assert sdk.value.body["code"] == "request_too_large"
    assert "65536 bytes" in sdk.value.message and "serve.maxBodyBytes" in sdk.value.message
    assert streamed.status_code == 413 and error_code(streamed) == "request_too_large"
    assert no_turn_ran(srv, scripted_model)


def test_a_body_under_the_limit_still_works(serve, scripted_model):
    srv = serve(api_key=KEY, policy=WebPolicy.of(max_body_bytes=64 * 1024))
    scripted_model.reply("read it")
    text = "z" * 50_000

    reply = srv.client(api_key=KEY).chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": text}]
    )

    assert reply.choices[0].message.content == "read it"
    assert text in str(scripted_model.requests[0].messages)


# --- the key and the memory page's login ----------------------------------------------------


def test_every_api_path_needs_the_key(serve, scripted_model):
    srv = serve(api_key=KEY)

    for response in (
        srv.http.get(f"{srv.base_url}/models"),
        srv.http.post(f"{srv.base_url}/chat/completions", json=ASK),
        srv.http.post(f"{srv.base_url}/chat/completions", json=ASK, headers=auth("wrong")),
    ):
        assert response.status_code == 401 and error_code(response) == "invalid_api_key"
    assert no_turn_ran(srv, scripted_model)


def test_the_memory_page_logs_in_once_by_url_and_keeps_a_cookie(serve):
    srv = serve(api_key=KEY)
    browser = srv.browser()

    anonymous = browser.get("/")
    wrong = browser.get("/", params={"token": "nope"})
    login = browser.get("/", params={"token": KEY})
    page = browser.get("/")
    api_with_cookie = browser.get("/v1/models")

    assert anonymous.status_code == 401 and "<form method=post action=/login>" in anonymous.text
    assert "Memory files" not in anonymous.text
    assert wrong.status_code == 401 and "not right" in wrong.text
    assert login.status_code == 303 and login.headers["location"] == "/"  # token leaves the URL
    cookie = login.headers["set-cookie"]
    assert cookie.startswith(cookie_name(srv.port) + "=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert KEY not in cookie  # the cookie is derived from the key, not the key
    assert page.status_code == 200 and "Memory files" in page.text
    assert api_with_cookie.status_code == 401  # the cookie opens the page, never the API
    browser.close()


def test_the_login_form_sets_the_cookie(serve):
    srv = serve(api_key=KEY)
    browser = srv.browser()

    wrong = browser.post("/login", data={"token": "nope"})
    right = browser.post("/login", data={"token": KEY}, headers={"Origin": srv.root})
    page = browser.get("/")
    as_json = browser.post("/login", json={"token": KEY})

    assert wrong.status_code == 401 and "not right" in wrong.text
    assert right.status_code == 303 and right.headers["location"] == "/"
    assert page.status_code == 200 and "Memory files" in page.text
    assert as_json.status_code == 415
    browser.close()


def test_a_login_from_a_foreign_page_is_refused(serve):
    srv = serve(api_key=KEY)

    response = srv.http.post(
        f"{srv.root}/login", data={"token": KEY}, headers={"Origin": "https://evil.example"}
    )

    assert response.status_code == 403 and "set-cookie" not in response.headers


# --- the per-install token ------------------------------------------------------------------


def test_the_install_token_is_made_once_private_and_kept(tmp_path):
    home = tmp_path / "home"

    first = install_token(home)
    again = install_token(home)
    path = home / TOKEN_FILE

    assert first == again and len(first) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)
    assert install_token(home) == first and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_unusable_token_file_is_replaced(tmp_path):
    (tmp_path / TOKEN_FILE).write_text("short\n")

    token = install_token(tmp_path)

    assert token != "short" and (tmp_path / TOKEN_FILE).read_text().strip() == token


def test_the_install_token_is_redacted_like_a_configured_key(serve, make_agent, scripted_model):
    from hippobot.agent.agent import Agent

    home = make_agent().settings.home
    token = install_token(home)
    srv = serve(agent=Agent(make_agent().settings))  # made after the token, as serve does
    scripted_model.reply("noted")

    srv.client().chat.completions.create(
        model="hippobot", messages=[{"role": "user", "content": f"my serve token is {token}"}]
    )

    stored = session_path(srv.agent, "api:default").read_text()
    assert token not in stored and "my serve token is [REDACTED]" in stored


def test_each_person_logs_in_to_the_page_of_their_own_memory(hippobot_home, make_agent, serve):
    import json

    alice_key = "sk-alice-page-0123456789"
    config = {"serve": {"apiKey": KEY, "users": {"alice": {"apiKey": alice_key}}}}
    (hippobot_home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    owner = make_agent()
    (owner.workspace / "USER.md").write_text("# User\nThe owner's own notes.\n")
    srv = serve(agent=owner, api_key=KEY)
    alice_ws = srv.app.state.users.workspace("alice")

    alice = srv.browser()
    login = alice.post("/login", data={"token": alice_key})
    (alice_ws / "USER.md").write_text("# User\nAlice keeps bees.\n")
    page = alice.get("/")
    owner_browser = srv.browser()
    owner_browser.get("/", params={"token": KEY})
    owner_page = owner_browser.get("/")

    assert login.status_code == 303
    assert page.status_code == 200 and "Alice keeps bees." in page.text
    assert "The owner's own notes." not in page.text
    assert "The owner's own notes." in owner_page.text and "Alice keeps bees." not in owner_page.text
    alice.close()
    owner_browser.close()
