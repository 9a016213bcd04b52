"""Serve a :class:`~hippobot.testing.scripted.ScriptedModel` over HTTP on 127.0.0.1.

The real OpenAI and Anthropic SDKs talk to it exactly as they would to the vendors: the
OpenAI chat-completions API under ``/v1`` (``base_url``) and the Anthropic messages API
(``anthropic_base_url``; the SDK appends ``/v1/messages``). Streams are sent with chunked
transfer encoding, so a scripted cut is a socket closed before the final chunk, which the
client sees as an incomplete body, as with a real dropped connection. A slow reply
(``delay``, ``keepalive``, ``pause``) is slow on the wire: silence, or the headers and SSE
comments while the scripted model "reads the prompt".
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hippobot.testing.scripted import (
    Plan,
    RecordedRequest,
    ScriptedCall,
    ScriptedModel,
    _Cut,
    _Fail,
    _Hang,
    _Malformed,
    _Reply,
    anthropic_error_body,
    default_fail_message,
    openai_error_body,
    split_text,
)

__all__ = ["ScriptedServer", "anthropic_to_openai"]

_MALFORMED = b'{"id": "scripted", "choices": [ this is not JSON'
_PAUSE = "\x00pause"  # a frame that is not sent: the stream goes silent there (reply.pause)


def malformed_tool_calls(messages: object) -> str | None:
    """Why an OpenAI request's ``tool_calls`` would be refused by a real endpoint, or None."""
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for j, call in enumerate(calls if isinstance(calls, list) else []):
            function = call.get("function") if isinstance(call, dict) else None
            if not (isinstance(function, dict) and isinstance(call.get("id"), str)
                    and isinstance(function.get("name"), str)):
                return f"Invalid value for 'messages[{i}].tool_calls[{j}]': not a tool call"
    return None


# --- the reply as a sequence of pieces, shared by both wire formats ------------------


@dataclass(frozen=True, slots=True)
class _Piece:
    kind: str  # "text" | "tool_start" | "args" | "tool_end"
    text: str = ""
    index: int = 0  # tool call index
    call: ScriptedCall | None = None


def _pieces(reply: _Reply, budget: int | None) -> tuple[list[_Piece], bool]:
    """The reply split into stream pieces; with a character ``budget``, cut when it runs
    out. Returns (pieces, complete)."""
    out: list[_Piece] = []
    left = budget
    pause_in = reply.pause[0] if reply.pause else None  # characters before the pause

    def take(kind: str, text: str, index: int = 0) -> bool:
        nonlocal left, pause_in
        if pause_in is not None and len(text) >= pause_in:
            head, text, pause_in = text[:pause_in], text[pause_in:], None
            if head and not take(kind, head, index):
                return False
            out.append(_Piece("pause"))
            if not text:
                return True
        elif pause_in is not None:
            pause_in -= len(text)
        if left is not None and len(text) > left:
            if left:
                out.append(_Piece(kind, text[:left], index))
            left = 0
            return False
        out.append(_Piece(kind, text, index))
        if left is not None:
            left -= len(text)
        return True

    for piece in split_text(reply.text):
        if not take("text", piece):
            return out, False
    for i, call in enumerate(reply.tool_calls):
        out.append(_Piece("tool_start", index=i, call=call))
        for frag in split_text(call.arguments, 3):
            if not take("args", frag, i):
                return out, False
        out.append(_Piece("tool_end", index=i))
    if left is not None:  # a cut longer than the reply still drops the connection
        return out, False
    return out, True


def _json_args(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_raw_arguments": arguments}


# --- OpenAI chat completions ---------------------------------------------------------


def _openai_usage(plan: Plan) -> dict[str, Any]:
    u = plan.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def _openai_message(plan: Plan, model: str) -> dict[str, Any]:
    reply = plan.reply
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish(),
                "logprobs": None,
            }
        ],
        "usage": _openai_usage(plan),
    }


