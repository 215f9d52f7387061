"""The model's answer as HTML: Markdown rendered by markdown-it-py, never the model's own HTML.

The answer is untrusted text shown in a widget that sets ``innerHTML``, so
raw HTML is escaped (``html=False``), images are off (a remote image would
be fetched the moment the answer streams in), and a link is a link only
when it is http(s); anything else stays as its text. Characters that could
drive a terminal or reorder what is read (controls, bidi overrides) are shown
as their escapes, by ``prose_text``, the rule the CLI prints the same answer
by. The output is a pure function of the text, so stored notebooks compare
equal under nbval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from hostkit.inspect import prose_text

__all__ = ["render_markdown"]

_SCHEMES = ("http://", "https://")


def _link_open(renderer: Any, tokens: Sequence[Token], index: int, options: Any, env: Any) -> str:
    token = tokens[index]
    token.attrSet("rel", "noopener noreferrer nofollow")
    token.attrSet("target", "_blank")
    return str(renderer.renderToken(tokens, index, options, env))


def _escape_controls(state: StateCore) -> None:
    """Escape what the model wrote, after parsing: the Markdown that structures it stays
    Markdown, and a character written as an entity (``&#x202e;``) is caught too."""
    for token in state.tokens:
        if token.type in ("fence", "code_block"):
            token.content = prose_text(token.content)
            token.info = prose_text(token.info)
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                child.content = prose_text(child.content)
            elif child.type == "link_open" and child.attrGet("title"):
                child.attrSet("title", prose_text(str(child.attrGet("title"))))  # its tooltip


def _build() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")
    md.validateLink = lambda url: url.strip().lower().startswith(_SCHEMES)  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    md.core.ruler.push("escape_controls", _escape_controls)  # after text_join: whole runs
    return md


_MD = _build()


def render_markdown(text: str) -> str:
    """``text`` as safe HTML (escaped raw HTML, http(s) links only, no images)."""
    return str(_MD.render(text))
