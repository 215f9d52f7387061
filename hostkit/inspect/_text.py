"""Outside text made safe for a terminal or a text/plain view: one line, bounded, no controls.

Event keys, failure messages, tool arguments and MCP descriptions come from
platforms, models and servers. Both front ends (the CLI's tables and the
notebook's text/plain reprs) draw them through ``one_line``, ``printable_text``
or ``prose_text``, and JSON written for a terminal or a log through
``printable_json``, so one rule decides what may reach a terminal.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hostkit.errors import bounded, bounded_hides
from hostkit.freeze import thaw

__all__ = [
    "HIDDEN_NOTE",
    "one_line",
    "one_line_hides",
    "printable",
    "printable_json",
    "printable_text",
    "prose_text",
]


# Said under a view a person decides on when part of it is cut or masked (CLI and notebook).
HIDDEN_NOTE = (
    "not all of this call is shown (cut to fit, or masked as secret-looking text): "
    "approve only if you know what it runs"
)


def printable(text: str) -> str:
    """``text`` with every non-printable character written as its Python escape.

    Control characters (C0 and C1: ESC, CSI), format characters (bidi
    overrides) and line or paragraph separators are what could repaint a
    terminal or reorder what an operator reads.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def printable_text(text: str) -> str:
    """``text`` as ``printable`` writes it, but keeping its line breaks and tabs.

    For what a person decides on or an operator reads (an approval's
    argument, a turn's error): its lines stay lines, and every other
    character that is not printable, invisible ones included, is shown
    as its escape.
    """
    if text.isprintable():
        return text
    return "\n".join(
        "\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n")
    )


def prose_text(text: str) -> str:
    """A model's answer for a terminal: every character that can drive it escaped.

    Controls (C0 but line breaks and tabs, C1: ESC, CSI, OSC), line and
    paragraph separators and the bidi embeddings, overrides and isolates
    (which reorder whole runs of what is read) are escaped. The rest of
    Unicode stays as written, the directional marks (LRM, RLM, ALM) and
    zero-width joiners included, so joined emoji and right-to-left words read
    as the model wrote them. ``printable_text`` is the stricter rule, for
    what a person decides on. A lone surrogate (in text a transcript kept
    before such text was made valid where it enters) is escaped too: no
    terminal encoding has bytes for one, and writing it would fail the command.
    """
    if text.isprintable() or not _DRIVES.search(text):
        return text
    return _DRIVES.sub(lambda m: ascii(m.group())[1:-1], text)


# What ``prose_text`` escapes: controls but \t and \n, separators, bidi controls, and
# lone surrogates.
_DRIVES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with every character that is not
    printable written as its ``\\u`` escape, the newlines of its indent kept.

    Readable text stays as it is, but C1 controls (CSI), bidi overrides and
    line separators, which ``json`` writes raw, can no longer repaint a
    terminal or reorder a log line, and a parser still gets the exact value.
    Only strings hold such characters: outside them ``json`` writes nothing
    but printable characters and the newlines of its indent.
    """
    if text.replace("\n", "").isprintable():
        return text
    return "".join(ch if ch == "\n" or ch.isprintable() else _json_escape(ch) for ch in text)


def _json_escape(ch: str) -> str:
    """``ch`` as a JSON string escape (a surrogate pair beyond the BMP)."""
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def one_line_hides(value: Any, limit: int) -> bool:
    """Whether ``one_line(value, limit)`` leaves something out: cut (before or after its
    escapes), or masked as secret-looking text. A view a person decides on says so."""
    text = _flat(value)
    return bounded_hides(text, limit) or len(printable(bounded(text, limit))) > limit


def one_line(value: Any, limit: int) -> str:
    """A view value as one bounded, redacted line with control characters escaped.

    Strings pass through ``bounded`` (which also redacts ``api_key=...``-style
    assignments and bearer tokens); anything else is shown as compact JSON.
    Escaping control and format characters (ESC, bidi overrides) keeps a
    model-chosen value from repainting the terminal.
    """
    text = printable(bounded(_flat(value), limit))
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _flat(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(thaw(value), ensure_ascii=False, sort_keys=True, default=str)
