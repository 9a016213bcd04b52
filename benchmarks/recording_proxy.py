"""A small recording HTTP proxy for an OpenAI-compatible endpoint (used by the nanobot evaluation).

It listens on 127.0.0.1 (a free port), relays every request to the upstream server (streamed
answers chunk by chunk) and records each model request under the stage and case the harness
is in: the messages sent, the reply, tool calls, and the token usage the server reported
(a chars/4 estimate, ``reported`` False, where it reported none). A request the upstream
refuses, times out, answers with an HTTP error or with a body that is not JSON is recorded as
failed with no tokens, and the client gets a 502 (or the upstream's error).
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hippobot.messages import content_text
from hippobot.usage_ledger import UsageRecord

__all__ = ["ProxyRecord", "RecordingProxy"]


@dataclass(slots=True)
class ProxyRecord:
    """One request nanobot made, as the proxy saw it."""

    stage: str
    case: str
    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    reply: str = ""
    tool_calls: int = 0
    status: int = 0
    error: str = ""
    prompt_tokens: int = 0  # as reported, else a chars/4 estimate (reported False)
    cached_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = False

    @property
    def ok(self) -> bool:
        return 0 < self.status < 400 and not self.error

    @property
    def usage(self) -> UsageRecord:
        return UsageRecord(job=self.stage, provider="nanobot", model=self.model, ok=self.ok,
                           prompt_tokens=self.prompt_tokens, cached_tokens=self.cached_tokens,
                           completion_tokens=self.completion_tokens, reported=self.reported)


def _estimate(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(b"")

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

    def _forward(self, body: bytes) -> None:
        proxy = self.server.owner
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        record = proxy.start_record(request if isinstance(request, dict) else {})
        up = proxy.upstream
        conn_type = http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        conn = conn_type(up.hostname or "127.0.0.1", up.port, timeout=proxy.timeout)
        skip = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            record.status = resp.status
            if "text/event-stream" in (resp.getheader("content-type") or ""):
                self._relay_stream(resp, record)
            else:
                data = resp.read()
                self._reply(resp.status, resp.getheader("content-type") or "application/json", data)
                if resp.status >= 400:
                    record.error = f"HTTP {resp.status}: {data[:200].decode(errors='replace')}"
                elif self.path.endswith("/chat/completions"):
                    _fold_json(record, data)
        except (OSError, http.client.HTTPException) as exc:
            record.status, record.error = 502, f"{type(exc).__name__}: {exc}"[:300]
            try:
                self._reply(502, "application/json", json.dumps({"error": {"message": record.error}}).encode())
            except OSError:
                pass
        finally:
            conn.close()
            if self.command == "POST":  # model requests; a GET (e.g. /models) is relayed only
                proxy.finish_record(record)

    def _reply(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _relay_stream(self, resp: http.client.HTTPResponse, record: ProxyRecord) -> None:
        self.send_response(resp.status)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        text: list[str] = []
        calls: set[int] = set()
        chunks = 0
        while line := resp.readline():
            self.wfile.write(line)
            self.wfile.flush()
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            try:
                chunk = json.loads(line[5:])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text.append(delta.get("content") or "")
                    calls.update(c.get("index", 0) for c in delta.get("tool_calls") or ())
                if chunk.get("usage"):
                    _fold_usage(record, chunk["usage"])
                chunks += 1
            except (ValueError, TypeError, AttributeError):  # not an OpenAI chunk: relay it, count nothing
                continue
        record.reply, record.tool_calls = "".join(text), len(calls)
        if not chunks and resp.status < 400:
            record.error = "malformed stream: no chat chunk"


def _fold_json(record: ProxyRecord, data: bytes) -> None:
    try:
        body = json.loads(data)
        message = body["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        record.error = f"malformed answer: {data[:80]!r}"
        return
    record.reply = content_text(message.get("content"))
    record.tool_calls = len(message.get("tool_calls") or ())
    if body.get("usage"):
        _fold_usage(record, body["usage"])


def _fold_usage(record: ProxyRecord, usage: dict[str, Any]) -> None:
    details = usage.get("prompt_tokens_details") or {}
    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    record.completion_tokens = int(usage.get("completion_tokens") or 0)
    record.cached_tokens = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    record.reported = True


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: RecordingProxy) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.owner = owner


class RecordingProxy:
    """An HTTP proxy on 127.0.0.1 (a free port) in front of ``upstream`` that records every
    chat request under the stage and case the harness is in."""

    def __init__(self, upstream: str, *, timeout: float, log: Path | None = None) -> None:
        self.upstream = urlsplit(upstream.rstrip("/"))
        self.timeout = timeout
        self.stage, self.case = "turns", ""
        self.records: list[ProxyRecord] = []
        self._log = log
        self._lock = threading.Lock()
        self._server = _ProxyServer(self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.upstream.path}"

    def start_record(self, request: dict[str, Any]) -> ProxyRecord:
        messages = request.get("messages")
        messages = messages if isinstance(messages, list) else []
        estimate = _estimate(json.dumps([messages, request.get("tools") or []], ensure_ascii=False))
        return ProxyRecord(self.stage, self.case, str(request.get("model") or ""), messages, prompt_tokens=estimate)

    def finish_record(self, record: ProxyRecord) -> None:
        if not record.ok:  # nothing was processed, or nothing reported: count no tokens
            record.prompt_tokens = record.cached_tokens = record.completion_tokens = 0
        elif not record.reported:
            record.completion_tokens = _estimate(record.reply)
        with self._lock:
            self.records.append(record)
            if self._log is not None:
                with self._log.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")

    def snapshot(self) -> list[ProxyRecord]:
        """Every request recorded so far."""
        with self._lock:
            return list(self.records)

    def of_case(self, case: str) -> list[ProxyRecord]:
        with self._lock:
            return [r for r in self.records if r.case == case]

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
