"""The tools a chat session gets: files, shell, and recall over its memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hippobot.tools.base import ToolRegistry
from hippobot.tools.files import file_tools
from hippobot.tools.paths import PathPolicy
from hippobot.tools.sandbox import Sandbox
from hippobot.tools.shell import exec_tool

if TYPE_CHECKING:
    from hippobot.agent.agent import Agent

__all__ = ["build_registry"]


def build_registry(agent: Agent, session_key: str) -> ToolRegistry:
    settings = agent.settings
    root = agent.project or agent.workspace
    # With a project selected, file tools work in the project; the agent workspace stays
    # reachable so the model can still update memory/MEMORY.md when asked to remember.
    extra = (agent.workspace,) if agent.project else ()
    from hippobot.context.skills import builtin_skills_dir

    policy = PathPolicy(
        root,
        extra_roots=extra,
        read_only_roots=(builtin_skills_dir(),),  # the model may read built-in skills
        restrict=settings.config.tools.restrict_to_workspace,
        hidden_roots=(settings.home,),  # config.json and its keys, even when unrestricted
    )
    registry = ToolRegistry()
    registry.extend(file_tools(policy))
    registry.register(
        exec_tool(
            cwd=root,
            timeout=settings.config.tools.exec.timeout,
            max_output_chars=settings.config.tools.exec.max_output_chars,
            env=settings.env,
            sandbox=Sandbox(
                settings.config.tools.exec.sandbox,
                writable=(root, *extra),
                hidden=(settings.home,),  # config.json, keys, other workspaces
            ),
        )
    )
    from hippobot.recall.tools import recall_tools

    registry.extend(
        recall_tools(
            agent.recall,
            session_key=session_key,
            include_other_sessions=settings.defaults.see_other_sessions,
        )
    )
    return registry
