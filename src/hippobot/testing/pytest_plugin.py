"""pytest plugin shipped with hippobot: isolation from the user's home and the network,
plus fixtures for the scripted model.

Enable with ``-p hippobot.testing.pytest_plugin`` (hippobot's own pyproject does).

* ``hippobot_home`` (autouse): a fresh ``HIPPOBOT_HOME`` and no provider variables.
* ``no_network`` (autouse): connecting a socket to anything but loopback raises
  :class:`NetworkBlockedError`; mark a test ``@pytest.mark.allow_network`` to opt out.
* ``scripted_model``: a fresh :class:`~hippobot.testing.ScriptedModel`; the test fails at
  teardown if the model answered a call nobody scripted.
* ``scripted_server``: that model served on 127.0.0.1 for the real SDK clients.
"""

from __future__ import annotations

import ipaddress
import itertools
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hippobot.testing.cli import PROVIDER_PREFIXES, TEST_RUN_PREFIX
from hippobot.testing.scripted import ScriptedModel
from hippobot.testing.server import ScriptedServer

__all__ = ["NetworkBlockedError"]



class NetworkBlockedError(OSError):
    """A test tried to open a connection outside this machine."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allow_network: let this test open connections to non-loopback addresses"
    )


@pytest.fixture(scope="session")
def _hippobot_homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per test run that holds every test's home (numbered, so making one costs
    the same for the thousandth test as for the first)."""
    return tmp_path_factory.mktemp("hippobot-homes")


_home_numbers = itertools.count()


@pytest.fixture(autouse=True)
def hippobot_home(_hippobot_homes: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own HIPPOBOT_HOME and no provider variables from the caller
    (settings of the test run itself, ``HIPPOBOT_TEST_*``, stay)."""
    import os

    for name in list(os.environ):
        if name.startswith(PROVIDER_PREFIXES) and not name.startswith(TEST_RUN_PREFIX):
            monkeypatch.delenv(name, raising=False)
    home = _hippobot_homes / f"home{next(_home_numbers)}"
    home.mkdir()
    monkeypatch.setenv("HIPPOBOT_HOME", str(home))
    return home


def _is_local(family: int, address: Any) -> bool:
    if family not in (socket.AF_INET, socket.AF_INET6):
        return True  # AF_UNIX and friends never leave the machine
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # a host name: resolving it would already touch the network


@pytest.fixture(autouse=True)
def no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Block socket connections to non-loopback addresses for the test's duration."""
    if request.node.get_closest_marker("allow_network") is not None:
        return
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def check(sock: socket.socket, address: Any) -> None:
        if not _is_local(sock.family, address):
            raise NetworkBlockedError(
                f"network access blocked in tests: connect to {address!r} "
                "(use 127.0.0.1, or mark the test allow_network)"
            )

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A fresh scripted model; unscripted HTTP calls fail the test at teardown."""
    model = ScriptedModel()
    yield model
    if model.errors:
        pytest.fail("the scripted model got calls nobody scripted:\n" + "\n".join(model.errors))


@pytest.fixture
def scripted_server(scripted_model: ScriptedModel) -> Iterator[ScriptedServer]:
    """``scripted_model`` served on 127.0.0.1 (``.base_url``, ``.anthropic_base_url``)."""
    with ScriptedServer(scripted_model) as server:
        yield server
