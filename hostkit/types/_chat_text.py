"""How much of a chat platform's message limit a text fills, and where it may be cut.

Telegram counts a message in UTF-16 code units (4,096); Slack refuses texts
well below its 40,000 (``msg_too_long``; it asks for at most 4,000) and counts
them after its ``&amp;`` / ``&lt;`` / ``&gt;`` escaping. A routed answer is
split into parts that fit both (``split_parts``, at a line or word break), and
an adapter cuts what still does not fit (``cut_to``): never inside a surrogate
pair, before a combining mark or beside a zero-width joiner, so no part ends in
half a character.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

__all__ = [
    "CUT_MARK",
    "MAX_PART_UNITS",
    "chat_units",
    "cut_to",
    "has_visible",
    "split_parts",
    "utf16_units",
]

# The most one delivered part of an answer holds, in chat_units: within Slack's 4,000
# escaped characters and Telegram's 4,096 UTF-16 code units alike.
MAX_PART_UNITS = 4_000
# How a text an adapter had to cut ends, so the reader knows the rest is missing.
CUT_MARK = " … [cut: too long for one message]"

# A text's length as one platform counts it (utf16_units, chat_units).
Units = Callable[[str], int]
_ESCAPED = {"&": 5, "<": 4, ">": 4}  # &amp; &lt; &gt;
_JOINER = "\u200d"
# Characters that belong to the one before them: variation selectors, skin tones, tags.
_CLINGS = (
    (0xFE00, 0xFE0F),
    (0x1F3FB, 0x1F3FF),
    (0xE0020, 0xE007F),
    (0xE0100, 0xE01EF),
)
# Categories that draw nothing: controls, format characters (zero-width, bidi, tags)
# and every kind of space. A surrogate code point draws (a pair as its character, a
# lone one as U+FFFD).
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def _utf16(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def _chat(ch: str) -> int:
    return _ESCAPED.get(ch) or _utf16(ch)


def utf16_units(text: str) -> int:
    """``text``'s length as Telegram counts it."""
    return sum(map(_utf16, text))


def chat_units(text: str) -> int:
    """``text``'s length as the stricter platform counts it: UTF-16 units, Slack's escapes."""
    return sum(map(_chat, text))


def has_visible(text: str) -> bool:
    """Whether ``text`` shows anything: a character that is not a space, control or
    format character (an answer of only ``" \\n\\t"`` or a zero-width space is none)."""
    return any(unicodedata.category(ch) not in _INVISIBLE for ch in text)


def _clings(ch: str) -> bool:
    code = ord(ch)
    return (
        bool(unicodedata.combining(ch))
        or ch == _JOINER
        or 0xDC00 <= code <= 0xDFFF  # the low half of a pair written as two code points
        or any(low <= code <= high for low, high in _CLINGS)
    )


def _boundary(text: str, at: int) -> bool:
    return at in (0, len(text)) or not (_clings(text[at]) or text[at - 1] == _JOINER)


def _fit(text: str, limit: int, units: Units) -> int:
    """The longest prefix of ``text`` within ``limit`` that ends between characters."""
    used, end = 0, 0
    for ch in text:
        used += units(ch)
        if used > limit:
            break
        end += 1
    at = end
    while at > 0 and not _boundary(text, at):
        at -= 1
    return at or end


def cut_to(text: str, limit: int, units: Units, mark: str = CUT_MARK) -> str:
    """``text`` if it is within ``limit``; else its opening that fits, ending in ``mark``."""
    if units(text) <= limit:
        return text
    return text[: _fit(text, max(0, limit - units(mark)), units)].rstrip() + mark


def _break(text: str, end: int) -> tuple[int, int]:
    """Where a part that may run to ``end`` ends, and where the next begins: after the
    last line break in its second half, else the last space, else ``end`` itself."""
    for found in (text.rfind("\n", end // 2, end), _last_space(text, end // 2, end)):
        if found > 0:
            return found, found + 1
    return end, end


def _last_space(text: str, start: int, end: int) -> int:
    for at in range(end - 1, start - 1, -1):
        if text[at].isspace():
            return at
    return -1


def split_parts(text: str, limit: int = MAX_PART_UNITS) -> list[str]:
    """``text`` as parts of at most ``limit`` chat units each, in order, each with
    something visible; the whole text when it fits (nothing is dropped but the spaces
    at a break)."""
    parts: list[str] = []
    rest = text
    while (end := max(1, _fit(rest, limit, chat_units))) < len(rest):
        stop, start = _break(rest, end)
        parts.append(rest[:stop].rstrip())
        rest = rest[start:]
    parts.append(rest if not parts else rest.rstrip())
    return [part for part in parts if has_visible(part)]
