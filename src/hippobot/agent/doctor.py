"""``hippobot doctor``: will this setup work? One line per check, each failure with its fix.

The checks, in order (each a :class:`Check`: ``ok``, ``warn``, ``fail`` or ``skip``):

==============  ==========================================================================
``config``      config.json parses; the workspace (and a nanobot one read in); key warnings
``endpoint``    a model is configured and its endpoint answers ``GET /models``
``model``       the configured model is among those the endpoint lists
``window``      ``contextWindowTokens`` fits the server's context, where the server says it:
                llama.cpp ``/props`` (or ``/slots``) ``n_ctx``, ``n_ctx`` in a model's
                ``meta`` (llama-cpp-python), vLLM's ``max_model_len``, Ollama's ``num_ctx``
                (``POST /api/show``); and the fixed prompt leaves room for a conversation
``tool calls``  one request offering one tool: called as ``tool_calls``, written as text
                (then whether hippobot turns it into a call), or not called
``speed``       prompt and generation tokens per second from one small streamed request
``sandbox``     bubblewrap can sandbox ``exec`` here
``embeddings``  the configured embedder loads and answers (when one is configured)
``versions``    the memory repository opens and every commit, tree and file of its history
                is present and readable (dulwich)
``disk``        free space where the workspace lives
==============  ==========================================================================

Metadata requests use httpx directly with a short timeout; the two model requests go
through the project's provider (:class:`hippobot.providers.model.ModelClient`, one attempt,
tool calls not recovered so the probe sees what the model did), each bounded by
``probe_timeout``. A timeout says what was waited for. Nothing here writes a file.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx

from hippobot.config.loader import NANOBOT_NOTE
from hippobot.errors import ConfigError, HippobotError, ProviderError, UserError
from hippobot.lazy_regex import lazy_compile
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.config import ModelTarget, Settings

__all__ = ["Check", "DoctorReport", "run_doctor"]

Status = Literal["ok", "warn", "fail", "skip"]
_MARK: dict[Status, str] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}

HTTP_TIMEOUT = 5.0
"""Seconds for each metadata request (model list, server properties)."""
PROBE_TIMEOUT = 60.0
"""Seconds for each of the two model requests (a slow local model needs some)."""
FREE_FAIL = 100 * 2**20
FREE_WARN = 1 * 2**30
Entries = list[dict[str, Any]] | None  # the model list's ``data``, None when there is none
_HISTORY_COMMITS = 2000  # the fsck walks this much history at most
_LOCAL = lazy_compile(r"^https?://(localhost|127\.\d+\.\d+\.\d+|\[::1\]|0\.0\.0\.0)(:\d+)?(/|$)")

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
_FILLER = (
    "hippobot keeps its memory in plain files: a session file per conversation, an archive "
    "of summaries in memory/history.jsonl, and three Markdown files that Dream keeps up to "
    "date, each change a git commit the user can inspect and undo. "
) * 6


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        text = f"{_MARK[self.status]}  {self.name:<11} {self.detail}"
        return f"{text}; fix: {self.fix}" if self.fix else text


@dataclass(slots=True)
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when something would fail (warnings do not count)."""
        return not any(c.status == "fail" for c in self.checks)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [{**asdict(c), "data": dict(c.data)} for c in self.checks]}

    def to_text(self) -> str:
        return "\n".join(c.line() for c in self.checks)


# --- the run ---------------------------------------------------------------------------


async def run_doctor(
    settings: Settings | None,
    *,
    config_error: str | None = None,
    probe_timeout: float = PROBE_TIMEOUT,
    http_timeout: float = HTTP_TIMEOUT,
    on_check: Callable[[Check], None] | None = None,
) -> DoctorReport:
    """Run every check; ``settings`` is None when the config did not load (``config_error``
    says why): the checks that need it are skipped. ``on_check`` sees each result as soon
    as it is known (the model requests can take a while)."""
    report = DoctorReport()

    def add(check: Check) -> Check:
        report.checks.append(check)
        if on_check is not None:
            on_check(check)
        return check

    if settings is None:
        add(Check("config", "fail", config_error or "the configuration did not load",
                  "correct that line, or move the file aside and run `hippobot onboard`"))
        for name in ("endpoint", "model", "window", "tool calls", "speed"):
            add(Check(name, "skip", "needs a configuration that loads"))
        add(await _sandbox("auto", None))
        return report
    add(_config(settings))
    await _model_checks(settings, add, probe_timeout=probe_timeout, http_timeout=http_timeout)
    add(await _sandbox(settings.config.tools.exec.sandbox, settings))
    add(await asyncio.to_thread(_embeddings, settings))
    add(await asyncio.to_thread(_versions, settings.workspace))
    add(_disk(settings.workspace))
    return report


