"""How much of a chat platform's message limit a text fills, and where it may be cut.

Telegram counts a message in UTF-16 code units (4,096); Slack refuses texts
well below its 40,000 (``msg_too_long``; it asks for at most 4,000) and counts
them after its ``&amp;`` / ``&lt;`` / ``&gt;`` escaping. A routed answer is
split into parts that fit both (``hostkit.types._chat_parts``), and an adapter
cuts what still does not fit (``cut_to``): never inside a character as a reader
sees it (a surrogate pair, before a mark, beside a zero-width joiner, between
a CR and its LF, inside a flag's pair of regional indicators), so no part ends
in half a character.
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
# Characters that belong to the one before them: variation selectors, skin tones, tags,
# and the vowel and final jamo that join a Hangul syllable.
_CLINGS = (
    (0xFE00, 0xFE0F),
    (0x1F3FB, 0x1F3FF),
    (0xE0020, 0xE007F),
    (0xE0100, 0xE01EF),
    (0x1160, 0x11FF),
    (0xD7B0, 0xD7FF),
)
# Every mark, spacing or not: unicodedata.combining() is 0 for many (Thai U+0E31,
# Devanagari U+093F), which still draw on the letter before them.
_MARKS = frozenset({"Mn", "Mc", "Me"})
# Letters Unicode still counts as spacing marks: Thai and Lao SARA AM.
_SPACING_LETTERS = frozenset({"\u0e33", "\u0eb3"})
# Regional indicators: two of them are one flag, counted from the start of their run.
_REGIONAL = (0x1F1E6, 0x1F1FF)
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
        unicodedata.category(ch) in _MARKS
        or ch in _SPACING_LETTERS
        or ch == _JOINER
        or 0xDC00 <= code <= 0xDFFF  # the low half of a pair written as two code points
        or any(low <= code <= high for low, high in _CLINGS)
    )


def _regional(ch: str) -> bool:
    return _REGIONAL[0] <= ord(ch) <= _REGIONAL[1]


def _boundary(text: str, at: int) -> bool:
    """Whether ``text`` may be cut at ``at``: not inside one character as a reader sees it."""
    if at <= 0 or at >= len(text):
        return True
    before, ch = text[at - 1], text[at]
    if _clings(ch) or before == _JOINER or (before == "\r" and ch == "\n"):
        return False
    if _regional(before) and _regional(ch):
        run = at - 1
        while run > 0 and _regional(text[run - 1]):
            run -= 1
        return (at - run) % 2 == 0  # after a whole number of flags
    return True


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
