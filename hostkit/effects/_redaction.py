"""Secret redaction: every spelling of a secret value, in text and in structured results.

A value rarely leaves a tool exactly as it was bound. JSON encoding escapes
quotes, backslashes, control and non-ASCII characters; ``repr`` doubles
backslashes and may escape quotes; ``bounded()`` flattens line breaks; a PEM
key is printed again line by line, with other line endings. So a secret is
matched in every such spelling (``spellings``): the value, each of its lines,
its flattened and re-joined forms, and the JSON- and repr-escaped forms of
each of those (one and two levels deep). Lines shorter than
``MIN_SECRET_CHARS`` cannot be matched without mangling ordinary text, so a
short line printed on its own is not caught: keep secrets free of short lines
(a PEM body's last line is the usual case; the whole key is still caught).

Matches are found on the original text and their union is masked at once,
so two overlapping secrets never leave part of either behind. Structured
results are redacted leaf by leaf (and key by key) before anything encodes
them, and lone surrogates are made safe so a later UTF-8 encode never fails.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any

from hostkit.types import REDACTED, is_secret_field

__all__ = ["MIN_SECRET_CHARS", "Redactor", "derived_secrets", "safe_text"]

# Shorter values cannot be redacted exactly without mangling ordinary text.
MIN_SECRET_CHARS = 6
# How many values secret-named fields may add to one result's secret set, and how deep
# a structure is searched for them: a hostile output cannot make redaction unbounded.
MAX_DERIVED_SECRETS = 64
_MAX_DEPTH = 32
# An int wider than this is shown by its size: str() of a huge int is slow, and refused.
_MAX_INT_BITS = 4_096
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CUT = "…"


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced, so it always encodes as UTF-8.

    A byte that ``surrogateescape`` smuggled in (``\\udcff``) becomes its
    ``\\xff`` escape; any other lone surrogate becomes U+FFFD.
    """
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_surrogate_escape, text)


def _surrogate_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def spellings(value: str) -> set[str]:
    """Every form of ``value`` a redactor looks for (only those long enough to match)."""
    units = {value}
    lines = _LINE_BREAK.split(value)
    if len(lines) > 1:
        units.update(lines)
        units.update(line.strip() for line in lines)
        units.update(sep.join(lines) for sep in ("\n", "\r\n", " ", ""))
        units.update(sep.join(line.strip() for line in lines) for sep in ("\n", "\r\n", " ", ""))
        # bounded() turns each of \r and \n into a space.
        units.add(value.replace("\r", " ").replace("\n", " "))
    forms: set[str] = set()
    for unit in units:
        first = _escaped(unit)
        forms.update(first)
        for once in first:
            forms.update(_escaped(once))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def _escaped(unit: str) -> set[str]:
    """``unit`` as it appears inside a JSON string and inside either quoting of a repr."""
    return {
        unit,
        json.dumps(unit)[1:-1],
        json.dumps(unit, ensure_ascii=False)[1:-1],
        # The extra quote forces each quoting: repr escapes ' only inside '...'.
        repr(unit + '"')[1:-2],
        repr(unit + "'")[1:-2],
        ascii(unit + '"')[1:-2],
        ascii(unit + "'")[1:-2],
    }


