"""An approval as a person reads it: arguments, a coloured diff, a countdown, the answer.

Pure functions from an approval's redacted view to HTML, shared by the
turn panel's ``ApprovalRow`` and the ``ApprovalsPanel``. A multi-line or long
value is shown as it is, in a bounded ``<pre>`` that scrolls; a file
overwrite's ``diff`` is drawn line by line in the theme's diff colours.
Every value is HTML-escaped, and every character that is not printable
(controls, bidi overrides, invisible ones) shown as its escape, as the
terminal prompt shows it: the view was chosen by a model, and what a person
approves must read as what runs. A view that is not whole says so.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from hostkit.effects import DIFF_KEY
from hostkit.freeze import thaw
from hostkit.inspect import HIDDEN_NOTE, printable_text
from hostkit.notebook._theme import (
    BORDER,
    DIFF_ADD_BG,
    DIFF_ADD_TEXT,
    DIFF_DEL_BG,
    DIFF_DEL_TEXT,
    ERROR,
    HEAD_BG,
    MUTED,
    TEXT,
)
from hostkit.types import PARTIAL_KEY

__all__ = [
    "APPROVE_ONCE",
    "APPROVE_SESSION",
    "DENY",
    "answer_html",
    "button_layout",
    "buttons_layout",
    "countdown_text",
    "diff_html",
    "esc",
    "hidden_html",
    "pre_html",
    "pretty_hides",
    "pretty_view",
    "request_html",
]

APPROVE_ONCE = "Approve once"
APPROVE_SESSION = "Approve for this session"
DENY = "Deny"
# What a <pre> shows at most; it scrolls past MAX_PRE_HEIGHT.
MAX_PRE_CHARS = 4_000
MAX_ANSWER_CHARS = 2_000
MAX_PRE_HEIGHT = "16em"
_MAX_ARGUMENTS = 16
# A value longer than this is a block, not an inline <code>.
_INLINE_CHARS = 80


def button_layout() -> widgets.Layout:
    """A button as wide as its label (the default fixed width cuts "Approve for this session")."""
    return widgets.Layout(width="auto", min_width="fit-content", flex="0 0 auto")


def buttons_layout() -> widgets.Layout:
    """A row of buttons that wraps on a narrow page instead of cutting a label."""
    return widgets.Layout(flex_flow="row wrap", align_items="center")


def request_html(
    effect: str,
    view: Mapping[str, Any],
    secret_names: Sequence[str] = (),
    warning: str | None = None,
) -> str:
    """What the turn panel shows above an approval's buttons."""
    arguments = view.get("arguments")
    rows = ""
    hidden = bool(view.get(PARTIAL_KEY))
    if isinstance(arguments, Mapping):
        shown = list(arguments.items())[:_MAX_ARGUMENTS]
        rows = "".join(
            f"<tr><td style='vertical-align:top'><code>{esc(_cut(str(k), 60))}</code></td>"
            f"<td>{value_html(v)}</td></tr>"
            for k, v in shown
        )
        if len(arguments) > _MAX_ARGUMENTS:
            rows += f"<tr><td colspan=2><i>{len(arguments) - _MAX_ARGUMENTS} more</i></td></tr>"
        hidden = hidden or len(arguments) > _MAX_ARGUMENTS
        hidden = hidden or any(len(str(k)) > 60 or _cuts(v) for k, v in shown)
    elif arguments is not None:
        rows = f"<tr><td>{value_html(arguments)}</td></tr>"
        hidden = hidden or _cuts(arguments)
    names = ", ".join(_cut(name, 60) for name in secret_names[:16])
    facts = f"<div>binds secrets: <code>{esc(names)}</code></div>" if names else ""
    target = view.get("target")
    if target is not None:
        facts += f"<div>target: <code>{esc(_cut(_text(target), 300))}</code></div>"
    diff = view.get(DIFF_KEY)
    if isinstance(diff, str):
        facts += diff_html(diff)
    if warning:
        facts += f"<div style='color:{ERROR}'><b>warning</b>: {esc(_cut(warning, 300))}</div>"
    # A model can shape its arguments so the part that matters is what gets cut or
    # masked: the person must know what is shown is not the whole call.
    note = hidden_html() if hidden else ""
    return (
        f"<div><b>approval needed</b>: the agent wants to run <code>{esc(effect)}</code>"
        f"</div><table>{rows}</table>{note}{facts}"
    )


