"""Outside text made safe for a terminal or a text/plain view: one line, bounded, no controls.

Event keys, failure messages, tool arguments and MCP descriptions come from
platforms, models and servers. Both front ends (the CLI's tables and the
notebook's text/plain reprs) draw them through ``one_line``, so one rule
decides what may reach a terminal.
"""

from __future__ import annotations

import json
from typing import Any

from hostkit.errors import bounded
from hostkit.freeze import thaw

__all__ = ["one_line", "printable"]


def printable(text: str) -> str:
    """``text`` with every non-printable character written as its Python escape.

    Control characters (C0 and C1: ESC, CSI), format characters (bidi
    overrides) and line or paragraph separators are what could repaint a
    terminal or reorder what an operator reads.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def one_line(value: Any, limit: int) -> str:
    """A view value as one bounded, redacted line with control characters escaped.

    Strings pass through ``bounded`` (which also redacts ``api_key=...``-style
    assignments and bearer tokens); anything else is shown as compact JSON.
    Escaping control and format characters (ESC, bidi overrides) keeps a
    model-chosen value from repainting the terminal.
    """
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(thaw(value), ensure_ascii=False, sort_keys=True, default=str)
    text = printable(bounded(text, limit))
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
