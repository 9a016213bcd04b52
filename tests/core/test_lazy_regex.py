"""Module-level patterns compile when first used and then behave as compiled patterns."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from hippobot.lazy_regex import lazy_compile


def test_a_lazy_pattern_matches_as_the_compiled_one_does() -> None:
    lazy = lazy_compile(r"(?P<word>\b[a-z]+)\s+(\d+)", re.IGNORECASE)
    eager = re.compile(r"(?P<word>\b[a-z]+)\s+(\d+)", re.IGNORECASE)
    text = "Locker 4417, room 12 and gate B"
    assert lazy.search(text).groupdict() == eager.search(text).groupdict()  # type: ignore[union-attr]
    assert [m.group(0) for m in lazy.finditer(text)] == [m.group(0) for m in eager.finditer(text)]
    assert lazy.sub(r"\2", text) == eager.sub(r"\2", text)
    assert lazy.pattern == eager.pattern and lazy.flags == eager.flags
    assert lazy.groupindex == eager.groupindex
    assert lazy_compile(rb"\d+").findall(b"a1 b22") == [b"1", b"22"]


def test_a_broken_pattern_fails_where_it_is_used_not_where_it_is_declared() -> None:
    broken = lazy_compile(r"(unclosed")
    with pytest.raises(re.error):
        broken.search("anything")


def test_starting_the_command_line_compiles_no_hippobot_pattern() -> None:
    # every hippobot pattern declared at module level is lazy: importing the command line
    # (what every `hippobot ...` start pays) leaves them all uncompiled
    code = (
        "import gc, hippobot.cli.main, hippobot.agent.api\n"
        "from hippobot.lazy_regex import _LazyPattern\n"
        "lazy = [o for o in gc.get_objects() if isinstance(o, _LazyPattern)]\n"
        "print(len(lazy), sum('_compiled' in o.__dict__ for o in lazy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    declared, compiled = map(int, out.stdout.split())
    assert declared >= 50
    assert compiled == 0
