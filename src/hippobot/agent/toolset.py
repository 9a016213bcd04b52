"""The tools a chat session gets: files, shell, and recall over its memory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.tools.base import ToolRegistry
from hippobot.tools.files import file_tools
from hippobot.tools.paths import PathPolicy
from hippobot.tools.shell import exec_tool
from hippobot.workspace import Workspace

if TYPE_CHECKING:
    from hippobot.config import Settings
    from hippobot.recall.index import RecallIndex

__all__ = ["build_registry"]


def build_registry(
    settings: Settings,
    *,
    workspace: Workspace,
    project: Path | None,
    recall: RecallIndex,
    session_key: str,
) -> ToolRegistry:
    root = project or workspace.root
    # With a project selected, file tools work in the project; the agent workspace stays
    # reachable so the model can still update memory/MEMORY.md when asked to remember.
    extra = (workspace.root,) if project else ()
    from hippobot.context.skills import builtin_skills_dir

    policy = PathPolicy(
        root,
        extra_roots=extra,
        read_only_roots=(builtin_skills_dir(),),  # the model may read built-in skills
        restrict=settings.config.tools.restrict_to_workspace,
    )
    registry = ToolRegistry()
    # Every write holds the file's lock, shared with Dream, restores and other sessions.
    registry.extend(file_tools(policy, lock=workspace.file_lock))
    registry.register(
        exec_tool(
            cwd=root,
            timeout=settings.config.tools.exec.timeout,
            max_output_chars=settings.config.tools.exec.max_output_chars,
            env=settings.env,
        )
    )
    from hippobot.recall.tools import recall_tools

    registry.extend(
        recall_tools(
            recall,
            session_key=session_key,
            include_other_sessions=settings.defaults.see_other_sessions,
        )
    )
    return registry
