"""The fork server the CLI tests run ``hippobot`` from: a forked command must behave as a
freshly started one (same output, exit status, environment, folder and input)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from hippobot.testing.cli import run_cli
from hippobot.testing.forkserver import ForkServer, start_shared
from hippobot.testing.process import process_running


@pytest.mark.parametrize("args", [["--help"], ["no-such-command"], ["memory", "show"], ["status"]])
def test_a_forked_command_answers_as_a_fresh_interpreter_does(hippobot_home: Path, args: list[str]):
    assert run_cli(["onboard"], hippobot_home).returncode == 0
    forked = run_cli(args, hippobot_home)
    fresh = run_cli(args, hippobot_home, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_child_gets_its_own_environment_folder_and_input(tmp_path: Path):
    target = tmp_path / "child.py"
    target.write_text(
        "import os, sys\n"
        "def main(args):\n"
        "    print(os.environ.get('ONLY'), os.environ.get('HOME'), os.getcwd(), sys.stdin.read())\n"
        "    print('to stderr', file=sys.stderr)\n"
        "    return args['code']\n",
        encoding="utf-8",
    )
    (tmp_path / "in").write_text("typed input", encoding="utf-8")
    forks = ForkServer()
    try:
        pid = forks.spawn(f"{target}:main", {"code": 3}, env={"ONLY": "this"}, cwd=str(tmp_path),
                          stdin=str(tmp_path / "in"), stdout=str(tmp_path / "out"),
                          stderr=str(tmp_path / "err"))
        status = forks.wait(pid, timeout=30)
    finally:
        forks.close()
    assert status.returncode == 3
    assert (tmp_path / "out").read_text() == f"this None {tmp_path} typed input\n"
    assert (tmp_path / "err").read_text() == "to stderr\n"


def test_a_child_still_running_at_the_timeout_can_be_killed_and_reports_the_signal(tmp_path: Path):
    target = tmp_path / "sleeper.py"
    target.write_text("import time\ndef main(args):\n    time.sleep(60)\n", encoding="utf-8")
    forks = ForkServer()
    try:
        pid = forks.spawn(f"{target}:main")
        with pytest.raises(TimeoutError):
            forks.wait(pid, timeout=0.5)
        forks.kill(pid, signal.SIGKILL)
        status = forks.wait(pid, timeout=30)
    finally:
        forks.close()
    assert status.signal == signal.SIGKILL and status.returncode == -signal.SIGKILL


def test_processes_sharing_one_server_each_get_their_own_children(tmp_path: Path):
    target = tmp_path / "child.py"
    target.write_text("import time\ndef main(args):\n    time.sleep(args['sleep'])\n    return args['code']\n",
                      encoding="utf-8")
    path = str(tmp_path / "socket")
    server = start_shared(path)
    first, second = ForkServer.connect(path), ForkServer.connect(path)
    try:
        sleeper = first.spawn(f"{target}:main", {"sleep": 60, "code": 0})
        quick = second.spawn(f"{target}:main", {"sleep": 0, "code": 4})
        assert second.wait(quick, timeout=30).returncode == 4
        second.kill(sleeper)  # not second's child: ignored
        with pytest.raises(TimeoutError):
            first.wait(sleeper, timeout=0.5)
        first.close()  # a client that leaves takes its children with it
        deadline = time.monotonic() + 30
        while process_running(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_running(sleeper)
        assert second.wait(second.spawn(f"{target}:main", {"sleep": 0, "code": 0}), timeout=30).returncode == 0
    finally:
        first.close()
        second.close()
        assert server.stdin is not None
        server.stdin.close()  # the starter closing stdin stops the server
        assert server.wait(30) == 0
    assert not Path(path).exists()


def test_a_client_may_connect_before_the_shared_server_is_ready(tmp_path: Path):
    path = str(tmp_path / "socket")
    server = start_shared(path, "hippobot.testing.forkserver:preload_cli")
    try:
        forks = ForkServer.connect(path)  # the preload takes seconds; this waits for it
        try:
            pid = forks.spawn("hippobot.testing.forkserver:cli_main", {"argv": ["--version"]},
                              stdout=str(tmp_path / "out"))
            assert forks.wait(pid, timeout=60).returncode == 0
        finally:
            forks.close()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(30)
    assert (tmp_path / "out").read_text().startswith("hippobot")
