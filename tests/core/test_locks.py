"""The cheap cross-process locks used on every turn."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from hippobot.locks import LockTimeout, acquire_async, locked

HOLDER = """
import sys, time
from hippobot.locks import locked
with locked(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold_in_child(path, seconds):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_another_process_holding_the_lock_makes_us_wait_or_time_out(tmp_path):
    path = tmp_path / "locks" / "a.lock"  # the folder is created on demand
    child = hold_in_child(path, 1.5)
    try:
        with pytest.raises(LockTimeout), locked(path, timeout=0.2):
            pass
        start = time.monotonic()
        with locked(path, timeout=30):  # granted once the child lets go
            assert time.monotonic() - start > 0.5
    finally:
        child.wait()


def test_reentrant_in_a_thread_exclusive_between_threads(tmp_path):
    path = tmp_path / "b.lock"
    order = []

    def other() -> None:
        with locked(path):
            order.append("other")

    with locked(path), locked(path):  # nested use in one thread does not deadlock
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.2)
        order.append("first")
    t.join(5)
    assert order == ["first", "other"]


async def test_async_acquire_does_not_block_and_times_out(tmp_path):
    path = tmp_path / "c.lock"
    child = hold_in_child(path, 1.0)
    try:
        with pytest.raises(LockTimeout):
            await acquire_async(path, timeout=0)
        held = await acquire_async(path, timeout=30, poll=0.01)
        held.release()
        held.release()  # idempotent
    finally:
        child.wait()