def _config(settings: Settings) -> Check:
    where = (
        f"{settings.config_path} parses" if settings.config_path.exists()
        else f"no {settings.config_path} (defaults and environment only)"
    )
    workspace = f"workspace {settings.workspace}"
    if settings.nanobot_workspace is not None:
        workspace += f" (nanobot's {settings.nanobot_workspace} read in, never written)"
    data = {"path": str(settings.config_path), "workspace": str(settings.workspace),
            "warnings": list(settings.warnings)}
    problems = [w for w in settings.warnings if NANOBOT_NOTE not in w]
    if len(problems) < len(settings.warnings):
        workspace += "; nanobot-only settings ignored"
    if problems:
        first = problems[0].split(": ", 1)[-1]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check("config", "warn", f"{where}; {workspace}; {first}{more}",
                     "correct the key, or remove it", data)
    return Check("config", "ok", f"{where}; {workspace}", data=data)


# --- the endpoint and the model ----------------------------------------------------------


def _base_url(target: ModelTarget) -> str:
    if target.api_base:
        return target.api_base.rstrip("/")
    return "https://api.anthropic.com" if target.kind == "anthropic" else "https://api.openai.com/v1"


def _root(base: str) -> str:
    """The server's root, for the metadata paths outside the OpenAI API (``/props``...)."""
    return re.sub(r"/v1$", "", base)


def _headers(target: ModelTarget) -> dict[str, str]:
    headers = dict(target.extra_headers)
    if target.kind == "anthropic":
        headers.update({"x-api-key": target.api_key, "anthropic-version": "2023-06-01"})
    else:
        headers["Authorization"] = f"Bearer {target.api_key}"
    return headers


def _split_fix(message: str) -> tuple[str, str]:
    """A one-line error ("what happened: set X ...") as (what happened, the fix)."""
    match = re.search(r"[:;] (set |add |pass |use )", message)
    if match is None:
        return message, ""
    return message[: match.start()], message[match.start() + 2 :]


def _waited(what: str, seconds: float) -> str:
    return f"no answer within {seconds:g} s (waited for {what})"


async def _model_checks(
    settings: Settings, add: Callable[[Check], Check], *, probe_timeout: float, http_timeout: float
) -> None:
    names = ("endpoint", "model", "window", "tool calls", "speed")
    try:
        target = settings.model_target()
    except UserError as exc:
        detail, fix = _split_fix(str(exc))
        add(Check("endpoint", "fail", detail, fix))
        for name in names[1:]:
            add(Check(name, "skip", "needs a configured model"))
        return
    base = _base_url(target)
    models_url = f"{_root(base)}/v1/models" if target.kind == "anthropic" else f"{base}/models"
    async with httpx.AsyncClient(timeout=http_timeout, headers=_headers(target)) as http:
        listing, entries = await _endpoint(http, models_url, target, http_timeout)
        if add(listing).status == "fail":
            for name in names[1:]:
                add(Check(name, "skip", "the endpoint did not answer"))
            return
        add(_listed(target, entries))
        prompt = await asyncio.to_thread(_prompt_facts, settings)
        add(await _window(http, settings, target, base, entries, http_timeout, prompt))
    tools = add(await _tool_probe(settings, target, probe_timeout))
    if tools.data.get("timed_out"):
        add(Check("speed", "skip", "the tool-call probe got no answer in time"))
    else:
        add(await _speed_probe(target, probe_timeout, prompt.fixed_tokens))


