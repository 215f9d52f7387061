"""An approver's diff: what a file overwrite would change, as a bounded unified diff.

A tool's ``preview_diff`` hook produces it before approval; the approval
view keeps it under ``diff``, redacted like every other string of the view
and bounded to ``MAX_DIFF_LINES`` lines and ``MAX_DIFF_CHARS`` characters,
so an approver reads the change itself rather than 300 characters of the
new content.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from hostkit.freeze import FrozenMap
from hostkit.types import bounded_metadata

__all__ = [
    "DIFF_KEY",
    "MAX_DIFF_CHARS",
    "MAX_DIFF_INPUT_CHARS",
    "MAX_DIFF_INPUT_LINES",
    "MAX_DIFF_LINES",
    "bound_diff",
    "bounded_view",
    "unified_diff",
]

DIFF_KEY = "diff"
MAX_DIFF_LINES = 200
MAX_DIFF_CHARS = 20_000
# Texts longer than this are not diffed (difflib is quadratic in the worst case).
MAX_DIFF_INPUT_CHARS = 256 * 1024
# Nor texts of more lines than this: its work grows with the lines compared, and 87,000
# short lines under the character bound took 10 s of CPU; 5,000 take a few milliseconds.
MAX_DIFF_INPUT_LINES = 5_000


def unified_diff(old: str, new: str, path: str) -> str | None:
    """``old`` → ``new`` as a unified diff cut to the bounds; None when either is too long
    (characters or lines).

    An unchanged file gives an empty string (the approver sees "no change").
    """
    if len(old) > MAX_DIFF_INPUT_CHARS or len(new) > MAX_DIFF_INPUT_CHARS:
        return None
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    if len(before) > MAX_DIFF_INPUT_LINES or len(after) > MAX_DIFF_INPUT_LINES:
        return None
    lines = difflib.unified_diff(
        before,
        after,
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    kept: list[str] = []
    more = 0
    for line in lines:
        if len(kept) < MAX_DIFF_LINES:
            kept.append(line if line.endswith("\n") else line + "\n")
        else:
            more += 1
    text = "".join(kept)
    if more:
        text += f"… {more} more diff lines not shown\n"
    return bound_diff(text)


def bound_diff(text: str) -> str:
    """``text`` cut to ``MAX_DIFF_LINES`` lines and ``MAX_DIFF_CHARS`` characters."""
    lines = text.splitlines(keepends=True)
    if len(lines) > MAX_DIFF_LINES + 1:
        text = "".join(lines[:MAX_DIFF_LINES]) + f"… {len(lines) - MAX_DIFF_LINES} more lines\n"
    if len(text) > MAX_DIFF_CHARS:
        text = text[: MAX_DIFF_CHARS - 1] + "…"
    return text


def bounded_view(view: Mapping[str, Any] | None) -> FrozenMap:
    """An approval view bounded as metadata, its ``diff`` string kept to the diff bounds."""
    bounded = bounded_metadata(view)
    diff = view.get(DIFF_KEY) if isinstance(view, Mapping) else None
    if not isinstance(diff, str):
        return bounded
    return FrozenMap({**bounded, DIFF_KEY: bound_diff(diff)})
