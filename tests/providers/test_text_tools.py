"""Tool calls written as text: recovered when they clearly are calls, left alone otherwise."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hippobot.providers import ChatRequest, OpenAICompatProvider, TextDelta, ToolCallEvent, collect
from hippobot.providers.base import Finish
from hippobot.providers.text_tools import (
    TextToolCallProvider,
    offered_tools,
    recover_tool_calls,
    text_tools_enabled,
)
from hippobot.testing import ScriptedModel, ScriptedProvider

OFFERED = {"read_file", "memory_get", "edit_file"}
TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object"}}}
    for n in sorted(OFFERED)
]


def calls(text: str) -> list[tuple[str, dict]]:
    found = recover_tool_calls(text, OFFERED)
    assert found is not None, f"not recovered: {text!r}"
    return [(c.name, json.loads(c.arguments)) for c in found.calls]


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n```',
        '```\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n```',
        '{"name": "read_file", "arguments": {"path": "USER.md"}}',
        '{{"name": "read_file", "arguments": {"path": "USER.md"}}}',  # Qwen via llama.cpp
        '{{"name": "read_file", "arguments": {"path": "USER.md"}}',  # doubled at the start only
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n</tool_call>',
        '<tool_call>{"name": "read_file", "arguments": {"path": "USER.md"}}',  # unclosed at the end
        '{"name": "read_file", "parameters": {"path": "USER.md"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"USER.md\\"}"}',
        '{"function": "read_file", "arguments": {"path": "USER.md"}}',
        '{"tool": "read_file", "args": {"path": "USER.md"}}',
        '{"type": "function", "function": {"name": "read_file", "arguments": {"path": "USER.md"}}}',
        '{"tool_calls": [{"name": "read_file", "arguments": {"path": "USER.md"}}]}',
        '<function=read_file>{"path": "USER.md"}</function>',
        '```xml\n<tool_call>{"name": "read_file", "arguments": {"path": "USER.md"}}</tool_call>\n```',
        '```json\n{{"name": "read_file", "arguments": {"path": "USER.md"}}}\n```',
        'Let me check that file.\n```json\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n```',
    ],
)
def test_common_written_forms_become_one_call(text: str) -> None:
    assert calls(text) == [("read_file", {"path": "USER.md"})]


def test_qwen_tools_tags_are_a_call() -> None:
    # Qwen2.5-Coder-1.5B behind llama.cpp, shown raw to the user before.
    text = '<tools>\n{"name": "memory_get", "arguments": {"citation": "history#42", "around": 3}}\n</tools>'
    assert calls(text) == [("memory_get", {"citation": "history#42", "around": 3})]
    assert calls('```\n<tools>{"name": "read_file", "arguments": {"path": "a"}}</tools>\n```') == [
        ("read_file", {"path": "a"})
    ]


def test_a_call_with_a_backslash_json_does_not_know_is_still_a_call() -> None:
    # Qwen2.5-Coder-1.5B wrote "\\[/Runtime Context]" inside a citation; the JSON did not
    # decode and the user saw the call, and the prose after it, as the answer.
    text = (
        '{"name": "memory_get", "arguments": {"citation": "history#5 \\[/Runtime Context]", "around": 1}}'
        '\n\nThis will update the entry to reflect the new value.'
    )
    assert calls(text) == [("memory_get", {"citation": "history#5 [/Runtime Context]", "around": 1})]
    # an escaped backslash stays one; what is not JSON even so is a broken call, kept as written
    assert calls('{"name": "read_file", "arguments": {"path": "a\\\\b \\_c"}}') == [("read_file", {"path": "a\\b _c"})]
    found = recover_tool_calls('{"name": "read_file", "arguments": {"path": "\\[x"', OFFERED)
    assert found is not None and found.calls[0].arguments == '{"path": "\\[x"'


def test_a_call_in_tool_response_tags_is_a_call_and_a_result_in_them_is_not() -> None:
    # Qwen2.5-Coder-1.5B wrote its calls inside the tags of a tool's result; the user saw
    # '<tool_response>\n{"name": "memory_get", ...}\n</tool_response>' as the reply, and it
    # was recalled beside a later question.
    text = '<tool_response>\n{"name": "memory_get", "arguments": "{\\"citation\\": \\"Luna\\"}"}\n</tool_response>'
    assert calls(text) == [("memory_get", {"citation": "Luna"})]
    assert recover_tool_calls('<tool_response>{"result": "Luna is a grey tabby"}</tool_response>', OFFERED) is None


def test_a_call_written_as_a_python_literal_is_a_call() -> None:
    # Qwen2.5-Coder-1.5B, asked a LoCoMo question with BM25's excerpts pasted before it: the
    # reply the user saw was this call, in single quotes.
    text = "{'name': 'memory_get', 'arguments': {'citation': 'Dave: Seeing it come to life is satisfying.'}}"
    assert calls(text) == [("memory_get", {"citation": "Dave: Seeing it come to life is satisfying."})]
    assert calls("```python\n[{'name': 'read_file', 'arguments': {'path': 'a'}}]\n```") == [("read_file", {"path": "a"})]
    # Python data that is no call stays text, and nothing but literals is ever evaluated
    assert recover_tool_calls("{'cat': 'Luna', 'colour': 'grey'}", OFFERED) is None
    assert recover_tool_calls("{'name': 'read_file', 'arguments': {'path': __import__('os').getcwd()}}", OFFERED) is None
    assert recover_tool_calls("{'name': 'read_file', 'arguments': {'path': b'bytes'}}", OFFERED) is None
    # a trailing comma, as Python allows, no longer stops a call
    assert calls('<tool_call>{"name": "read_file", "arguments": {"path": "a",}}</tool_call>') == [("read_file", {"path": "a"})]


def test_a_tool_definition_pasted_beside_a_call_is_not_shown_and_the_call_runs() -> None:
    # Qwen2.5-Coder-1.5B asked about the garden: a sentence, memory_get's schema as the
    # request sent it inside <tools> tags, then the call in a JSON block; all of it was shown.
    schema = (
        '{"type": "function", "function": {"name": "memory_get", "description": "Expand a citation.",'
        ' "parameters": {"type": "object", "properties": {"citation": {"type": "string"}},'
        ' "required": ["citation"]}}}'
    )
    text = (
        "To answer the question about the garden, I need to look at my recent history.\n\n"
        f"<tools>\n{schema}\n</tools>\n"
        '```json\n{"name": "memory_get", "arguments": {"citation": "history#4"}}\n```'
    )
    found = recover_tool_calls(text, OFFERED)
    assert found is not None
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [("memory_get", {"citation": "history#4"})]
    assert found.text == "To answer the question about the garden, I need to look at my recent history."
    # the inner object alone, before the call, is an echo too
    inner = json.dumps(json.loads(schema)["function"])
    assert calls(f'{inner}\n{{"name": "read_file", "arguments": {{"path": "USER.md"}}}}') == [
        ("read_file", {"path": "USER.md"})
    ]
    # a definition pasted with no call stays text: nothing to run
    assert recover_tool_calls(f"<tools>\n{schema}\n</tools>", OFFERED) is None
    # a definition of a tool that was not offered is no echo of this request
    assert recover_tool_calls(text.replace('"name": "memory_get", "description"', '"name": "x", "description"'), OFFERED) is None


@pytest.mark.parametrize(
    ("text", "call"),
    [
        ('<tools>{"name": "memory", "arguments": {"query": "cat"}}</tools>', ("memory", {"query": "cat"})),
        ('{"name": "delete_everything", "arguments": {}}', ("delete_everything", {})),
        ('{"name": "read_file", "arguments": ["USER.md"]}', ("read_file", ["USER.md"])),
    ],
)
def test_a_call_shaped_block_the_tools_cannot_run_is_still_a_call(text: str, call: tuple) -> None:
    """Never shown: the registry answers the model (unknown tool, arguments not an object)."""
    assert calls(text) == [call]


def test_a_bare_string_argument_goes_to_the_one_required_parameter() -> None:
    offered = offered_tools(
        [{"type": "function", "function": {"name": "memory_get", "parameters": {
            "type": "object", "properties": {"citation": {}, "around": {}}, "required": ["citation"]}}}]
    )  # fmt: skip
    found = recover_tool_calls('{"name": "memory_get", "arguments": "history#4"}', offered)
    assert found is not None and json.loads(found.calls[0].arguments) == {"citation": "history#4"}


def test_arguments_alone_are_a_call_of_the_one_tool_they_fit() -> None:
    # Qwen2.5-Coder-1.5B, asked about a LoCoMo conversation, wrote memory_get's arguments
    # without its name, then an unclosed fence of stray code; the user saw all of it.
    offered = offered_tools([
        {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {key: {}}, "required": [key]}}}
        for name, key in (("memory_get", "citation"), ("memory_search", "query"), ("read_file", "path"))
    ])  # fmt: skip
    written = '{\n  "citation": "session locomo:conv-43-s24#11"\n}\n```\nobj[\'memory_search\'][\'arguments\']`'
    found = recover_tool_calls(written, offered)
    assert found is not None and found.text == ""
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [
        ("memory_get", {"citation": "session locomo:conv-43-s24#11"})]
    # Objects that fit no tool, or more than its one parameter, or not a string, stay text.
    for data in ('{"name": "Luna"}', '{"citation": "x", "around": 2}', '{"query": 5}'):
        assert recover_tool_calls(data, offered) is None, data


def test_several_calls_in_a_list_or_one_after_another() -> None:
    two = [("read_file", {"path": "USER.md"}), ("memory_get", {"citation": "history#3"})]
    listed = json.dumps([{"name": n, "arguments": a} for n, a in two])
    assert calls(listed) == two
    tagged = "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>\n" for n, a in two)
    assert calls(tagged) == two


def test_prose_before_the_call_is_kept_as_the_content() -> None:
    found = recover_tool_calls(
        'I will look it up.\n<tool_call>{"name": "memory_get", "arguments": {"citation": "h#1"}}</tool_call>',
        OFFERED,
    )
    assert found is not None and found.text == "I will look it up."


def test_a_reply_opening_with_a_call_is_a_call_and_the_imagined_result_is_dropped() -> None:
    # Seen with Qwen2.5-Coder-1.5B behind llama.cpp: the call, then a made-up tool result.
    text = (
        '```json\n{\n  "name": "memory_get",\n  "arguments": {\n    "citation": "session/cli:direct#108",'
        '\n    "around": 5\n  }\n}\n```\nThe citation `session/cli:direct#108` points to the conversation '
        "message in which you are working. The summary of this session includes:\n"
        + "- Your current location (on the server)\n- What you asked about earlier\n" * 3
    )
    found = recover_tool_calls(text, OFFERED)
    assert found is not None
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [
        ("memory_get", {"citation": "session/cli:direct#108", "around": 5})
    ]
    assert found.text == ""


def test_an_explanation_before_an_example_call_stays_text_however_it_ends() -> None:
    text = (
        "To read a file you would write:\n"
        '```json\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n```\n'
        + "This is how you would call the tool. " * 10
    )
    assert recover_tool_calls(text, OFFERED) is None


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"name": "Alice", "age": 30}\n```',  # JSON data, not a call
        '{"name": "Luna", "species": "cat"}',  # data with a name, no arguments
        '{"name": "Luna"}',
        '```python\nprint("hello")\n```',
        '{"name": "read_file", "arguments": {"path": "a"}, "comment": "x"}',  # unknown keys
        "Your cat is called Luna.",
        "",
        "Here is an example of the format:\n" + "The agent explains the tool at length. " * 15
        + '\n```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```',
    ],
)
def test_ambiguous_text_stays_text(text: str) -> None:
    assert recover_tool_calls(text, OFFERED) is None


def test_a_fence_inside_an_argument_does_not_close_the_call() -> None:
    # The local model quoted a recalled reply, its code fence included, as the citation.
    text = '```json\n{"name": "memory_get", "arguments": {"citation": "add: ```plaintext code = 4417```"}}\n```'
    assert calls(text) == [("memory_get", {"citation": "add: ```plaintext code = 4417```"})]


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        # Qwen2.5-Coder-1.5B asked for the locker code: a stray backtick after the argument
        (
            '```json\n{\n  "name": "memory_get",\n  "arguments": {\n    "citation": "code = 4417``"`\n  }\n}\n```',
            '{\n    "citation": "code = 4417``"`\n  }',
        ),
        ('{"name": "read_file", "arguments": {"path": "a"', '{"path": "a"'),  # cut off
        ('<tool_call>{"name": "read_file", "arguments": {"path": "a";}}</tool_call>', '{"path": "a";}'),
    ],
)
def test_a_call_whose_json_is_broken_is_still_a_call_never_shown(text: str, arguments: str) -> None:
    found = recover_tool_calls(text, OFFERED)
    assert found is not None and found.text == ""
    (call,) = found.calls
    assert call.arguments == arguments  # as written: the registry says where it breaks


def test_broken_json_that_is_no_call_to_an_offered_tool_stays_text() -> None:
    assert recover_tool_calls('{"name": "Luna", "arguments": {"age": 3', OFFERED) is None
    assert recover_tool_calls('{"name": "Luna", "species": "cat', OFFERED) is None


def test_a_result_the_model_imagined_after_its_call_is_not_shown() -> None:
    # Qwen2.5-Coder-1.5B asked about the garden: a memory_get call, then the "result" it
    # expected as a fenced JSON block, all in one reply.
    text = (
        '{"name": "memory_get", "arguments": "{\\"citation\\": \\"history#3\\"}"}\n'
        '```json\n{"citation": "history#3", "text": "User grows tomatoes"}\n```'
    )
    found = recover_tool_calls(text, OFFERED)
    assert found is not None
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [("memory_get", {"citation": "history#3"})]
    assert found.text == ""
    fenced = '```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```\n```json\n{"x": 1}\n```'
    assert calls(fenced) == [("read_file", {"path": "a"})]


@given(st.text(alphabet=st.characters(blacklist_characters="{[<`~"), max_size=300))
def test_prose_without_any_block_is_never_a_call(text: str) -> None:
    assert recover_tool_calls(text, OFFERED) is None


@given(
    name=st.sampled_from(sorted(OFFERED)),
    args=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=30) | st.integers(), max_size=4),
    form=st.sampled_from(["bare", "fenced", "tagged"]),
)
def test_any_offered_call_round_trips(name: str, args: dict, form: str) -> None:
    body = json.dumps({"name": name, "arguments": args})
    text = {"bare": body, "fenced": f"```json\n{body}\n```", "tagged": f"<tool_call>{body}</tool_call>"}[form]
    assert calls(text) == [(name, args)]


def test_auto_mode_is_on_for_local_endpoints_only() -> None:
    assert text_tools_enabled("auto", provider="ollama", api_base=None)
    assert text_tools_enabled("auto", provider="custom", api_base="http://127.0.0.1:8081/v1")
    assert text_tools_enabled("auto", provider="openai", api_base="http://localhost:1234/v1")
    assert not text_tools_enabled("auto", provider="openai", api_base="https://api.openai.com/v1")
    assert not text_tools_enabled("auto", provider="anthropic", api_base=None)
    assert text_tools_enabled("on", provider="openrouter", api_base="https://openrouter.ai/api/v1")
    assert not text_tools_enabled("off", provider="ollama", api_base=None)


# --- the stream -----------------------------------------------------------------------------


def request(tools: bool = True) -> ChatRequest:
    return ChatRequest(
        model="m", messages=[{"role": "user", "content": "what is my cat called?"}], tools=TOOLS if tools else []
    )


async def run(reply: str, *, tools: bool = True) -> tuple[list[str], list]:
    model = ScriptedModel()
    model.reply(reply)
    shown: list[str] = []
    events: list = []

    def on_event(ev) -> None:
        events.append(ev)
        if isinstance(ev, TextDelta):
            shown.append(ev.text)

    resp = await collect(TextToolCallProvider(ScriptedProvider(model)).stream(request(tools)), on_event)
    return shown, [resp, events]


async def test_a_written_call_is_never_streamed_to_the_user() -> None:
    shown, (resp, events) = await run('```json\n{"name": "memory_get", "arguments": {"citation": "h#2"}}\n```')
    assert "".join(shown) == ""
    assert resp.text == ""
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in resp.tool_calls] == [
        ("memory_get", {"citation": "h#2"})
    ]
    assert resp.finish_reason == "tool_calls"
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolCallEvent") < kinds.index("Usage") < kinds.index("Finish")


async def test_a_streamed_call_followed_by_an_imagined_result_runs_and_shows_nothing() -> None:
    reply = (
        '```json\n{"name": "memory_get", "arguments": {"citation": "session/cli:direct#108"}}\n```\n'
        + "The citation points to the message in which you are working. " * 8
    )
    shown, (resp, _) = await run(reply)
    assert "".join(shown) == "" and resp.text == ""
    assert [c["function"]["name"] for c in resp.tool_calls] == ["memory_get"]


async def test_empty_tool_markup_is_never_shown() -> None:
    # Qwen2.5-Coder-1.5B behind llama.cpp answered a question with exactly this.
    shown, (resp, _) = await run("<tools>\n\n</tools>\n")
    assert "".join(shown) == "" and resp.text == "" and not resp.tool_calls
    shown, (resp, _) = await run("The answer is 4.\n<tool_call>\n</tool_call>")
    assert resp.text.strip() == "The answer is 4."


async def test_plain_answers_stream_and_rejected_blocks_come_out_whole() -> None:
    shown, (resp, _) = await run("Your cat is called Luna.\nShe is three.")
    assert "".join(shown) == resp.text == "Your cat is called Luna.\nShe is three."
    code = 'Like this:\n```python\nprint("hi")\n```\nDone.'
    shown, (resp, _) = await run(code)
    assert "".join(shown) == resp.text == code and not resp.tool_calls


async def test_requests_without_tools_pass_through_untouched() -> None:
    text = '{"name": "read_file", "arguments": {"path": "USER.md"}}'
    _, (resp, _) = await run(text, tools=False)
    assert resp.text == text and not resp.tool_calls


async def test_structured_calls_pass_through_and_held_text_is_released() -> None:
    model = ScriptedModel()
    model.reply_tool_call("read_file", {"path": "USER.md"}, text="{not json")
    resp = await collect(TextToolCallProvider(ScriptedProvider(model)).stream(request()))
    assert resp.text == "{not json"
    assert [c["function"]["name"] for c in resp.tool_calls] == ["read_file"]


async def test_over_http_with_the_real_sdk(scripted_server, scripted_model) -> None:
    scripted_model.reply('<tool_call>\n{"name": "read_file", "arguments": {"path": "USER.md"}}\n</tool_call>')
    provider = TextToolCallProvider(OpenAICompatProvider(api_key="k", api_base=scripted_server.base_url))
    events = [ev async for ev in provider.stream(request())]
    assert not any(isinstance(e, TextDelta) for e in events)
    (call,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert (call.name, json.loads(call.arguments)) == ("read_file", {"path": "USER.md"})
    assert events[-1] == Finish("tool_calls")


async def test_tool_call_messages_are_sent_with_empty_content_not_null(scripted_server, scripted_model) -> None:
    scripted_model.reply("done")
    provider = OpenAICompatProvider(api_key="k", api_base=scripted_server.base_url)
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "text"},
    ]
    await collect(provider.stream(ChatRequest(model="m", messages=messages, tools=TOOLS)))
    sent = scripted_model.requests[-1].raw["messages"][1]
    assert sent["content"] == "" and sent["tool_calls"][0]["id"] == "c1"
    assert messages[1]["content"] is None  # the caller's (stored) message is not changed