async def _endpoint(
    http: httpx.AsyncClient, url: str, target: ModelTarget, timeout: float
) -> tuple[Check, Entries]:
    fix_base = f"start the server, or correct providers.{target.provider}.apiBase (or HIPPOBOT_API_BASE)"
    started = time.perf_counter()
    try:
        response = await http.get(url)
    except httpx.TimeoutException:
        return Check("endpoint", "fail", _waited(f"the model list, GET {url}", timeout),
                     "is the server up and not stuck? " + fix_base), None
    except httpx.HTTPError as exc:
        reason = "connection refused" if isinstance(exc, httpx.ConnectError) else type(exc).__name__
        return Check("endpoint", "fail", f"cannot reach {url} ({reason})", fix_base), None
    ms = (time.perf_counter() - started) * 1000
    shown = f"{_base_url(target)} answers (GET {httpx.URL(url).path}: {response.status_code} in {ms:.0f} ms)"
    if response.status_code in (401, 403):
        return Check("endpoint", "fail", f"{url} refused the API key (HTTP {response.status_code})",
                     f"check HIPPOBOT_API_KEY or providers.{target.provider}.apiKey"), None
    if response.status_code >= 500:
        return Check("endpoint", "fail", f"{url} answered HTTP {response.status_code}",
                     "the server is failing; look at its log"), None
    entries: Entries = None
    if response.status_code == 200:
        try:
            data = response.json().get("data")
            entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else None
        except (ValueError, AttributeError):
            entries = None
    data = {"url": url, "status": response.status_code, "ms": round(ms)}
    return Check("endpoint", "ok", shown, data=data), entries


def _listed(target: ModelTarget, entries: Entries) -> Check:
    if entries is None:
        return Check("model", "skip", "the endpoint has no model list to check the name against")
    ids = [str(e.get("id", "")) for e in entries]
    wanted = target.model
    if wanted in ids or f"{wanted}:latest" in ids or any(i.endswith(f"/{wanted}") for i in ids):
        return Check("model", "ok", f"{wanted} is listed", data={"models": ids[:50]})
    some = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return Check("model", "fail", f"{wanted} is not among the {len(ids)} model(s) the endpoint serves ({some or 'none'})",
                 "set agents.defaults.model (or HIPPOBOT_MODEL) to one of them", {"models": ids[:50]})


async def _server_context(
    http: httpx.AsyncClient, target: ModelTarget, base: str, entries: Entries
) -> tuple[int | None, str, bool]:
    """(tokens, where it was read, whether it is a default the server may not report)."""
    entry = next((e for e in entries or [] if e.get("id") == target.model), None)
    if entry is not None:
        if isinstance(entry.get("max_model_len"), int):
            return entry["max_model_len"], "vLLM max_model_len", False
        meta = entry.get("meta")
        if isinstance(meta, dict) and isinstance(meta.get("n_ctx"), int):
            return meta["n_ctx"], "n_ctx in the model list", False
    if not (_LOCAL.match(base) or target.provider in ("llamacpp", "ollama", "vllm")):
        return None, "", False
    root = _root(base)
    for path in ("/props", "/slots"):
        try:
            response = await http.get(root + path)
            if response.status_code != 200:
                continue
            data = response.json()
        except (httpx.HTTPError, ValueError):
            continue
        if isinstance(data, list):
            data = data[0] if data and isinstance(data[0], dict) else {}
        if not isinstance(data, dict):
            continue
        settings = data.get("default_generation_settings")
        n_ctx = data.get("n_ctx", settings.get("n_ctx") if isinstance(settings, dict) else None)
        if isinstance(n_ctx, int) and n_ctx > 0:
            return n_ctx, f"llama.cpp {path} n_ctx", False
    if target.provider == "ollama" or root.endswith(":11434"):
        return await _ollama_context(http, root, target.model)
    return None, "", False


async def _ollama_context(http: httpx.AsyncClient, root: str, model: str) -> tuple[int | None, str, bool]:
    try:
        response = await http.post(f"{root}/api/show", json={"model": model, "name": model})
        data = response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return None, "", False
    params = str(data.get("parameters") or "")
    match = re.search(r"^\s*num_ctx\s+(\d+)", params, re.MULTILINE)
    if match:
        return int(match.group(1)), "Ollama num_ctx", False
    info = data.get("model_info") or {}
    longest = next((v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)), None)
    note = f"Ollama's default num_ctx (the model supports {longest:,})" if longest else "Ollama's default num_ctx"
    return 2048, note, True


