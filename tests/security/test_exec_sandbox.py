"""``exec`` cannot read the API key, touch hippobot's state or outlive its timeout.

The sandboxed cases need bubblewrap (the CI script installs it); the fallback cases run
everywhere, using a stand-in ``bwrap`` that cannot create a sandbox.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from hippobot.tools import ToolRegistry, exec_tool
from hippobot.tools import sandbox as sandbox_mod
from hippobot.tools.sandbox import Sandbox

from .conftest import API_KEY, KEY, tool_results

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (apt-get install bubblewrap)"
)

KEY_HUNT = [
    "tr '\\0' '\\n' < /proc/$PPID/environ",
    "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a KEY",
    "cat ../config.json",
    "cat $HIPPOBOT_HOME/config.json; ls -la ..",
    "grep -ra sk-attack / --include=*.json 2>/dev/null | head",
    "ps -eo pid,args",
    "echo '[filter \"x\"]' >> .git/config; echo pwn > .hippobot/p.sh; echo done-writing",
    "echo made > inside.txt && cat inside.txt",
]


@needs_bwrap
async def test_sandboxed_exec_never_sees_the_key_or_hippobot(make_agent, scripted_model):
    agent = make_agent(exec={"sandbox": "bwrap"})
    ws = agent.workspace
    git_config = (ws / ".git" / "config").read_bytes()
    scripted_model.reply_tool_calls([("exec", {"command": c}) for c in KEY_HUNT])
    scripted_model.reply("Found nothing.")
    assert (await agent.turn(KEY, "find the api key")).reply == "Found nothing."
    results = tool_results(agent)
    assert len(results) == len(KEY_HUNT)
    for command, text in zip(KEY_HUNT, results, strict=True):
        assert API_KEY not in text, f"{command!r} leaked the key: {text[:300]}"
    processes = results[5]
    # Only the sandbox's own processes: bwrap, the shell, ps; never hippobot's Python.
    assert "python" not in processes and len(processes.splitlines()) <= 6, processes
    assert "Read-only file system" in results[6]
    assert (ws / ".git" / "config").read_bytes() == git_config
    assert not (ws / ".hippobot" / "p.sh").exists()
    assert results[7].startswith("made") and (ws / "inside.txt").read_text() == "made\n"
    sent = json.dumps([r.messages for r in scripted_model.requests])
    assert API_KEY not in sent


@needs_bwrap
async def test_sandboxed_exec_cannot_write_outside_the_workspace(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    registry = ToolRegistry(
        [exec_tool(cwd=ws, sandbox=Sandbox("bwrap", writable=[ws]), env={"PATH": "/usr/bin:/bin"})]
    )
    result = await registry.execute(
        "exec", {"command": f"echo x > {outside}/planted; rm -rf {outside}; touch ok; ls"}
    )
    assert "ok" in result.text
    assert outside.is_dir() and not (outside / "planted").exists()


def _running(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    args = fh.read().split(b"\0")
                with open(f"/proc/{entry.name}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in args and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def _gone(marker: str) -> bool:
    for _ in range(100):  # the kill is sent; the kernel may take a moment to finish it
        if not _running(marker):
            return True
        time.sleep(0.05)
    return False


ESCAPES = [
    # A new session (not in the command's process group), still a child of the shell.
    "setsid sleep {n} & sleep 30",
    # Orphaned: its parent subshell already exited, so it is nobody's descendant.
    "(setsid sleep {n} &); sleep 30",
    "(nohup setsid sleep {n} > /dev/null 2>&1 &); sleep 30",
    # The same with the environment cleared, so no tag can find them: only the tree can.
    "env -i setsid sleep {n} & sleep 30",
    "(env -i setsid sleep {n} &); sleep 30",
    "(env -i sh -c '(setsid sleep {n} &)' &); sleep 30",  # a daemon's double fork
]


@pytest.mark.parametrize("mode", ["none", pytest.param("bwrap", marks=needs_bwrap)])
@pytest.mark.parametrize("template", ESCAPES)
async def test_no_process_outlives_the_timeout(tmp_path, mode, template):
    n = f"{os.getpid() % 1000}.{abs(hash((mode, template))) % 10**6}"
    registry = ToolRegistry(
        [exec_tool(cwd=tmp_path, timeout=1, sandbox=Sandbox(mode, writable=[tmp_path]))]
    )
    try:
        result = await registry.execute("exec", {"command": template.format(n=n)})
        assert result.is_error and "timed out after 1 s" in result.text
        assert _gone(n), f"a process started by {template!r} survived the timeout"
    finally:
        for pid in _running(n):
            os.kill(pid, 9)


@pytest.fixture
def broken_bwrap(tmp_path, monkeypatch) -> str:
    """A ``bwrap`` that fails like one on a system without user namespaces."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox_mod, "_probed", {})
    monkeypatch.setattr(sandbox_mod, "_warned", set())
    return str(fake)


