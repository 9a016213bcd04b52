"""Stored messages → the exact messages sent to a model.

One function serves both the current turn and every later replay, so an image turn is
re-encoded to the same bytes each time (the provider's prompt cache keeps hitting) while the
session file stores only the image's path.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hippobot.errors import UserError
from hippobot.messages import Message, wire_message

__all__ = ["to_wire"]

log = logging.getLogger(__name__)


def to_wire(msg: Message) -> dict[str, Any]:
    out = wire_message(msg)
    media = msg.get("media")
    if msg.get("role") == "user" and media:
        from hippobot.context.images import user_content

        text = out.get("content") if isinstance(out.get("content"), str) else ""
        try:
            out["content"] = user_content(text or "", list(media))
        except UserError as exc:
            # The image was moved or deleted since: say so instead of failing every later turn.
            log.warning("%s; replaying the turn without it", exc)
            crumbs = "\n".join(f"[image unavailable: {Path(p).name}]" for p in media)
            out["content"] = f"{crumbs}\n{text}" if text else crumbs
    return out