async def _window(
    http: httpx.AsyncClient, settings: Settings, target: ModelTarget, base: str,
    entries: Entries, timeout: float, prompt: _Prompt,
) -> Check:
    window = settings.defaults.context_window_tokens
    if prompt.problem is not None:
        detail, fix = _split_fix(prompt.problem)
        return Check("window", "fail", detail, fix)
    try:
        n_ctx, source, default = await _server_context(http, target, base, entries)
    except httpx.TimeoutException:
        return Check("window", "skip", _waited("the server's properties", timeout))
    data = {"configured": window, "server": n_ctx, "source": source}
    if not window:
        return Check("window", "warn", "contextWindowTokens is 0: token budgeting is off, old turns are never archived",
                     "set agents.defaults.contextWindowTokens to the model's window", data)
    if n_ctx is None:
        return Check("window", "skip",
                     f"the server does not say its context (no /props, /slots or max_model_len); "
                     f"contextWindowTokens is {window:,}: start the server with at least that "
                     "(llama.cpp --ctx-size, llama-cpp-python --n_ctx)", data=data)
    if default:
        if window <= n_ctx:
            return Check("window", "ok", f"contextWindowTokens {window:,} fits {source} ({n_ctx:,} at least)", data=data)
        return Check("window", "warn",
                     f"contextWindowTokens is {window:,}, but the server may run the model with {source}, "
                     f"{n_ctx:,} to 4,096 tokens by version, and cut longer prompts silently",
                     f"give the model PARAMETER num_ctx {window} in a Modelfile (or OLLAMA_CONTEXT_LENGTH="
                     f"{window} for the server), or set contextWindowTokens to {n_ctx}", data)
    if window > n_ctx:
        return Check("window", "fail",
                     f"contextWindowTokens is {window:,} but the server's context is {n_ctx:,} ({source}): "
                     "longer prompts will be refused or cut",
                     f"set agents.defaults.contextWindowTokens to {n_ctx} (or start the server with a "
                     f"context of {window})", data)
    room = f"; the server has room for {n_ctx:,}" if n_ctx >= 2 * window else ""
    return Check("window", "ok", f"contextWindowTokens {window:,} fits the server's {n_ctx:,} ({source}){room}", data=data)


@dataclass(frozen=True, slots=True)
class _Prompt:
    """What hippobot's own prompt asks of the window, as ``hippobot context`` counts it."""

    fixed_tokens: int  # identity, tool contract, skills list, tool schemas
    problem: str | None  # the one-line error a turn would stop with, when they do not fit


def _prompt_facts(settings: Settings) -> _Prompt:
    from hippobot.agent.agent import Agent
    from hippobot.agent.api import Api

    agent = Agent(settings, read_only=True)  # reads never write
    problem = None
    try:
        agent.check_window(agent.sessions.get("cli:direct"))
    except ConfigError as exc:
        prefix = f"{settings.config_path}: "
        problem = str(exc).removeprefix(prefix)
    report = Api.for_agent(agent).context("cli:direct")
    fixed = report.budget.fixed if report.budget is not None else report.system_tokens + report.tool_schema_tokens
    return _Prompt(int(fixed), problem)


# --- the model requests -----------------------------------------------------------------


def _client(target: ModelTarget) -> Any:
    """The project's model client on this endpoint: one attempt, tool calls as sent."""
    from hippobot.providers.model import ModelClient
    from hippobot.providers.retry import RetryPolicy

    client = ModelClient(lambda: target, max_tokens=256, temperature=0.0, text_tool_calls="off")
    client.retry = RetryPolicy(max_attempts=1)
    return client


async def _tool_probe(settings: Settings, target: ModelTarget, timeout: float) -> Check:
    from hippobot.providers.base import ChatRequest, collect
    from hippobot.providers.text_tools import recover_tool_calls, text_tools_enabled

    client = _client(target)
    request = ChatRequest(
        model=target.model,
        messages=[
            {"role": "system", "content": f"Tool check {secrets.token_hex(4)}. Call a tool when one fits."},
            {"role": "user", "content": "What is the weather in Paris right now? Use the tool."},
        ],
        tools=[_PROBE_TOOL], max_tokens=128, temperature=0.0,
    )
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            response = await collect(client.provider.stream(request))
    except TimeoutError:
        return Check("tool calls", "warn", _waited("the reply to a request offering one tool", timeout),
                     "the server is busy or slow; run `hippobot doctor` again, or use a smaller model",
                     {"timed_out": True})
    except ProviderError as exc:
        return Check("tool calls", "fail", f"the probe request failed: {exc}")
    finally:
        await client.aclose()
    seconds = time.perf_counter() - started
    data: dict[str, Any] = {"seconds": round(seconds, 2)}
    if any(c["function"]["name"] == "get_weather" for c in response.tool_calls):
        return Check("tool calls", "ok", f"structured tool_calls ({seconds:.1f} s)", data={**data, "mode": "structured"})
    recovered = recover_tool_calls(response.text, {"get_weather"})
    if recovered is not None and recovered.calls:
        mode = settings.defaults.text_tool_calls
        api = target.provider if target.kind == "openai" else target.kind
        if text_tools_enabled(mode, provider=api, api_base=target.api_base):
            return Check("tool calls", "ok",
                         f"written as text, not as tool_calls; hippobot turns them into calls "
                         f"(textToolCalls: {mode}) ({seconds:.1f} s)", data={**data, "mode": "text"})
        return Check("tool calls", "fail",
                     f"the model writes tool calls as text and textToolCalls is {mode}: its tool calls would "
                     "show as text and never run", "set agents.defaults.textToolCalls to \"on\"",
                     {**data, "mode": "text"})
    said = " ".join(response.text.split())[:80]
    return Check("tool calls", "warn",
                 f"the model answered without calling the offered tool ({said!r}); memory edits and "
                 "file tools may not work with it", "a model that supports tool calls works better",
                 {**data, "mode": "none"})


