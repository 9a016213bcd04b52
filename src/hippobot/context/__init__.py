"""What the model sees: system prompt, runtime context, images and token counts (SPEC 4.2).

Submodules, bottom-up: :mod:`.tokens` (counting), :mod:`.loader` (workspace files),
:mod:`.skills`, :mod:`.runtime` (per-turn metadata), :mod:`.images`, :mod:`.builder`
(the system prompt as a function of its inputs).
"""

from __future__ import annotations

from hippobot.context.builder import (
    ContextBuilder,
    PromptInputs,
    PromptSection,
    SystemPrompt,
    build_system_prompt,
)
from hippobot.context.images import load_image_block, user_content
from hippobot.context.loader import FileText, WorkspaceFiles, is_template
from hippobot.context.runtime import attach_runtime_context, fence_untrusted, runtime_context_block
from hippobot.context.skills import Skill, SkillsIndex

__all__ = [
    "ContextBuilder",
    "FileText",
    "PromptInputs",
    "PromptSection",
    "Skill",
    "SkillsIndex",
    "SystemPrompt",
    "WorkspaceFiles",
    "attach_runtime_context",
    "build_system_prompt",
    "fence_untrusted",
    "is_template",
    "load_image_block",
    "runtime_context_block",
    "user_content",
]