def _openai_chunks(plan: Plan, model: str, *, budget: int | None, usage: bool) -> Iterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    pieces, complete = _pieces(plan.reply, budget)
    for p in pieces:
        if p.kind == "pause":
            yield _PAUSE
        elif p.kind == "text":
            yield chunk({"content": p.text})
        elif p.kind == "tool_start" and p.call is not None:
            start = {
                "index": p.index,
                "id": p.call.id,
                "type": "function",
                "function": {"name": p.call.name, "arguments": ""},
            }
            yield chunk({"tool_calls": [start]})
        elif p.kind == "args":
            yield chunk({"tool_calls": [{"index": p.index, "function": {"arguments": p.text}}]})
    if not complete:
        return
    yield chunk({}, plan.reply.finish())
    if usage:
        body = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": _openai_usage(plan),
        }
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"


# --- Anthropic messages --------------------------------------------------------------


def _anthropic_usage(plan: Plan) -> dict[str, int]:
    u = plan.usage
    return {
        "input_tokens": max(0, u.prompt_tokens - u.cached_tokens),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _anthropic_message(plan: Plan, model: str) -> dict[str, Any]:
    reply = plan.reply
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for c in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _json_args(c.arguments)}
        )
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP.get(reply.finish(), "end_turn"),
        "stop_sequence": None,
        "usage": _anthropic_usage(plan),
    }


_ANTHROPIC_STOP = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


def _anthropic_events(plan: Plan, model: str, *, budget: int | None) -> Iterator[str]:
    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

    start = _anthropic_message(plan, model) | {"content": [], "stop_reason": None}
    start["usage"] = _anthropic_usage(plan) | {"output_tokens": 1}
    yield event("message_start", {"message": start})
    pieces, complete = _pieces(plan.reply, budget)
    text_open = False
    offset = 1 if plan.reply.text else 0  # tool blocks come after the text block
    for p in pieces:
        if p.kind == "pause":
            yield _PAUSE
            continue
        if p.kind == "text":
            if not text_open:
                yield event(
                    "content_block_start",
                    {"index": 0, "content_block": {"type": "text", "text": ""}},
                )
                text_open = True
            yield event(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p.text}}
            )
            continue
        if text_open:
            yield event("content_block_stop", {"index": 0})
            text_open = False
        index = p.index + offset
        if p.kind == "tool_start" and p.call is not None:
            block = {"type": "tool_use", "id": p.call.id, "name": p.call.name, "input": {}}
            yield event("content_block_start", {"index": index, "content_block": block})
        elif p.kind == "args":
            delta = {"type": "input_json_delta", "partial_json": p.text}
            yield event("content_block_delta", {"index": index, "delta": delta})
        elif p.kind == "tool_end":
            yield event("content_block_stop", {"index": index})
    if not complete:
        return
    if text_open:
        yield event("content_block_stop", {"index": 0})
    stop = _ANTHROPIC_STOP.get(plan.reply.finish(), "end_turn")
    usage = {"output_tokens": plan.usage.completion_tokens}
    yield event(
        "message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}
    )
    yield event("message_stop", {})


def _anthropic_blocks_to_openai(role: str, content: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            src = block.get("source", {})
            url = src.get("url") or f"data:{src.get('media_type')};base64,{src.get('data')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "tool_use":
            args = json.dumps(block.get("input", {}), ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": args},
                }
            )
        elif kind == "tool_result":
            result = block.get("content", "")
            if isinstance(result, list):
                result = "\n".join(b.get("text", "") for b in result if b.get("type") == "text")
            out.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": result}
            )
    if role == "assistant":
        text = "\n".join(p["text"] for p in parts if p["type"] == "text")
        msg: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    elif parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": role, "content": parts[0]["text"] if only_text else parts})
    return out


