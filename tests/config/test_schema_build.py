"""hippobot builds its schemas without pydantic's plugin search (every installed package's
entry points, read at each start) and leaves the process's environment as it found it."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import os, sys
from pydantic.plugin import _loader
from hippobot.config import Config
from hippobot.tools.base import Tool

def read_file(path: str, offset: int = 0) -> str:
    '''Read a file.'''
    return path

Config.model_validate({})
Tool.from_function(read_file).schema()
print(_loader._plugins is None, os.environ.get("PYDANTIC_DISABLE_PLUGINS"))
"""


def _probe(**env_extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_config_and_tool_schemas_never_search_for_pydantic_plugins():
    assert _probe() == "True None"


def test_a_users_own_plugin_setting_is_left_as_it_was():
    assert _probe(PYDANTIC_DISABLE_PLUGINS="logfire") == "True logfire"
