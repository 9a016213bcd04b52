"""The tools a chat session gets: files, shell, and recall over its memory."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hippobot.context.runtime import holds_runtime_context
from hippobot.tools.base import ToolRegistry
from hippobot.tools.files import file_tools
from hippobot.tools.paths import PathPolicy
from hippobot.tools.sandbox import Sandbox
from hippobot.tools.shell import exec_tool
from hippobot.workspace import MEMORY_DIR, MEMORY_MD, USER_MD, Workspace

if TYPE_CHECKING:
    from hippobot.config import Settings
    from hippobot.recall.index import RecallIndex
    from hippobot.redact import Redactor

__all__ = ["build_registry"]


def _memory_file(workspace: Workspace, store_path: Callable[[str], bool]) -> Callable[[Path], bool]:
    """Whether a path is one of the files the memory history versions (they shape the
    prompt and are kept forever)."""
    root = Path(os.path.realpath(workspace.root))

    def is_memory(path: Path) -> bool:
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            return False
        return store_path(rel) or rel.startswith(f"{MEMORY_DIR}/")

    return is_memory


def _memory_redactor(redactor: Redactor, is_memory: Callable[[Path], bool]) -> Callable[[Path, str], str]:
    """Redacts keys from writes to the memory files; other files are written as given."""
    return lambda path, text: redactor(text) if is_memory(path) else text


def _memory_check(is_memory: Callable[[Path], bool]) -> Callable[[Path, str], str | None]:
    """Refuses the runtime context as memory: it is metadata and quoted recalled lines,
    added to each user message, never something the user said."""

    def refuse(path: Path, text: str) -> str | None:
        if is_memory(path) and holds_runtime_context(text):
            return (
                f"that text copies the runtime context added to the user's message (time, channel, "
                f"recalled memory), which is not memory; write only the fact, in a short line of "
                f"your own, with edit_file into {path.name}"
            )
        return None

    return refuse


def build_registry(
    settings: Settings,
    *,
    workspace: Workspace,
    project: Path | None,
    recall: RecallIndex,
    redactor: Redactor,
    store_path: Callable[[str], bool],
    session_key: str,
    private: Sequence[Path] = (),
    exec_enabled: bool = True,
    recalled: Callable[[], list[str]] | None = None,
    replayed_from: Callable[[], int] | None = None,
    asked: Callable[[], str] | None = None,
) -> ToolRegistry:
    """The tools of one session. ``store_path(rel)``: whether the memory history versions
    that workspace path (``GitStore.is_store_path``; asked only when a file is written).
    ``private`` folders (other people's workspaces on a shared server) are hidden from the
    file tools and from ``exec``'s sandbox, like hippobot's home; without ``exec_enabled``
    the model gets no ``exec``; ``recalled`` gives the memory recalled for the session's latest
    message, which memory_get points the model back to when it asks for a citation that
    does not exist; ``replayed_from`` the session's first message the request surely
    replays, which memory_search leaves out (the model has them in front of it)."""
    root = project or workspace.root
    hidden = (settings.home, *private)  # config.json and its keys, other workspaces
    # With a project selected, file tools work in the project; the agent workspace stays
    # reachable so the model can still update memory/MEMORY.md when asked to remember.
    extra = (workspace.root,) if project else ()
    from hippobot.context.skills import builtin_skills_dir

    policy = PathPolicy(
        root,
        extra_roots=extra,
        read_only_roots=(builtin_skills_dir(),),  # the model may read built-in skills
        restrict=settings.config.tools.restrict_to_workspace,
        hidden_roots=hidden,  # even when unrestricted
    )
    from hippobot.context.budget import compact_prompt

    # a small window gets the short schemas, with the compact system prompt (context.builder)
    registry = ToolRegistry(compact=compact_prompt(settings.defaults.context_window_tokens))
    # Every write holds the file's lock, shared with Dream, restores and other sessions,
    # and keys are redacted from what reaches a memory file.
    is_memory = _memory_file(workspace, store_path)
    redact = _memory_redactor(redactor, is_memory)
    from hippobot.recall.boilerplate import memory_line

    # write_file may not drop a fact line of these; what is not memory (template text, empty
    # slots, headings) it may, as the index decides.
    keeps = {workspace.user.resolve(): memory_line(USER_MD), workspace.memory_md.resolve(): memory_line(MEMORY_MD)}
    registry.extend(file_tools(policy, lock=workspace.file_lock, redact=redact, refuse=_memory_check(is_memory),
                               keeps_lines=lambda path: keeps.get(path.resolve())))
    if exec_enabled:
        registry.register(
            exec_tool(
                cwd=root,
                timeout=settings.config.tools.exec.timeout,
                max_output_chars=settings.config.tools.exec.max_output_chars,
                env=settings.env,
                sandbox=Sandbox(settings.config.tools.exec.sandbox, writable=(root, *extra), hidden=hidden),
            )
        )
    from hippobot.recall.tools import recall_tools

    registry.extend(
        recall_tools(
            recall,
            session_key=session_key,
            include_other_sessions=settings.defaults.see_other_sessions,
            recalled=recalled,
            replayed_from=replayed_from,
            asked=asked,
        )
    )
    return registry