@dataclass(frozen=True, slots=True)
class Redactor:
    """Masks every spelling of a set of secret values.

    ``needles`` pairs each spelling with its replacement: ``[redacted:NAME]``
    for a bound secret (NAME is a validated environment name) and
    ``[redacted]`` for a value derived from a secret-named field, whose name
    is tool-chosen text and so never repeated.
    """

    needles: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, bound: Mapping[str, str], derived: Iterable[str] = ()) -> Redactor:
        """A redactor for bound secrets (name -> value) and derived values."""
        labels: dict[str, str] = {}
        for value in derived:
            for form in spellings(value):
                labels.setdefault(form, REDACTED)
        for name, value in bound.items():
            if value:
                for form in spellings(value):
                    labels[form] = f"[redacted:{name}]"
        ordered = sorted(labels.items(), key=lambda item: (-len(item[0]), item[0]))
        return cls(tuple(ordered))

    def __bool__(self) -> bool:
        return bool(self.needles)

    def merged(self, other: Redactor) -> Redactor:
        """One redactor for both sets (bound labels win)."""
        labels = dict(other.needles)
        labels.update(self.needles)
        return Redactor(tuple(sorted(labels.items(), key=lambda item: (-len(item[0]), item[0]))))

    def text(self, text: str, *, limit: int | None = None) -> str:
        """``text`` with every spelling masked; read only to ``limit`` characters if given.

        With ``limit``, a spelling cut at the limit is masked too (the part of it
        that is left), and the result ends with ``…``: a cut never leaves a
        secret's beginning behind.
        """
        cut = limit is not None and len(text) > limit
        if cut:
            assert limit is not None
            text = text[:limit]
        if not self.needles:
            return text + _CUT if cut else text
        spans = list(self._spans(text))
        if cut:
            spans.extend(self._tail_spans(text))
        return _mask(text, spans) + (_CUT if cut else "")

    def leaked(self, text: str) -> bool:
        """True when ``text`` still holds a spelling of a secret."""
        return any(needle in text for needle, _ in self.needles)

    def value(self, value: Any) -> Any:
        """A JSON-ready copy of ``value`` with every string leaf and key redacted and made safe."""
        return self._value(value, 0)

    def _value(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return safe_text(self.text(value))
        if value is None or isinstance(value, bool | float):
            return value
        if isinstance(value, int):
            if value.bit_length() > _MAX_INT_BITS:
                return f"[an integer of {value.bit_length()} bits]"
            return value
        if depth >= _MAX_DEPTH:
            return "[truncated]"
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = self._value(key if isinstance(key, str) else _text_of(key), depth + 1)
                unique, copy = name, 1
                while unique in out:  # two keys that redact alike both stay
                    copy += 1
                    unique = f"{name} ({copy})"
                out[unique] = self._value(item, depth + 1)
            return out
        if isinstance(value, list | tuple | Set):
            return [self._value(item, depth + 1) for item in value]
        return self._value(_text_of(value), depth)

    def _spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        for needle, label in self.needles:
            start = text.find(needle)
            while start >= 0:
                yield start, start + len(needle), label
                start = text.find(needle, start + 1)

    def _tail_spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        """The longest beginning of a spelling that the text ends with, for each spelling."""
        for needle, label in self.needles:
            for size in range(min(len(needle) - 1, len(text)), 0, -1):
                if text.endswith(needle[:size]):
                    yield len(text) - size, len(text), label
                    break


def _mask(text: str, spans: list[tuple[int, int, str]]) -> str:
    """Replace the union of ``spans``; a merged run takes its first (longest) label."""
    if not spans:
        return text
    spans.sort(key=lambda span: (span[0], -span[1]))
    parts: list[str] = []
    position = 0
    run_start, run_end, run_label = spans[0]
    for start, end, label in spans[1:]:
        if start <= run_end:
            run_end = max(run_end, end)
            continue
        parts.extend((text[position:run_start], run_label))
        position = run_end
        run_start, run_end, run_label = start, end, label
    parts.extend((text[position:run_start], run_label, text[run_end:]))
    return "".join(parts)


def _text_of(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def derived_secrets(*sources: Any) -> list[str]:
    """Values of secret-named fields (``is_secret_field``) anywhere in ``sources``.

    Every string under such a field counts, if it is long enough to redact
    safely; at most ``MAX_DERIVED_SECRETS`` values, searched ``_MAX_DEPTH`` deep.
    """
    found: dict[str, None] = {}
    for source in sources:
        _collect(source, False, found, 0)
    return list(found)[:MAX_DERIVED_SECRETS]


def _collect(value: Any, secret: bool, found: dict[str, None], depth: int) -> None:
    if len(found) >= MAX_DERIVED_SECRETS or depth >= _MAX_DEPTH:
        return
    if isinstance(value, str):
        if secret and len(value) >= MIN_SECRET_CHARS:
            found[value] = None
    elif isinstance(value, Mapping):
        for key, item in value.items():
            named = secret or (isinstance(key, str) and is_secret_field(key))
            _collect(item, named, found, depth + 1)
    elif isinstance(value, list | tuple | Set):
        for item in value:
            _collect(item, secret, found, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            named = secret or is_secret_field(field.name)
            _collect(getattr(value, field.name, None), named, found, depth + 1)