def anthropic_to_openai(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """(messages, tools, tool_choice) of an Anthropic request, in OpenAI shape, best effort."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, list):
        system = "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    if system:
        messages.append({"role": "system", "content": system})
    for msg in body.get("messages", []):
        content = msg.get("content")
        if isinstance(content, str):
            messages.append({"role": msg.get("role"), "content": content})
        elif isinstance(content, list):
            messages.extend(_anthropic_blocks_to_openai(msg.get("role", "user"), content))
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema", {}),
            },
        }
        for t in body.get("tools", [])
    ]
    choice = body.get("tool_choice")
    return messages, tools, choice.get("type") if isinstance(choice, dict) else choice


# --- HTTP ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections do not outlive a test run by much
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and
        # delayed ACKs add ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, add=False)

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        scripted = self.server.model
        if path in ("/v1/models", "/models"):
            entry: dict[str, Any] = {
                "id": scripted.model_name, "object": "model", "created": 0, "owned_by": "hippobot",
            }
            if scripted.server_kind == "vllm" and scripted.server_context is not None:
                entry["max_model_len"] = scripted.server_context
            self._json(200, {"object": "list", "data": [entry]})
        elif scripted.server_kind == "llama.cpp" and path in ("/props", "/slots"):
            settings = {"n_ctx": scripted.server_context, "model": scripted.model_name}
            if path == "/props":
                self._json(200, {"default_generation_settings": settings, "total_slots": 1})
            else:
                self._json(200, [{"id": 0, **settings, "is_processing": False}])
        else:
            self._json(404, openai_error_body(404, f"no such path {self.path}"))

    def _ollama_show(self) -> None:
        scripted = self.server.model
        info: dict[str, Any] = {"general.architecture": "qwen2"}
        if scripted.model_max_context is not None:
            info["qwen2.context_length"] = scripted.model_max_context
        params = f"num_ctx {scripted.server_context}\n" if scripted.server_context else ""
        self._json(200, {"parameters": params + "temperature 0.7", "model_info": info})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw_bytes = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        api = "anthropic" if path.endswith("/messages") else "openai"
        if path == "/api/show" and self.server.model.server_kind == "ollama":
            self._ollama_show()
            return
        if path.endswith("/embeddings"):
            self._embeddings(raw_bytes)
            return
        if not path.endswith(("/chat/completions", "/messages")):
            self._json(404, openai_error_body(404, f"no such path {self.path}"))
            return
        try:
            body = json.loads(raw_bytes or b"{}")
        except ValueError:
            self._json(400, openai_error_body(400, "request body is not JSON"))
            return
        problem = malformed_tool_calls(body.get("messages")) if api == "openai" else None
        if problem:  # what a real endpoint answers, instead of a model reply
            self._json(400, openai_error_body(400, problem))
            return
        model = self.server.model
        model.arrive()  # waits for a free slot when the model has few
        try:
            plan = model.take(self._record(api, body))
            self._answer(api, plan, body)
        finally:
            model.leave()

    def _embeddings(self, raw: bytes) -> None:
        model = self.server.model
        if model.embedding is None:
            self._json(404, openai_error_body(404, "this scripted model has no embeddings"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, openai_error_body(400, "request body is not JSON"))
            return
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        if model.embedding_delay:
            time.sleep(model.embedding_delay)
        with model._lock:
            model.embedding_inputs.extend(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": model.embedding(str(t))}
            for i, t in enumerate(texts)
        ]
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model", "")),
                "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
            },
        )

    def _record(self, api: str, body: dict[str, Any]) -> RecordedRequest:
        if api == "anthropic":
            messages, tools, choice = anthropic_to_openai(body)
        else:
            messages, tools, choice = (
                body.get("messages", []),
                body.get("tools", []),
                body.get("tool_choice"),
            )
        return RecordedRequest(
            messages=messages,
            tools=tools,
            model=str(body.get("model", "")),
            tool_choice=choice,
            stream=bool(body.get("stream")),
            api="anthropic" if api == "anthropic" else "openai",
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=body,
        )

    def _answer(self, api: str, plan: Plan, body: dict[str, Any]) -> None:
        step = plan.step
        error_body = anthropic_error_body if api == "anthropic" else openai_error_body
        if step is None:
            self._json(500, error_body(500, plan.error))
        elif isinstance(step, _Hang):
            if not self.server.stopping.wait(step.seconds):
                self._json(504, error_body(504, f"scripted hang of {step.seconds:g}s elapsed"))
        elif isinstance(step, _Fail):
            payload = step.body or error_body(step.status, default_fail_message(step.status))
            self._json(step.status, payload, plan.fail_headers())
        elif isinstance(step, _Malformed):
            if body.get("stream"):
                event = "event: message_start\n" if api == "anthropic" else ""
                self._send(
                    200, "text/event-stream", f"{event}data: ".encode() + _MALFORMED + b"\n\n"
                )
            else:
                self._send(200, "application/json", _MALFORMED)
        else:
            budget = step.after_chars if isinstance(step, _Cut) else None
            if body.get("stream"):
                self._stream(api, plan, body, budget)
            else:
                self._whole(api, plan, body, budget)

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server stops first (then False)."""
        return not self.server.stopping.wait(seconds) if seconds > 0 else True

    def _whole(self, api: str, plan: Plan, body: dict[str, Any], budget: int | None) -> None:
        if not self._wait(plan.reply.delay + (plan.reply.pause[1] if plan.reply.pause else 0.0)):
            return
        model = str(body.get("model", ""))
        payload = (
            _anthropic_message(plan, model) if api == "anthropic" else _openai_message(plan, model)
        )
        data = json.dumps(payload).encode()
        if budget is None:
            self._send(200, "application/json", data)
            return
        # Promise the whole body, deliver part of it, hang up.
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: max(1, min(budget, len(data) - 1))])
        self.close_connection = True

    def _stream(self, api: str, plan: Plan, body: dict[str, Any], budget: int | None) -> None:
        model = str(body.get("model", ""))
        if api == "anthropic":
            frames = _anthropic_events(plan, model, budget=budget)
        else:
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            frames = _openai_chunks(plan, model, budget=budget, usage=include)
        reply = plan.reply
        try:
            if reply.keepalive is None and not self._wait(reply.delay):
                return  # reading the prompt in silence (llama.cpp's server, Ollama)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if reply.keepalive is not None:  # headers first, then pings (llama-cpp-python)
                self.wfile.flush()
                end = time.monotonic() + reply.delay
                while (left := end - time.monotonic()) > 0:
                    if not self._wait(min(reply.keepalive, left)):
                        return
                    if end - time.monotonic() > 0:
                        self._chunk(": ping\n\n")
            for frame in frames:
                if frame == _PAUSE:
                    self.wfile.flush()
                    if not self._wait(reply.pause[1] if reply.pause else 0.0):
                        return
                    continue
                self._chunk(frame)
            if budget is not None:
                self.close_connection = True  # no terminating chunk: the body is incomplete
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up (a timeout test): nothing left to tell it
            self.close_connection = True

    def _chunk(self, frame: str) -> None:
        data = frame.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, "application/json", json.dumps(payload).encode(), headers)

    def _send(
        self, status: int, ctype: str, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout test): nothing left to tell it
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, model: ScriptedModel, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.model = model
        self.stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._wake_read, self._wake_write = socket.socketpair()

    def serve_until_stopped(self) -> None:
        """``serve_forever`` without its polling: :meth:`stop_serving` wakes the loop at once
        (stopping a polling loop costs a test its poll interval, every time)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self.stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self and not self.stopping.is_set():
                        self.handle_request()  # readable: accepts without waiting

    def stop_serving(self) -> None:
        self.stopping.set()  # also wakes any scripted hang
        self._wake_write.send(b"x")

    def server_close(self) -> None:
        super().server_close()
        self._wake_read.close()
        self._wake_write.close()

    def track(self, conn: socket.socket, *, add: bool) -> None:
        with self._conns_lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def drop_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ScriptedServer:
    """Serves ``model`` on ``127.0.0.1:<free port>`` (or ``port``) from a daemon thread.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. Stopping wakes any
    scripted hang and closes open keep-alive connections, so it returns promptly.
    """

    def __init__(self, model: ScriptedModel, port: int = 0) -> None:
        self.model = model
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedServer is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """Base URL for the OpenAI SDK (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for the Anthropic SDK (it appends ``/v1/messages`` itself)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedServer:
        if self._server is None:
            self._server = _Server(self.model, self._port)
            self._thread = threading.Thread(
                target=self._server.serve_until_stopped, name="scripted-model-server", daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._server = self._thread = None
        server.stop_serving()
        if thread is not None:
            thread.join(timeout=5)
        server.drop_connections()
        server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