def value_html(value: Any) -> str:
    """One argument: inline ``<code>``, or a ``<pre>`` block when it has lines or is long."""
    text = _text(value)
    if "\n" in text or len(text) > _INLINE_CHARS:
        return pre_html(text)
    return f"<code>{esc(text)}</code>"


def pre_html(text: str, *, limit: int = MAX_PRE_CHARS) -> str:
    """``text`` as it is (lines kept, escaped), cut to ``limit``; scrolls when tall or wide."""
    return (
        f"<pre style='{_PRE_STYLE}'>{esc(_cut(text, limit))}</pre>"
        if text
        else "<code>(empty)</code>"
    )


def diff_html(diff: str) -> str:
    """A unified diff with added lines green and removed lines red (theme-safe fixed pairs)."""
    if not diff:
        return "<div><i>no change: the new content is the file's current content</i></div>"
    lines = []
    for line in _cut(diff, MAX_PRE_CHARS * 5).splitlines():
        if line.startswith(("+++", "---", "@@", "…")):
            style = f"color:{MUTED}"
        elif line.startswith("+"):
            style = f"color:{DIFF_ADD_TEXT};background:{DIFF_ADD_BG}"
        elif line.startswith("-"):
            style = f"color:{DIFF_DEL_TEXT};background:{DIFF_DEL_BG}"
        else:
            style = f"color:{TEXT}"
        lines.append(f"<span style='{style};display:block'>{esc(line) or ' '}</span>")
    return (
        "<div>the file exists; this write replaces it:</div>"
        f"<pre class='hostkit-diff' style='{_PRE_STYLE}'>{''.join(lines)}</pre>"
    )


def countdown_text(expires_at: float, now: float, approval_id: str | None) -> str:
    """``answer within 4:32``; past the deadline, that the approval stays pending and where."""
    left = math.ceil(expires_at - now)
    if left > 0:
        minutes, seconds = divmod(left, 60)
        return f"answer within {minutes}:{seconds:02d}"
    where = f"`hostkit approvals approve {approval_id}`" if approval_id else "hostkit approvals"
    return (
        f"no answer in time: the approval stays pending; answer it with host.approvals or {where}"
    )


def pretty_view(view: Mapping[str, Any]) -> str:
    """The redacted view as indented JSON (its diff is drawn apart), bounded."""
    return _cut(_pretty(view), MAX_PRE_CHARS)


def pretty_hides(view: Mapping[str, Any]) -> bool:
    """Whether ``pretty_view`` shows less than the whole call: cut to fit, or a view the
    effects pipeline already marked partial."""
    return bool(view.get(PARTIAL_KEY)) or len(_pretty(view)) > MAX_PRE_CHARS


def hidden_html() -> str:
    """The note under a view a person decides on that is not the whole call."""
    return f"<div style='color:{ERROR}'><b>!</b> {esc(HIDDEN_NOTE)}</div>"


def _pretty(view: Mapping[str, Any]) -> str:
    shown = {key: value for key, value in thaw(view).items() if key != DIFF_KEY}
    return json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def answer_html(text: str) -> str:
    """What the continuation turn answered, bounded and escaped."""
    body = text.strip() or "(no text)"
    return (
        f"<div style='color:{MUTED}'>the agent answered:</div>"
        f"<pre style='{_PRE_STYLE};white-space:pre-wrap'>{esc(_cut(body, MAX_ANSWER_CHARS))}</pre>"
    )


_PRE_STYLE = (
    f"color:{TEXT};background:{HEAD_BG};border:1px solid {BORDER};border-radius:3px;"
    f"padding:4px 6px;margin:2px 0;max-height:{MAX_PRE_HEIGHT};overflow:auto;"
    "font-family:var(--jp-code-font-family, monospace);font-size:var(--jp-code-font-size, 12px)"
)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(thaw(value), ensure_ascii=False, sort_keys=True, default=str)


def _cuts(value: Any) -> bool:
    """Whether ``value_html`` shows less than all of ``value``."""
    return len(_text(value)) > MAX_PRE_CHARS


def esc(value: object) -> str:
    """HTML-escaped text (quotes included: safe in attributes too), every character that is
    not printable but line breaks and tabs shown as its escape."""
    return html.escape(printable_text(str(value)), quote=True)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
