"""What hippobot itself kept of a "remember that…" reaches an API client where it can ignore
it: an SSE comment in a stream, a ``hippobot`` field beside the standard ones otherwise."""

from __future__ import annotations

import json


def test_serve_reports_what_it_kept_where_a_client_can_ignore_it(serve, scripted_model):
    srv = serve()
    scripted_model.reply("Got it.")
    body = {"model": "hippobot", "user": "ada",
            "messages": [{"role": "user", "content": "note that my train leaves at 7"}]}  # fmt: skip
    answer = srv.http.post(f"{srv.base_url}/chat/completions", json=body).json()
    assert answer["choices"][0]["message"]["content"] == "Got it."
    assert answer["hippobot"]["remembered"].startswith('kept in memory: "note that my train leaves at 7"')
    # The official SDK reads the same answer without a word about it.
    scripted_model.reply("Sure.")
    streamed = srv.http.post(f"{srv.base_url}/chat/completions", json={
        **body, "stream": True, "messages": [{"role": "user", "content": "Don't forget: gate 12"}]})  # fmt: skip
    lines = streamed.text.splitlines()
    assert any(ln.startswith(': hippobot kept in memory: "Don\'t forget: gate 12"') for ln in lines)
    chunks = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "Sure."
    scripted_model.reply("Fine.")
    sdk = srv.client().chat.completions.create(
        model="hippobot", user="ada", messages=[{"role": "user", "content": "remember that I like tea"}]
    )
    assert sdk.choices[0].message.content == "Fine."
