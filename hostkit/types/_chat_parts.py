"""A long answer as the ordered chat messages it is delivered in.

Each part fits one message of every platform (``MAX_PART_UNITS``) and ends
after a line break, else a space, else where the room ends, never inside a
character. A part keeps its break, so the parts' texts joined are the answer
and a receiver can rebuild it. What the split adds around a part is kept
apart (``ChatPart.before`` / ``after``): a code fence the break fell inside is
closed at the part's end and reopened with its info string at the next
part's start, so the block keeps its formatting on Slack. At most
``MAX_PARTS`` go out: a runaway or injected answer of megabytes would
otherwise be a thousand messages, and the session's later answers would wait
behind them; the last part then ends in a mark saying how much was withheld.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from hostkit.types._chat_text import (
    MAX_PART_UNITS,
    _boundary,
    _chat,
    _fit,
    chat_units,
    has_visible,
)

__all__ = ["MAX_PARTS", "ChatPart", "chat_parts", "split_parts", "withheld_mark"]

# The most messages one answer is delivered in.
MAX_PARTS = 10
# A fence line: up to three spaces, three or more backticks, an info string without one.
_FENCE = re.compile(r"^ {0,3}(`{3,})([^`\n]*)$", re.MULTILINE)
# A fence whose opening line is longer is not reopened (its info string would crowd the part).
_MAX_REOPEN = 80
# The least room a part's own text keeps beside what the split adds to it.
_MIN_ROOM = 64


def withheld_mark(chars: int) -> str:
    """How the last part sent ends when ``chars`` more characters of the answer are not."""
    return (
        f"\n\n[… {chars:,} more characters not sent: longer than the {MAX_PARTS} messages"
        " one answer may fill. The whole answer is kept in this conversation's history"
        " on the Host: ask for it in shorter pieces, or ask the Host's operator.]"
    )


@dataclass(frozen=True, slots=True)
class ChatPart:
    """One message of an answer: ``text`` is the answer's own slice (the parts' texts
    joined are the answer, up to what was withheld); ``before`` and ``after`` are what
    the split added (a fence reopened, a fence closed, the withheld mark)."""

    text: str
    before: str = ""
    after: str = ""

    @property
    def shown(self) -> str:
        """What the chat shows."""
        return self.before + self.text + self.after


class _Fences:
    """Which code fence, if any, is open at each offset of a text (CommonMark-style
    backtick fences on their own lines: what Slack and the models write)."""

    def __init__(self, text: str) -> None:
        self._at: list[int] = []
        self._open: list[str | None] = []
        opener: str | None = None
        for line in _FENCE.finditer(text):
            ticks, info = line.group(1), line.group(2).strip()
            if opener is None:
                opener = ticks + info
            elif not info and len(ticks) >= len(opener) - len(opener.lstrip("`")):
                opener = None
            else:
                continue
            self._at.append(min(line.end() + 1, len(text)))
            self._open.append(opener)

    def open_at(self, at: int) -> str | None:
        """The opening line of the fence open at offset ``at`` (None outside one)."""
        found = bisect_right(self._at, at) - 1
        opener = self._open[found] if found >= 0 else None
        return opener if opener is not None and len(opener) <= _MAX_REOPEN else None


def _closing(opener: str | None, text: str) -> str:
    if opener is None:
        return ""
    ticks = "`" * (len(opener) - len(opener.lstrip("`")))
    return ticks if text.endswith("\n") else "\n" + ticks


def _stop(text: str, start: int, room: int) -> int:
    """Where a part that begins at ``start`` with ``room`` units ends: after the last line
    break in the second half of what fits, else after the last space there, else where
    the room ends; always between characters, always past ``start``."""
    window = text[start : start + room + 1]
    end = max(1, _fit(window, room, _chat))
    if end >= len(window) and start + end >= len(text):
        return len(text)
    half = end // 2
    at = window.rfind("\n", half, end)
    while at >= 0 and not _boundary(window, at + 1):
        at = window.rfind("\n", half, at)
    if at >= 0:
        return start + at + 1
    for at in range(end - 1, half - 1, -1):
        if window[at].isspace() and _boundary(window, at + 1):
            return start + at + 1
    return start + end


def _part(text: str, start: int, limit: int, fences: _Fences, mark: str) -> tuple[int, str, str]:
    """Where the part from ``start`` ends and what goes before and after its text: a
    reopened fence, a closed one, and ``mark`` when the text goes on past it."""
    before = opener + "\n" if (opener := fences.open_at(start)) else ""
    room = max(_MIN_ROOM, limit - chat_units(before))
    if (stop := _stop(text, start, room)) >= len(text):
        return stop, before, ""
    spare = chat_units(mark)
    while True:
        after = _closing(fences.open_at(stop), text[start:stop]) + mark
        over = chat_units(before) + chat_units(text[start:stop]) + chat_units(after) - limit
        if over <= 0 or room == _MIN_ROOM:
            return stop, before, after
        room = max(_MIN_ROOM, room - max(over, spare))
        spare = 0
        stop = _stop(text, start, room)


def chat_parts(
    text: str, limit: int = MAX_PART_UNITS, max_parts: int = MAX_PARTS
) -> list[ChatPart]:
    """``text`` as at most ``max_parts`` parts of at most ``limit`` chat units each, in
    order, each with something visible of its own; the whole text when it fits.

    Nothing is dropped but a stretch of spaces or invisible characters too long to go
    with visible text in one part (thousands), and what ``max_parts`` leaves out (the
    last part sent says how much).
    """
    fences = _Fences(text)
    parts: list[ChatPart] = []
    start = 0
    while start < len(text):
        last = len(parts) == max_parts - 1
        mark = withheld_mark(len(text) - start) if last else ""
        stop, before, after = _part(text, start, limit, fences, mark)
        if last and stop < len(text):
            after = after.removesuffix(mark) + withheld_mark(len(text) - stop)
        if has_visible(text[start:stop]):
            parts.append(ChatPart(text[start:stop], before, after))
            if last and stop < len(text):
                break
        start = stop
    return parts


def split_parts(text: str, limit: int = MAX_PART_UNITS, max_parts: int = MAX_PARTS) -> list[str]:
    """What each message of ``text``'s parts shows (``chat_parts``)."""
    return [part.shown for part in chat_parts(text, limit, max_parts)]
