"""Markdown for the memory page, rendered so that no file can put markup on it.

The memory and prompt files are Markdown the model and other programs write, so they are
untrusted: raw HTML in them is shown as text (``html`` off), images are not rendered (a
remote image would report the page's visits), a link is one only for ``http``, ``https``
and ``mailto`` addresses (``javascript:``, ``data:`` and the like stay text) and opens
without a referrer, and nothing carries a ``style`` attribute or an event handler, so the
page works under a strict Content-Security-Policy. Headings are shifted below the page's
own (``#`` becomes ``<h4>``). A skill's YAML front matter is shown as it is, above the body.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from html import escape
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from hippobot.lazy_regex import lazy_compile

__all__ = ["render_markdown"]

_SAFE_LINK = lazy_compile(r"^(https?:|mailto:|#)", re.IGNORECASE)
_FRONT_MATTER = lazy_compile(r"\A---[ \t]*\n(.*?\n)(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_HEADING_SHIFT = 3  # the page uses h1-h3 itself


def _safe_link(url: str) -> bool:
    return bool(_SAFE_LINK.match(url.strip()))


def _shift_heading(tokens: Sequence[Token], idx: int) -> None:
    token = tokens[idx]
    level = min(6, int(token.tag[1]) + _HEADING_SHIFT)
    token.tag = f"h{level}"


@cache
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"]).disable("image")
    md.validateLink = _safe_link  # type: ignore[method-assign]
    def heading(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        _shift_heading(tokens, idx)
        return str(self.renderToken(tokens, idx, options, env))

    def link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        return str(self.renderToken(tokens, idx, options, env))

    def cell(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrs.pop("style", None)  # alignment; style attributes break a strict CSP
        return str(self.renderToken(tokens, idx, options, env))

    for name, rule in (
        ("heading_open", heading), ("heading_close", heading), ("link_open", link_open),
        ("th_open", cell), ("td_open", cell),
    ):
        md.add_render_rule(name, rule)
    return md


def render_markdown(text: str) -> str:
    """``text`` as HTML safe to put in the page (see the module docstring)."""
    head = ""
    match = _FRONT_MATTER.match(text)
    if match:
        head = f"<pre class=meta>{escape(match.group(1).rstrip())}</pre>"
        text = text[match.end():]
    return head + _parser().render(text)
