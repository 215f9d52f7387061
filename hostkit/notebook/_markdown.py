"""The model's answer as HTML: Markdown rendered by markdown-it-py, never the model's own HTML.

The answer is untrusted text shown in a widget that sets ``innerHTML``, so
raw HTML is escaped (``html=False``), images are off (a remote image would
be fetched the moment the answer streams in), and a link is a link only
when it is http(s); anything else stays as its text. The output is a pure
function of the text, so stored notebooks compare equal under nbval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["render_markdown"]

_SCHEMES = ("http://", "https://")


def _link_open(renderer: Any, tokens: Sequence[Token], index: int, options: Any, env: Any) -> str:
    token = tokens[index]
    token.attrSet("rel", "noopener noreferrer nofollow")
    token.attrSet("target", "_blank")
    return str(renderer.renderToken(tokens, index, options, env))


def _build() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")
    md.validateLink = lambda url: url.strip().lower().startswith(_SCHEMES)  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _build()


def render_markdown(text: str) -> str:
    """``text`` as safe HTML (escaped raw HTML, http(s) links only, no images)."""
    return str(_MD.render(text))
