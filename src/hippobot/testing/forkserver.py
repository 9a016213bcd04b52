"""A fork server for tests that run many short child processes.

Starting a Python interpreter and importing hippobot, its SDKs and the tokenizer costs most of
a second of CPU; a test suite that runs the real CLI several hundred times spends most of its
time there, not in what it tests. The fork server imports everything once and then forks a
child per request: the child is a separate process with its own environment, working
folder, standard streams, exit status and signals, started in milliseconds.

What a child does not repeat is only interpreter start-up and imports. Tests that are about
start-up itself (``benchmarks/coldstart.py``, ``hippobot serve`` processes) start real
interpreters instead.

The server never starts a thread or an event loop, so a fork is a clean copy. Protocol, one
JSON object per line (test → server on stdin, server → test on stdout):

* at start: ``{"ready": true}`` once the preload function has run;
* ``{"cmd": "spawn", "id": N, "target": "module:function" or "path.py:function",
  "args": {...}, "env": {...}, "cwd": "...", "stdin"/"stdout"/"stderr": paths}``
  → ``{"id": N, "pid": 123}``; the child calls ``function(args)`` and exits with the int it
  returns;
* when a child ends: ``{"pid": 123, "code": 0 | null, "signal": 9 | null}``;
* ``{"cmd": "kill", "pid": 123, "signal": 9}``: signal a child (ignored once it ended);
* end of input: the server kills what is still running and exits.

Started with ``--listen PATH`` (:func:`start_shared`), the server also takes clients on a
Unix socket, each speaking the same protocol and hearing only of its own children, so the
workers of one test run share one warmed-up server; a client that leaves takes its
children with it, and the server ends when its stdin closes.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["ChildStatus", "ForkServer", "cli_main", "preload_cli", "start_shared"]


@dataclass(frozen=True)
class ChildStatus:
    """How a forked child ended: ``code`` when it exited, ``signal`` when it was killed."""

    pid: int
    code: int | None
    signal: int | None

    @property
    def returncode(self) -> int:
        """As :attr:`subprocess.Popen.returncode`: negative for a signal."""
        return -self.signal if self.signal is not None else int(self.code or 0)


# --- child targets -------------------------------------------------------------------


def preload_cli() -> None:
    """Import and warm up what ``hippobot`` commands use, so a forked command starts warm.

    Imports alone are not enough: the first turn of a process loads the tokenizer table and
    a dozen SDK modules lazily. So the server runs a few commands once, in-process, on a
    throwaway home against a scripted model, and waits until every thread they started has
    ended (a fork copies only the calling thread).
    """
    import io
    import shutil
    import tempfile
    import time

    from hippobot.testing.scripted import ScriptedModel
    from hippobot.testing.server import ScriptedServer

    home = Path(tempfile.mkdtemp(prefix="hippobot-warmup-"))
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    model = ScriptedModel()
    model.fallback = lambda request: "ok"
    try:
        with ScriptedServer(model) as server:
            os.environ.update(HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model",
                              HIPPOBOT_API_BASE=server.base_url, HIPPOBOT_API_KEY="sk-warm-up")
            commands = [["onboard"], ["agent", "-m", "hello"], ["status"], ["context"],
                        ["memory", "show"], ["memory", "history"], ["memory", "search", "hello"],
                        ["sessions", "list"], ["memory", "log"]]
            for argv in commands:
                with contextlib.redirect_stdout(io.StringIO()), \
                        contextlib.redirect_stderr(io.StringIO()):
                    cli_main({"argv": argv})
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        shutil.rmtree(home, ignore_errors=True)
        # Each command configures logging on first use; undo it, so a child configures it
        # again towards its own stderr, as a fresh process would.
        root = logging.getLogger()
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    for _ in range(200):  # the server's handler threads end once their sockets close
        if threading.active_count() == 1:
            return
        time.sleep(0.05)


def cli_main(args: dict[str, Any]) -> int:
    """Run ``python -m hippobot ARGV`` inside the forked child."""
    import runpy

    sys.argv = ["hippobot", *args["argv"]]
    try:
        # Exactly what ``python -m hippobot`` runs; the modules are already imported, and
        # the command parser is built afresh in the child, as in every process.
        runpy.run_module("hippobot", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # sys.exit("message") prints it, as the interpreter does
    return 1


# --- the server ----------------------------------------------------------------------


def _resolve(target: str) -> Callable[..., Any]:
    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        module_name = "_forked_" + Path(where).stem
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, where)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the requested process, never return."""
    code = 70
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for fd, key, flags in ((0, "stdin", os.O_RDONLY),
                               (1, "stdout", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                               (2, "stderr", os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
            opened = os.open(request.get(key) or os.devnull, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        # Fresh stream objects: the server's may hold a lock taken by no thread of ours.
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                          buffering=1, closefd=False)
        if request.get("env") is not None:
            os.environ.clear()
            os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
        code = int(_resolve(request["target"])(request.get("args") or {}) or 0)
    except BaseException:  # as the interpreter: print the traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # What interpreter shutdown does: wait for non-daemon threads, run exit handlers.
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


class _Peer:
    """One client of the server: where its requests come from and its answers go."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffered = b""

    def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # a client that went away hears nothing
            os.write(self.write_fd, (json.dumps(message) + "\n").encode())


def serve(preload: str | None, listen: str | None = None) -> None:
    """The server's main loop (``python -m hippobot.testing.forkserver [--listen PATH] [PRELOAD]``).

    Requests come on stdin, answers go to stdout. With ``listen``, clients may also connect to
    a Unix socket at that path (bound before the preload, so a client may connect at once and
    is answered once the server is ready); the server ends when its stdin closes.
    """
    listener = None
    if listen:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(listen)
        listener.listen(64)
    if preload:
        _resolve(preload)()
    if threading.active_count() != 1:
        raise RuntimeError(f"threads left after preloading: {threading.enumerate()}")
    control = _Peer(sys.stdin.fileno(), sys.stdout.fileno())
    peers = {control.read_fd: control}
    selector = selectors.DefaultSelector()
    selector.register(control.read_fd, selectors.EVENT_READ)
    if listener is not None:
        selector.register(listener.fileno(), selectors.EVENT_READ)
    control.send({"ready": True})
    owners: dict[int, _Peer] = {}  # child pid -> the client that asked for it

    def forget(peer: _Peer) -> None:
        """A client left: its children go too, as a test's children end with the test."""
        selector.unregister(peer.read_fd)
        del peers[peer.read_fd]
        os.close(peer.read_fd)
        for pid, owner in list(owners.items()):
            if owner is peer:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def handle(peer: _Peer, request: dict[str, Any]) -> None:
        if request["cmd"] == "spawn":
            pid = os.fork()
            if pid == 0:
                selector.close()
                if listener is not None:
                    listener.close()
                for other in peers.values():
                    if other is not control:
                        os.close(other.read_fd)
                _child(request)
            owners[pid] = peer
            peer.send({"id": request["id"], "pid": pid})
        elif request["cmd"] == "kill" and owners.get(request["pid"]) is peer:
            with contextlib.suppress(ProcessLookupError):
                os.kill(request["pid"], request.get("signal", signal.SIGKILL))

    try:
        while True:
            for key, _ in selector.select(timeout=0.005 if owners else None):
                if listener is not None and key.fd == listener.fileno():
                    conn, _ = listener.accept()
                    fd = conn.detach()  # one fd for both directions
                    peers[fd] = _Peer(fd, fd)
                    selector.register(fd, selectors.EVENT_READ)
                    peers[fd].send({"ready": True})
                    continue
                peer = peers[key.fd]
                chunk = os.read(peer.read_fd, 65536)
                if not chunk:
                    if peer is control:
                        return
                    forget(peer)
                    continue
                peer.buffered += chunk
                *lines, peer.buffered = peer.buffered.split(b"\n")
                for line in lines:
                    handle(peer, json.loads(line))
            while owners:  # one call when nothing ended, however many children run
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                owner = owners.pop(pid, None)
                # (a file descriptor number is reused: a client that left has no successor)
                if owner is not None and peers.get(owner.read_fd) is owner:
                    killed = os.WIFSIGNALED(status)
                    owner.send({"pid": pid, "code": None if killed else os.WEXITSTATUS(status),
                                "signal": os.WTERMSIG(status) if killed else None})
    finally:
        for pid in owners:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        if listen:
            with contextlib.suppress(OSError):
                os.unlink(listen)


# --- the client ----------------------------------------------------------------------


class ForkServer:
    """A fork server to spawn children from; thread-safe, so a test may run children
    concurrently.

    ``ForkServer(preload)`` starts a server of its own (closed by :meth:`close`);
    :meth:`connect` joins one that another process started with :func:`start_shared`, so
    several test processes share one warmed-up server.
    """

    def __init__(self, preload: str | None = None, *, env: dict[str, str] | None = None) -> None:
        args = [sys.executable, "-m", "hippobot.testing.forkserver"]
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            args + ([preload] if preload else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env)
        self._sock: socket.socket | None = None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._start(self.proc.stdout, self.proc.stdin)

    @classmethod
    def connect(cls, path: str, timeout: float = 60.0) -> ForkServer:
        """A client of the shared server listening at ``path``."""
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no fork server is listening at {path}") from None
                time.sleep(0.05)
        client = cls.__new__(cls)
        client.proc = None
        client._sock = sock
        client._start(sock.makefile("rb"), sock.makefile("wb"))
        return client

    def _start(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self._in, self._out = reader, writer
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._next_id = 0
        self._pids: dict[int, int] = {}  # request id -> pid
        self._ended: dict[int, ChildStatus] = {}
        self._closed = False
        first = reader.readline()
        if json.loads(first or b"null") != {"ready": True}:
            code = self.proc.wait() if self.proc is not None else None
            raise RuntimeError(f"the fork server did not start (exit {code})")
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        with self._lock:
            return not self._closed

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self._in:
                message = json.loads(line)
                with self._changed:
                    if "id" in message:
                        self._pids[message["id"]] = message["pid"]
                    else:
                        self._ended[message["pid"]] = ChildStatus(
                            message["pid"], message["code"], message["signal"])
                    self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _send(self, message: dict[str, Any]) -> None:
        self._out.write((json.dumps(message) + "\n").encode())
        self._out.flush()

    def spawn(self, target: str, args: dict[str, Any] | None = None, *,
              env: dict[str, str] | None = None, cwd: str | None = None,
              stdin: str | None = None, stdout: str | None = None,
              stderr: str | None = None) -> int:
        """Fork a child that runs ``target(args)``; returns its pid. Streams are file paths
        (``None``: /dev/null); ``env`` replaces the whole environment when given."""
        with self._changed:
            self._next_id += 1
            request_id = self._next_id
            self._send({"cmd": "spawn", "id": request_id, "target": target, "args": args,
                        "env": env, "cwd": cwd, "stdin": stdin, "stdout": stdout,
                        "stderr": stderr})
            while request_id not in self._pids:
                if self._closed:
                    raise RuntimeError("the fork server exited")
                self._changed.wait()
            return self._pids.pop(request_id)

    def wait(self, pid: int, timeout: float | None = None) -> ChildStatus:
        """Wait for the child to end; :class:`TimeoutError` if it is still running."""
        with self._changed:
            if not self._changed.wait_for(lambda: pid in self._ended or self._closed, timeout):
                raise TimeoutError(f"child {pid} still running after {timeout} s")
            if pid not in self._ended:
                raise RuntimeError("the fork server exited")
            return self._ended.pop(pid)

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        with self._lock:
            self._send({"cmd": "kill", "pid": pid, "signal": int(sig)})

    def close(self) -> None:
        """Leave the server; one of our own is stopped (its children killed)."""
        with contextlib.suppress(OSError, ValueError):
            self._out.close()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # the reader thread still holds a file
                self._sock.close()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_shared(path: str, preload: str | None = None, *,
                 env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a server that test processes join with :meth:`ForkServer.connect`; closing the
    returned process's stdin stops it. Returns at once: the preload runs meanwhile."""
    args = [sys.executable, "-m", "hippobot.testing.forkserver", "--listen", path]
    return subprocess.Popen(args + ([preload] if preload else []), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env=env)


if __name__ == "__main__":
    _argv = sys.argv[1:]
    _listen = _argv[1] if _argv[:1] == ["--listen"] else None
    _rest = _argv[2:] if _listen else _argv
    serve(_rest[0] if _rest else None, _listen)
