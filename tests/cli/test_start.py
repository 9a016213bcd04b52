"""A command's start runs without the cyclic garbage collector (it would only walk the
objects the start is making); the rest of the command, and every turn of a chat, with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# Runs the real entry point with Api.handle watched: is the collector on when a turn
# begins and when it has ended?
WATCH = """
import gc, sys
from hippobot.agent import api
seen = []
handle = api.Api.handle
async def watched(self, *args, **kwargs):
    begun = gc.isenabled()
    result = await handle(self, *args, **kwargs)
    seen.append((begun, gc.isenabled()))
    return result
api.Api.handle = watched
from hippobot.cli.main import main
sys.argv = ["hippobot", *sys.argv[1:]]
try:
    main()
finally:
    sys.stderr.write(f"turns={seen} exit={gc.isenabled()}\\n")
"""


def _run(args: list[str], home: Path, server, stdin: str = "") -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPPOBOT_", "OPENAI_", "ANTHROPIC_"))}
    env.update(HIPPOBOT_HOME=str(home), HIPPOBOT_MODEL="scripted-model", HIPPOBOT_API_BASE=server.base_url,
               HIPPOBOT_API_KEY="sk-test-key-000000000000")
    proc = subprocess.run([sys.executable, "-c", WATCH, *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)
    found = re.search(r"turns=(.*) exit=(\w+)", proc.stderr)
    assert proc.returncode == 0 and found, proc.stderr[-2000:]
    return proc.stdout, found.group(0)


def test_a_one_shot_starts_without_the_collector_and_ends_with_it(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("Noted.")
    out, gc_state = _run(["agent", "-m", "hello"], hippobot_home, scripted_server)
    assert out == "Noted.\n"
    assert gc_state == "turns=[(False, True)] exit=True"


def test_a_piped_chat_and_other_commands_run_with_the_collector(hippobot_home, scripted_server, scripted_model):
    scripted_model.reply("One.").reply("Two.")
    out, gc_state = _run(["agent"], hippobot_home, scripted_server, stdin="first\nsecond\n")
    assert out == "One.\nTwo.\n"
    assert gc_state == "turns=[(True, True), (True, True)] exit=True"
    _out, gc_state = _run(["status"], hippobot_home, scripted_server)
    assert gc_state == "turns=[] exit=True"
