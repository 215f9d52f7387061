"""Predicates for the numbers and names that set a limit, a timeout or a count.

A limit is where a bad value does the most harm quietly: ``NaN`` compares
false with everything, so ``value < 1`` lets it through and every later
``used >= value`` never stops anything; ``inf`` waits forever; ``-1`` means
"unlimited" to ``prlimit``; ``True`` is an ``int``; a ``str`` is a sequence
of one-character patterns. Every constructor that takes such a value asks
these predicates and raises its own typed error (``InvalidValue`` for an API
argument, ``ConfigError`` with the key for configuration).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import TypeGuard

__all__ = [
    "encodable",
    "is_count",
    "is_encodable",
    "is_message_text",
    "is_names",
    "is_positive",
    "is_seconds",
    "is_text",
    "plain_text",
    "storable",
]


def is_count(value: object, *, low: int = 1, high: int | None = None) -> TypeGuard[int]:
    """An ``int`` (not a ``bool``) from ``low`` to ``high`` (no upper bound when None)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return low <= value and (high is None or value <= high)


def is_seconds(value: object, *, high: float | None = None, zero: bool = False) -> TypeGuard[float]:
    """A finite number of seconds, positive (or 0 with ``zero``), at most ``high``."""
    return is_positive(value, high=high, zero=zero)


def is_positive(
    value: object, *, high: float | None = None, zero: bool = False
) -> TypeGuard[float]:
    """A finite real number (not a ``bool``), above 0 (or 0 with ``zero``), at most ``high``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        return False
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        return False
    return high is None or number <= high


def is_text(value: object, *, limit: int) -> TypeGuard[str]:
    """A ``str`` of 1 to ``limit`` characters that every store holds as a column's value.

    For a key, an id, a name or a reason: no lone surrogate (UTF-8 has no bytes
    for one) and no NUL (PostgreSQL's text holds none, while SQLite stores and
    finds it), so a value one adapter would store or look up is one every
    adapter takes. Free text a message carries is ``is_message_text``.
    Asked through ``str``'s own methods: a subclass's ``__len__`` or ``encode`` may raise.
    """
    return is_message_text(value, limit=limit) and not str.__contains__(value, "\x00")


def is_message_text(value: object, *, limit: int) -> TypeGuard[str]:
    """A ``str`` of 1 to ``limit`` characters that encodes as UTF-8 (no lone surrogate).

    For free text (a user's input, injected context, instructions): the store
    keeps it inside JSON, where a NUL is an escape, so NUL is text like any other.
    """
    if not isinstance(value, str) or not 0 < str.__len__(value) <= limit:
        return False
    return is_encodable(value)


# A lone surrogate: what Python decodes a JSON "\\ud800" escape, or a byte read with
# ``errors="surrogateescape"``, to. UTF-8 has no bytes for one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_encodable(text: str) -> bool:
    """Whether ``text`` (a ``str``) encodes as UTF-8: it holds no lone surrogate.

    Cheap on the turn's hot path: ``isascii`` and ``encode`` run in C, and a
    valid pair (an emoji) is one character, never a surrogate, in a ``str``.
    """
    if str.isascii(text):
        return True
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encodable(text: str, *, smuggled_bytes: bool = False) -> str:
    """``text`` with every lone surrogate replaced, so it always encodes as UTF-8.

    For text from outside the Host's code that becomes a transcript message, a
    model's answer or a tool's result: a model's glitch or a tool's stray byte
    must not fail the turn, nor every later request of the session that would
    carry it again. The two halves of one character sent as two JSON escapes
    (``"\\ud83d\\udca9"``) are joined back into it; any other lone surrogate
    becomes U+FFFD. ``smuggled_bytes``: the text may hold bytes
    ``surrogateescape`` carried (a tool's output, a file name), each written as its
    ``\\xNN`` escape instead. NUL and other controls are kept: JSON, the store and
    the providers carry them.
    """
    if is_encodable(text):
        return text
    if smuggled_bytes:
        return _SURROGATE.sub(_byte_escape, text)
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub("\ufffd", joined)


def _byte_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def plain_text(value: object, *, limit: int) -> str | None:
    """``value`` as a plain ``str`` when ``is_text`` accepts it, else None.

    For a public method's text argument, before it is compared, hashed or quoted: a
    ``str`` subclass becomes a copy of its characters, so its own ``__eq__``,
    ``__hash__``, ``__str__`` or ``__repr__`` (which may raise) never runs in hostkit.
    """
    if not is_text(value, limit=limit):
        return None
    return str.__str__(value)


def is_names(value: object, *, limit: int, items: int) -> bool:
    """A collection (never a bare ``str``) of at most ``items`` texts (see ``is_text``)."""
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        return False
    return len(value) <= items and all(is_text(name, limit=limit) for name in value)


def storable(text: str) -> str:
    """``text`` with each lone surrogate replaced by ``?`` and each NUL by U+FFFD: for
    text hostkit must keep.

    A failure message or a summary comes from an exception, a platform or a
    model (a JSON ``"\\ud83d"`` or ``"\\u0000"`` escape decodes to one); refusing it
    would lose the record, and storing it as is fails in the database
    (PostgreSQL's text holds no NUL).
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if text.isascii():
        return text
    return text.encode("utf-8", "replace").decode("utf-8")