async def _speed_probe(target: ModelTarget, timeout: float, fixed: int) -> Check:
    from hippobot.context import tokens
    from hippobot.providers.base import ChatRequest, StreamEvent, TextDelta, collect

    client = _client(target)
    messages = [
        # a fresh first line, so no prompt cache makes the prompt look faster than it is
        {"role": "system", "content": f"Speed check {secrets.token_hex(4)}.\n\n{_FILLER}"},
        {"role": "user", "content": "Count from 1 to 40: only the numbers, separated by spaces."},
    ]
    request = ChatRequest(model=target.model, messages=messages, max_tokens=64, temperature=0.0)
    first: list[float] = []

    def seen(event: StreamEvent) -> None:
        if isinstance(event, TextDelta) and event.text and not first:
            first.append(time.perf_counter())

    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            response = await collect(client.provider.stream(request), seen)
    except TimeoutError:
        return Check("speed", "warn", _waited("the reply to a 64-token request", timeout),
                     "the server is busy or very slow; a chat turn would wait as long")
    except ProviderError as exc:
        return Check("speed", "fail", f"the speed request failed: {exc}")
    finally:
        await client.aclose()
    ended = time.perf_counter()
    usage = response.usage
    prompt = usage.prompt_tokens if usage and usage.prompt_tokens else tokens.count_messages(messages)
    completion = usage.completion_tokens if usage and usage.completion_tokens else tokens.count_text(response.text)
    ttft = (first[0] if first else ended) - started
    generating = ended - (first[0] if first else started)
    prompt_rate = prompt / ttft if ttft > 0 else 0.0
    gen_rate = (completion - 1) / generating if completion > 1 and generating > 0 else 0.0
    data = {"prompt_tokens": prompt, "completion_tokens": completion, "first_token_s": round(ttft, 2),
            "prompt_tokens_per_s": round(prompt_rate, 1), "generation_tokens_per_s": round(gen_rate, 1),
            "fixed_prompt_tokens": fixed}
    rates = f"prompt {prompt_rate:,.0f} tokens/s ({prompt} in {ttft:.1f} s), generation {gen_rate:,.0f} tokens/s"
    if prompt_rate > 0:
        data["fixed_prompt_s"] = round(fixed / prompt_rate, 1)
        rates += f"; hippobot's fixed prompt ({fixed:,} tokens) takes ~{fixed / prompt_rate:.0f} s to read when the server's cache misses"
    return Check("speed", "ok", rates, data=data)


# --- the machine --------------------------------------------------------------------------


async def _sandbox(mode: str, settings: Settings | None) -> Check:
    from hippobot.tools.sandbox import Sandbox, SandboxMode

    env: Mapping[str, str] = settings.env if settings is not None else {}
    if mode == "none":
        return Check("sandbox", "warn", "off (tools.exec.sandbox is \"none\"): exec commands run as you, "
                     "with access to everything your user can reach", "set tools.exec.sandbox to \"auto\"")
    try:
        works = await Sandbox(cast(SandboxMode, mode)).available(dict(env) or {"PATH": "/usr/bin:/bin"})
    except (OSError, HippobotError, ValueError):
        works = False
    if works:
        return Check("sandbox", "ok", "bubblewrap works: exec commands run sandboxed")
    path = (env.get("PATH") if env else None) or "/usr/bin:/bin"
    if shutil.which("bwrap", path=path) is None and shutil.which("bwrap", path="/usr/bin:/bin") is None:
        why, fix = "bubblewrap is not installed", "apt-get install bubblewrap (or your system's package)"
    else:
        why = "bubblewrap is installed but cannot create a sandbox here"
        fix = ("allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; Ubuntu 24.04: "
               "kernel.apparmor_restrict_unprivileged_userns=0)")
    if mode == "bwrap":
        return Check("sandbox", "fail", f"{why}, and tools.exec.sandbox is \"bwrap\": exec will refuse every command", fix)
    return Check("sandbox", "warn", f"{why}: exec commands run unsandboxed, as you", fix)