async def test_without_a_working_sandbox_auto_runs_plainly_and_warns_once(
    tmp_path, broken_bwrap, caplog
):
    box = Sandbox("auto", writable=[tmp_path], bwrap=broken_bwrap)
    registry = ToolRegistry([exec_tool(cwd=tmp_path, sandbox=box)])
    with caplog.at_level(logging.WARNING, logger="hippobot.tools.sandbox"):
        first = await registry.execute("exec", {"command": "echo one"})
        second = await registry.execute("exec", {"command": "echo two"})
    assert first.text == "one\n[exit code 0]" and second.text == "two\n[exit code 0]"
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT a sandbox" in r.getMessage()]
    assert len(warnings) == 1
    assert "No permissions to create new namespace" in warnings[0]
    assert "config.json" in warnings[0]


async def test_sandbox_required_but_broken_refuses_to_run(tmp_path, broken_bwrap):
    box = Sandbox("bwrap", writable=[tmp_path], bwrap=broken_bwrap)
    registry = ToolRegistry([exec_tool(cwd=tmp_path, sandbox=box)])
    result = await registry.execute("exec", {"command": "touch ran"})
    assert result.is_error and 'tools.exec.sandbox = "bwrap"' in result.text
    assert not (tmp_path / "ran").exists()


def test_the_sandbox_setting_is_validated(tmp_path):
    from hippobot.config import load_settings

    (tmp_path / "config.json").write_text('{"tools": {"exec": {"sandbox": "docker"}}}')
    with pytest.raises(Exception) as err:
        load_settings({"HIPPOBOT_HOME": str(tmp_path)})
    assert "sandbox" in str(err.value)




def _escape_attempts(home, ws, outside) -> list[str]:
    """What a command running as root in the sandbox would try, to get out of it."""
    return [
        "grep CapEff /proc/self/status",
        f"umount -l {home} ; cat {home}/config.json",
        f"umount -l {ws}/.git ; echo '[filter \"x\"]' >> {ws}/.git/config ; echo tried",
        f"mount -o remount,rw / ; touch {outside}/pwned ; echo tried",
        f"mount --bind / /tmp ; cat /tmp{home}/config.json ; echo tried",
        f"unshare -rm sh -c 'umount -l {home}; cat {home}/config.json' ; echo tried",
    ]


@needs_bwrap
async def test_the_sandbox_drops_every_capability_even_as_root(make_agent, scripted_model, tmp_path):
    agent = make_agent(exec={"sandbox": "bwrap"})
    ws, home = agent.workspace, agent.settings.home
    outside = tmp_path / "outside"
    outside.mkdir()
    git_config = (ws / ".git" / "config").read_bytes()
    attempts = _escape_attempts(home, ws, outside)
    scripted_model.reply_tool_calls([("exec", {"command": c}) for c in attempts])
    scripted_model.reply("Stayed inside.")
    await agent.turn(KEY, "get out")
    results = tool_results(agent)
    assert "CapEff:\t0000000000000000" in results[0], results[0]
    for command, text in zip(attempts, results, strict=True):
        assert API_KEY not in text, f"{command!r} leaked the key: {text[:300]}"
    assert (ws / ".git" / "config").read_bytes() == git_config
    assert not (outside / "pwned").exists()


@needs_bwrap
def test_the_sandbox_drops_every_capability_as_a_normal_user(tmp_path):
    """The same, with bubblewrap started by an unprivileged user (nobody, uid 65534)."""
    import asyncio
    import subprocess
    import tempfile

    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the sandbox as another, unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="hippobot-nobody-", dir="/tmp"))
    try:
        base.chmod(0o755)
        home, outside = base / "home", base / "outside"
        ws = home / "workspace"
        for folder in (home, ws, ws / ".git", outside):
            folder.mkdir(parents=True)
        ws.chmod(0o777)
        (home / "config.json").write_text(json.dumps({"providers": {"custom": {"apiKey": API_KEY}}}))
        box = Sandbox("bwrap", writable=[ws], hidden=[home])
        env = {"PATH": "/usr/bin:/bin"}
        prefix = asyncio.run(box.prefix(ws, env))
        nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        works = subprocess.run([*nobody, *prefix, "true"], env=env, capture_output=True, cwd=ws)
        if works.returncode != 0:
            pytest.skip(f"bubblewrap does not work for an unprivileged user here: {works.stderr!r}")
        results = [
            subprocess.run([*nobody, *prefix, "sh", "-c", c], env=env, capture_output=True,
                           text=True, cwd=ws, timeout=30).stdout
            for c in _escape_attempts(home, ws, outside)
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert "CapEff:\t0000000000000000" in results[0], results[0]
    assert not any(API_KEY in text for text in results), results
