"""The tools the model can call (SPEC 4.6) and the registry that runs them.

Build a registry for a turn with::

    policy = PathPolicy(workspace, restrict=settings.restrict_to_workspace)
    registry = ToolRegistry([*file_tools(policy), exec_tool(cwd=workspace, timeout=60)])
    result = await registry.execute(call_name, call_arguments_json)  # never raises

Other modules add their own tools with :func:`tool` / :meth:`Tool.from_function`.
"""

from __future__ import annotations

from hippobot.tools.base import Tool, ToolRegistry, ToolResult, tool
from hippobot.tools.files import apply_edit, file_tools
from hippobot.tools.paths import PathPolicy
from hippobot.tools.shell import DEFAULT_DENY_PATTERNS, exec_tool, scrub_env, truncate_middle

__all__ = [
    "DEFAULT_DENY_PATTERNS",
    "PathPolicy",
    "Tool",
    "ToolRegistry",
    "ToolResult",
    "apply_edit",
    "exec_tool",
    "file_tools",
    "scrub_env",
    "tool",
    "truncate_middle",
]