def _embeddings(settings: Settings) -> Check:
    from hippobot.recall.embedders import embedder_from_settings

    conf = settings.config.recall.embeddings
    if not conf.provider or conf.provider.strip() == "off":
        return Check("embeddings", "skip", "not configured: memory search works by words")
    started = time.perf_counter()
    try:
        embedder = embedder_from_settings(settings)
        if embedder is None:
            return Check("embeddings", "skip", "not configured: memory search works by words")
        vector = embedder.embed_query("doctor probe")
    except (HippobotError, OSError, ImportError) as exc:
        fix = "pip install 'hippobot[embeddings]'" if "install" in str(exc) else "see recall.embeddings in the README"
        return Check("embeddings", "fail", str(exc).split("; install", 1)[0], fix)
    dims = int(getattr(vector, "shape", [len(vector)])[-1])
    seconds = time.perf_counter() - started
    return Check("embeddings", "ok", f"{embedder.name} answers ({dims} dimensions, {seconds:.1f} s)",
                 data={"name": embedder.name, "dimensions": dims})


def _versions(workspace: Path) -> Check:
    from hippobot.memory.gitstore import GitStore

    git = GitStore(workspace)
    if not git.initialized:
        return Check("versions", "ok", "not started yet (the first Dream or memory edit creates the history)")
    broken = git.broken_reason
    if broken is not None:
        return Check("versions", "fail", broken.split("; move it aside")[0],
                     f"move {Workspace(workspace).git_dir} aside: hippobot starts a new history")
    try:
        commits, objects = _fsck(workspace)
    except Exception as exc:  # any unreadable object is the finding, whatever dulwich raised
        return Check("versions", "fail", f"the memory history is damaged: {type(exc).__name__}: {exc}",
                     f"move {Workspace(workspace).git_dir} aside (hippobot starts a new history), or repair it with git fsck")
    return Check("versions", "ok", f"memory history healthy: {commits} commit(s), {objects} objects read",
                 data={"commits": commits, "objects": objects})


def _fsck(workspace: Path) -> tuple[int, int]:
    """Read every commit (up to :data:`_HISTORY_COMMITS`), tree and blob reachable from HEAD;
    raises on the first one missing or damaged."""
    from dulwich.objects import Blob, Commit, Tree
    from dulwich.repo import Repo

    with Repo(str(workspace)) as repo:
        try:
            head = repo.head()
        except KeyError:
            return 0, 0
        seen: set[bytes] = set()
        pending, commits = [head], 0
        while pending and commits < _HISTORY_COMMITS:
            sha = pending.pop()
            if sha in seen:
                continue
            seen.add(sha)
            commit = repo[sha]
            if not isinstance(commit, Commit):
                raise ValueError(f"{sha.decode()[:8]} is not a commit")
            commits += 1
            trees = [commit.tree]
            while trees:
                tree_id = trees.pop()
                if tree_id in seen:
                    continue
                seen.add(tree_id)
                tree = repo[tree_id]
                if not isinstance(tree, Tree):
                    raise ValueError(f"{tree_id.decode()[:8]} is not a tree")
                for entry in tree.iteritems():
                    if entry.mode & 0o040000:
                        trees.append(entry.sha)
                    elif entry.sha not in seen:
                        seen.add(entry.sha)
                        blob = repo[entry.sha]
                        if not isinstance(blob, Blob):
                            raise ValueError(f"{entry.path.decode(errors='replace')} is not a file object")
                        blob.check()
            pending.extend(commit.parents)
        return commits, len(seen) - commits


def _disk(workspace: Path) -> Check:
    where = workspace
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return Check("disk", "warn", f"cannot measure free space at {where} ({exc})")
    shown = f"{free / 2**30:,.1f} GB free at {where}" if free >= 2**30 else f"{free / 2**20:,.0f} MB free at {where}"
    data = {"free_bytes": free, "path": str(where)}
    if free < FREE_FAIL:
        return Check("disk", "fail", shown + ": sessions and memory writes will fail", "free some space", data)
    if free < FREE_WARN:
        return Check("disk", "warn", shown, "free some space before long conversations", data)
    return Check("disk", "ok", shown, data=data)
