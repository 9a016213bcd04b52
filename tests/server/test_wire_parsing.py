"""What a chat-completions body may hold, field by field: the odd inputs real clients send are
taken as they always were, and each bad field gets its own 400 (the HTTP tests cover the rest)."""

from __future__ import annotations

from typing import Any

import pytest

from hippobot.server.wire import ApiError, parse_chat_request

HI = {"role": "user", "content": "hi"}


def parse(**fields: Any):
    return parse_chat_request({"messages": [HI], **fields}, {})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"n": True}, {}),  # JSON true == 1, as Python has always compared it
        ({"n": None, "stream": None}, {"stream": False}),
        ({"stream_options": False}, {"include_usage": False}),  # empty values mean none
        ({"stream_options": {"include_usage": 1}}, {"include_usage": True}),
        ({"max_completion_tokens": 7, "max_tokens": "ignored"}, {"max_tokens": 7}),
        ({"max_tokens": 9}, {"max_tokens": 9}),
        ({"stop": "END"}, {"stop": ("END",)}),
        ({"stop": ["a", "b", "c", "d"]}, {"stop": ("a", "b", "c", "d")}),
        ({"model": "gpt-4o", "tool_choice": "required"}, {"model": "gpt-4o"}),  # no tools
        ({"response_format": {"type": "text"}, "user": "bob"}, {"key": "api:bob"}),
    ],
)
def test_what_clients_send_is_taken_as_it_always_was(fields, expected):
    call = parse(**fields)
    for name, value in expected.items():
        assert getattr(call, name) == value


def test_messages_that_are_not_objects_are_passed_over():
    call = parse_chat_request({"messages": ["junk", HI, 5]}, {})
    assert call.text == "hi"


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"model": ""}, "model", "'model' must be a non-empty string"),
        ({"model": 5}, "model", "'model' must be a non-empty string"),
        ({"stream": "true"}, "stream", "'stream' must be true or false"),
        ({"n": "1"}, "n", "'n' must be 1"),
        ({"stream_options": [1]}, "stream_options", "'stream_options' must be an object"),
        ({"max_tokens": True}, "max_tokens", "'max_tokens' must be a positive integer"),
        ({"max_tokens": 5.0}, "max_tokens", "'max_tokens' must be a positive integer"),
        ({"max_completion_tokens": -1}, "max_completion_tokens", "'max_completion_tokens' must be"),
        ({"stop": ["a"] * 5}, "stop", "'stop' must be a string or a list of 1 to 4 strings"),
        ({"stop": ""}, "stop", "'stop' must be a string or a list of 1 to 4 strings"),
        ({"model": "x\ud800"}, "'model'", "'model' cannot be used: it holds a lone surrogate"),
        ({"user": "x\ud800"}, "'user'", "'user' cannot be used: it holds a lone surrogate"),
        ({"response_format": "text"}, "response_format", "'response_format' null is not supported"),
    ],
)
def test_each_bad_field_gets_its_own_400(fields, param, says):
    with pytest.raises(ApiError) as refused:
        parse(**fields)
    assert refused.value.status == 400 and refused.value.param == param
    assert refused.value.message.startswith(says)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ([{"type": "text", "text": "a"}, "b"], "messages[0].content[1] is a 'str' part"),
        ([{"type": "text"}], "messages[0].content[0] is a 'text' part"),
        ({"type": "text", "text": "a"}, "messages[0].content must be a string or a list"),
        ([], "the newest user message is empty"),
    ],
)
def test_content_that_is_not_text_says_which_part(content, says):
    with pytest.raises(ApiError) as refused:
        parse_chat_request({"messages": [{"role": "user", "content": content}]}, {})
    assert refused.value.message.startswith(says)


def test_a_task_prompt_checks_and_keeps_every_message_it_replays():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "tool", "content": 5},  # not replayed, so not read
        {"role": "user", "content": [{"type": "text", "text": "### Task: name this chat"}]},
    ]
    call = parse_chat_request({"messages": messages}, {})
    assert call.stateless and call.key == ""
    assert call.messages == (("system", "be brief"), ("user", "### Task: name this chat"))
    messages[0]["content"] = [{"type": "image_url"}]
    with pytest.raises(ApiError, match=r"messages\[0\]\.content\[0\] is a 'image_url' part"):
        parse_chat_request({"messages": messages}, {})
