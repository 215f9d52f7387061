"""Secret redaction: every spelling of a secret value, its fragments, in text and structures.

A value rarely leaves a tool exactly as it was bound. JSON encoding escapes
quotes, backslashes, control and non-ASCII characters; ``repr`` doubles
backslashes and may escape quotes; ``repr`` of bytes shows non-ASCII as
``\\xNN``; ``bounded()`` flattens line breaks; a PEM key is printed again
line by line, with other line endings. So a secret is matched in every such
spelling (``spellings``): the value, each of its lines, its flattened and
re-joined forms, and the JSON- and repr-escaped forms of each of those (one
and two levels deep). JSON is also matched as HTML-safe encoders write it
(Go's ``encoding/json``: ``&``, ``<``, ``>`` as ``\\u0026``, ``\\u003c``,
``\\u003e``), and the whole value as a URL carries it (percent-encoded
with and without ``/`` kept, form-encoded with ``+`` for a space, hex in
either case): HTTP clients print the URL of a failed request that way.
Lines shorter than ``MIN_SECRET_CHARS`` cannot be
matched without mangling ordinary text, so a short line printed on its own
is not caught: keep secrets free of short lines (a PEM body's last line is
the usual case; the whole key is still caught).

A value may also leave in pieces: split across output chunks, half on stdout
and half on stderr, cut at a view's edge. So any run of ``FRAGMENT_CHARS``
(8) or more characters that is a piece of a spelling is masked too, found in
linear time from an index of the spellings' 8-grams (``_Index``). A value
printed in pieces shorter than that (alternating single characters on two
streams, say) cannot be told from ordinary text and is not caught.

Matches are found on the original text and their union is masked at once,
so two overlapping secrets never leave part of either behind. Structured
results are redacted leaf by leaf (and key by key) before anything encodes
them, bytes are decoded as UTF-8 first, and lone surrogates are made safe so
a later UTF-8 encode never fails. The search for secret-named fields
(``derived_secrets``) never stops silently: a structure too deep, or with
too many or too long such values, raises ``RedactionLimit`` and the result
fails closed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from hostkit.types import REDACTED, encodable, is_secret_field

__all__ = [
    "FRAGMENT_CHARS",
    "MAX_DERIVED_SECRETS",
    "MAX_DERIVED_SECRET_CHARS",
    "MIN_SECRET_CHARS",
    "HeldSpellings",
    "RedactionLimit",
    "Redactor",
    "derived_secrets",
    "safe_text",
]

# Shorter values cannot be redacted exactly without mangling ordinary text.
MIN_SECRET_CHARS = 6
# A run of this many characters of a secret is masked wherever it appears on its own.
FRAGMENT_CHARS = 8
# The prefilter looks at every _QUAD-th position for one of the spellings' 4-grams: any
# run of FRAGMENT_CHARS holds one such aligned 4-gram, so no fragment is skipped.
_QUAD = 4
_MAX_REMEMBERED = 4_096
# What one owner's HeldSpellings keeps: the held sets its calls use (one per agent and MCP
# server, about) and the names in them. Past these the oldest go.
_MAX_HELD_SETS = 32
_MAX_HELD_NAMES = 256
# How many values secret-named fields may add to one result's secret set, and how deep
# a structure is searched for them: a hostile output cannot make redaction unbounded.
MAX_DERIVED_SECRETS = 64
_MAX_DEPTH = 32
# And how long they may be, each and together. A redactor looks for some two hundred
# spellings of a value (its lines, joined and escaped) and indexes their 8-grams, so a
# hostile megabyte under a field named "token" cost half a minute of the event loop and
# half a gigabyte. A credential is far shorter (a PEM private key: 3.3 KB).
MAX_DERIVED_SECRET_CHARS = 8_192
_MAX_DERIVED_TOTAL_CHARS = 16_384
# An int wider than this is shown by its size: str() of a huge int is slow, and refused.
_MAX_INT_BITS = 4_096
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
_URL_SAFE = re.compile(r"[A-Za-z0-9_.~-]*")  # what no percent-encoding changes
# What HTML-safe JSON encoders (Go's encoding/json, json_encode with JSON_HEX_*) escape
# besides what json.dumps does; U+2028/9 only matter where non-ASCII is kept.
_HTML_SAFE = str.maketrans(
    {"&": "\\u0026", "<": "\\u003c", ">": "\\u003e", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_HTML_UNSAFE = re.compile("[&<>\u2028\u2029]")
_CUT = "…"
_BYTES = (bytes, bytearray, memoryview)
# Walked for secret-named fields through their __dict__: never these (code, not data).
_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)


class RedactionLimit(ValueError):
    """A structure too deep, or with too many secret-named values, to search safely."""


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced (``hostkit.types.encodable``): a tool's
    output or a file name may carry undecodable bytes, each written as its ``\\xNN``."""
    return encodable(text, smuggled_bytes=True)


def _decoded(value: bytes | bytearray | memoryview) -> str:
    """Bytes as the text they hold (undecodable bytes kept as surrogates, made safe later)."""
    return bytes(value).decode("utf-8", "surrogateescape")


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
    first: set[str] = set()
    forms: set[str] = set()
    for unit in units:
        first.update(_escaped(unit), _bytes_escaped(unit))
        forms.update(_html_safe(unit))
    forms.update(first)
    for once in first:  # each distinct form escaped once more (units share many)
        forms.update(_escaped(once))
    # A URL carries the value whole (a line break as %0A): its lines are not looked for
    # encoded on their own. ASCII letters, digits and "%+/-._~": no escaping changes it.
    forms.update(_percent_encoded(value))
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


def _html_safe(unit: str) -> set[str]:
    """``unit`` inside a JSON string as HTML-safe encoders write it (Go's encoding/json),
    and that inside a JSON string again.

    Not every escape of it (``_escaped``): a hostile derived value with ``&``
    in each line would cost a third more spellings, for a doubly escaped
    Go-style string that the 8-character pieces between its escapes mostly
    catch anyway.
    """
    if not _HTML_UNSAFE.search(unit):
        return set()  # the same as plain JSON
    once = {
        json.dumps(unit)[1:-1].translate(_HTML_SAFE),
        json.dumps(unit, ensure_ascii=False)[1:-1].translate(_HTML_SAFE),
    }
    return once | {json.dumps(form, ensure_ascii=False)[1:-1] for form in once}


def _percent_encoded(unit: str) -> set[str]:
    """``unit`` in a URL path or query as HTTP clients print it: ``quote`` with and
    without ``/`` kept, ``quote_plus`` (form encoding, ``urlencode``), hex in either case.

    Bytes a lone surrogate stands for are encoded as the bytes they were.
    """
    if _URL_SAFE.fullmatch(unit):
        return set()  # nothing to encode: the same as the value
    options = {"encoding": "utf-8", "errors": "surrogateescape"}
    upper = {
        urllib.parse.quote(unit, safe="", **options),
        urllib.parse.quote(unit, safe="/", **options),
        urllib.parse.quote_plus(unit, safe="", **options),
    }
    return upper | {_PERCENT_HEX.sub(lambda hit: hit.group().lower(), form) for form in upper}


def _bytes_escaped(unit: str) -> set[str]:
    """``unit`` inside the repr of its UTF-8 bytes (``p\\xc3\\xa4ss``), as ``str(b"…")`` has it."""
    if unit.isascii():
        return set()  # the same as its str repr
    raw = unit.encode("utf-8", "surrogateescape")
    return {repr(raw + b'"')[2:-2], repr(raw + b"'")[2:-2]}


@dataclass(frozen=True, slots=True)
class _Index:
    """Where a redactor looks: whole spellings, and the 8-grams (and 4-grams) of each."""

    needles: tuple[tuple[str, str], ...]
    grams: types.MappingProxyType[str, str]
    quads: frozenset[str]
    # Spelling -> replacement, as ``needles`` has them: what a derived value may add to.
    labels: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))


def _index(labels: Mapping[str, str]) -> _Index:
    """The index for spelling -> label; a bound secret's label wins a shared 8-gram."""
    grams: dict[str, str] = {}
    for needle, label in sorted(labels.items()):
        for start in range(len(needle) - FRAGMENT_CHARS + 1):
            gram = needle[start : start + FRAGMENT_CHARS]
            if label != REDACTED or gram not in grams:
                grams[gram] = label
    ordered = tuple(sorted(labels.items(), key=_longest_first))
    return _Index(ordered, types.MappingProxyType(grams), _quads(grams), _frozen(labels))


def _extended(base: _Index, derived: Mapping[str, str]) -> _Index:
    """``base`` plus spellings of derived values that no bound secret has (all ``REDACTED``).

    The same index ``_index`` builds from both sets at once: a derived value's
    8-gram is labelled only where no bound spelling holds it.
    """
    if not derived:
        return base
    grams = base.grams.copy()  # the dict's own copy: dict(proxy) goes item by item, 8x slower
    added: list[str] = []
    for needle in derived:
        for start in range(len(needle) - FRAGMENT_CHARS + 1):
            gram = needle[start : start + FRAGMENT_CHARS]
            if gram not in grams:
                grams[gram] = REDACTED
                added.append(gram)
    ordered = tuple(sorted((*base.needles, *derived.items()), key=_longest_first))
    labels = _frozen({**base.labels, **derived})
    return _Index(ordered, types.MappingProxyType(grams), base.quads | _quads(added), labels)


def _quads(grams: Iterable[str]) -> frozenset[str]:
    return frozenset(gram[i : i + _QUAD] for gram in grams for i in range(_QUAD + 1))


def _longest_first(item: tuple[str, str]) -> tuple[int, str]:
    return -len(item[0]), item[0]


def _frozen(labels: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(labels))


def _bound_labels(
    bound: Iterable[tuple[str, str]], spelled: Callable[[str, str], Iterable[str]]
) -> dict[str, str]:
    """Spelling -> ``[redacted:NAME]`` for (name, value) pairs; a later name wins a spelling."""
    labels: dict[str, str] = {}
    for name, value in bound:
        for form in spelled(name, value):
            labels[form] = f"[redacted:{name}]"
    return labels


_EMPTY = _index({})


class HeldSpellings:
    """The spellings of held secrets and their index, kept by the one owner of those values.

    Every tool call builds several redactors from the same held values, and
    their spellings and 8-gram index cost milliseconds (a PEM key's lines,
    escaped twice). A process-wide cache kept the values of every Host, closed
    or not, for any other to reach; so each generation's ``EffectRuntime`` owns
    one and ``close``s it with the generation (a replaced configuration, a
    closed Host), and two Hosts never share one. A name whose value changed
    (a rotated secret) drops its old value's spellings and every index built
    with them at once. Derived values (tool-chosen) are never kept.
    """

    def __init__(self) -> None:
        # name -> (value, its spellings); every kept index was built from these pairs.
        self._spellings: dict[str, tuple[str, frozenset[str]]] = {}
        self._indexes: dict[tuple[tuple[str, str], ...], _Index] = {}
        self._closed = False

    def index(self, bound: Mapping[str, str]) -> _Index:
        """The index of ``bound`` (name -> value), built once while its values stay."""
        key = tuple((name, value) for name, value in bound.items() if value)
        if not key:
            return _EMPTY
        found = self._indexes.pop(key, None)
        if found is None:
            found = _index(_bound_labels(key, self._spelled))
        if not self._closed:
            self._indexes[key] = found  # most recently used last
            while len(self._indexes) > _MAX_HELD_SETS:
                del self._indexes[next(iter(self._indexes))]
        return found

    def holds(self, value: str) -> bool:
        """Whether anything kept here was made from ``value`` (its spellings, an index)."""
        return any(kept == value for kept, _ in self._spellings.values()) or any(
            value == held for key in self._indexes for _, held in key
        )

    def __len__(self) -> int:
        """How many values' spellings and indexes are kept."""
        return len(self._spellings) + len(self._indexes)

    def close(self) -> None:
        """Forget every value; later redactors are built without keeping anything."""
        self._closed = True
        self._spellings.clear()
        self._indexes.clear()

    def _spelled(self, name: str, value: str) -> frozenset[str]:
        kept = self._spellings.get(name)
        if kept is not None and kept[0] == value:
            return kept[1]
        forms = frozenset(spellings(value))
        if kept is not None:
            self._forget(name)  # rotated: the old value goes now, not at eviction
        if not self._closed:
            self._spellings[name] = (value, forms)
            while len(self._spellings) > _MAX_HELD_NAMES:
                self._forget(next(iter(self._spellings)))
        return forms

    def _forget(self, name: str) -> None:
        self._spellings.pop(name, None)
        for key in [key for key in self._indexes if any(held == name for held, _ in key)]:
            del self._indexes[key]


@dataclass(frozen=True, slots=True)
class Redactor:
    """Masks every spelling of a set of secret values, and every 8+ character piece of one.

    Each spelling has a replacement: ``[redacted:NAME]`` for a bound or held
    secret (NAME is a validated environment name) and ``[redacted]`` for a
    value derived from a secret-named field, whose name is tool-chosen text
    and so never repeated.
    """

    index: _Index = field(default=_EMPTY)

    @classmethod
    def of(
        cls,
        bound: Mapping[str, str],
        derived: Iterable[str] = (),
        *,
        held: HeldSpellings | None = None,
    ) -> Redactor:
        """A redactor for bound secrets (name -> value) and derived values.

        With ``held``, the bound values' spellings and index are taken from (and
        kept in) that owner's cache; without it they are computed for this call.
        """
        if held is not None:
            base = held.index(bound)
        else:
            pairs = ((name, value) for name, value in bound.items() if value)
            base = _index(_bound_labels(pairs, lambda _, value: spellings(value)))
        extra: dict[str, str] = {}
        for value in derived:
            for form in spellings(value):
                if form not in base.labels:
                    extra[form] = REDACTED
        return cls(_extended(base, extra))

    @property
    def needles(self) -> tuple[tuple[str, str], ...]:
        """Every whole spelling with its replacement, longest first."""
        return self.index.needles

    @property
    def reach(self) -> int:
        """The longest spelling's length: the context a window needs on each side (``window``)."""
        return len(self.index.needles[0][0]) if self.index.needles else 0

    def __bool__(self) -> bool:
        return bool(self.index.needles)

    def text(self, text: str, *, limit: int | None = None) -> str:
        """``text`` with every spelling and fragment masked; read only to ``limit`` if given.

        With ``limit``, a spelling cut at the limit is masked too (the part of it
        that is left), and the result ends with ``…``: a cut never leaves a
        secret's beginning behind.
        """
        cut = limit is not None and len(text) > limit
        if cut:
            assert limit is not None
            text = text[:limit]
        if not self.index.needles:
            return text + _CUT if cut else text
        spans = [*self._spans(text), *self._fragment_spans(text)]
        if cut:
            spans.extend(self._tail_spans(text))
        return _mask(text, spans) + (_CUT if cut else "")

    def window(self, text: str, start: int, end: int) -> str:
        """``text[start:end]`` with every spelling or fragment that overlaps it masked.

        Matches are found in all of ``text``, so a window whose edges a caller
        chose (a file read at an offset) cannot cut a secret into pieces too
        short to recognise: with ``reach`` characters of context on each side,
        any part of a secret inside the window is masked.
        """
        piece = text[start:end]
        if not self.index.needles:
            return piece
        spans = [
            (max(low, start) - start, min(high, end) - start, label)
            for low, high, label in (*self._spans(text), *self._fragment_spans(text))
            if low < end and high > start
        ]
        return _mask(piece, spans)

    def leaked(self, text: str) -> bool:
        """True when ``text`` still holds a spelling of a secret, or a fragment of one."""
        if any(needle in text for needle, _ in self.index.needles):
            return True
        return next(self._fragment_spans(text), None) is not None

    def value(self, value: Any) -> Any:
        """A JSON-ready copy of ``value`` with every string leaf and key redacted and made safe.

        Bytes are decoded as UTF-8 first (undecodable bytes become ``\\xNN``).
        """
        return self._value(value, 0)

    def _value(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return safe_text(self.text(value))
        if isinstance(value, _BYTES):
            return self._value(_decoded(value), depth)
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
                text = key if isinstance(key, (str, *_BYTES)) else _text_of(key)
                name = self._value(text, depth + 1)
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
        for needle, label in self.index.needles:
            start = text.find(needle)
            while start >= 0:
                yield start, start + len(needle), label
                start = text.find(needle, start + 1)

    def _fragment_spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        """Every window of FRAGMENT_CHARS that is a piece of a spelling (their union masks
        exactly the runs of 8+ characters that are pieces of one).

        Only every _QUAD-th position is looked up in the 4-gram set; a hit there
        checks the few windows that could hold it, remembered by their text so a
        repetitive output (a line of dashes and a PEM key) costs one lookup per
        hit. Linear in ``len(text)``.
        """
        grams, quads = self.index.grams, self.index.quads
        last = len(text) - FRAGMENT_CHARS
        checked = -1
        seen: dict[str, tuple[tuple[int, str], ...]] = {}
        for aligned in range(0, len(text) - _QUAD + 1, _QUAD):
            if text[aligned : aligned + _QUAD] not in quads:
                continue
            low, high = max(aligned - _QUAD, checked + 1), min(aligned, last)
            if low > high:
                continue
            around = text[low : high + FRAGMENT_CHARS]
            hits = seen.get(around)
            if hits is None:
                hits = tuple(
                    (offset, label)
                    for offset in range(high - low + 1)
                    if (label := grams.get(around[offset : offset + FRAGMENT_CHARS])) is not None
                )
                if len(seen) < _MAX_REMEMBERED:
                    seen[around] = hits
            for offset, label in hits:
                yield low + offset, low + offset + FRAGMENT_CHARS, label
            checked = high

    def _tail_spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        """The longest beginning of a spelling that the text ends with, for each spelling."""
        for needle, label in self.index.needles:
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

    Every string (or bytes) under such a field counts, if it is long enough to
    redact safely. Mappings, sequences, sets, named tuples, dataclasses,
    pydantic models and objects' ``__dict__`` are walked. Raises
    ``RedactionLimit`` past ``MAX_DERIVED_SECRETS`` values, a value longer than
    ``MAX_DERIVED_SECRET_CHARS`` (or all of them longer than twice that) or
    ``_MAX_DEPTH`` levels: stopping there would leave later values unredacted.
    """
    walk = _Walk()
    for source in sources:
        walk.collect(source, False, 0)
    return list(walk.found)


class _Walk:
    """One search for secret-named fields; each container is visited once per flag."""

    def __init__(self) -> None:
        self.found: dict[str, None] = {}
        self.chars = 0  # of every value found
        # Keeps every visited container alive, so a temporary (a model_dump) cannot free
        # its id for another object that would then be skipped.
        self.seen: dict[tuple[int, bool], Any] = {}

    def collect(self, value: Any, secret: bool, depth: int) -> None:
        if isinstance(value, str):
            if secret and len(value) >= MIN_SECRET_CHARS and value not in self.found:
                if len(self.found) >= MAX_DERIVED_SECRETS:
                    raise RedactionLimit(f"more than {MAX_DERIVED_SECRETS} secret-named values")
                if len(value) > MAX_DERIVED_SECRET_CHARS:
                    raise RedactionLimit(
                        f"a secret-named value longer than {MAX_DERIVED_SECRET_CHARS} characters"
                    )
                self.chars += len(value)
                if self.chars > _MAX_DERIVED_TOTAL_CHARS:
                    raise RedactionLimit(
                        f"secret-named values longer than {_MAX_DERIVED_TOTAL_CHARS} "
                        "characters in all"
                    )
                self.found[value] = None
            return
        if isinstance(value, _BYTES):
            if secret:
                self.collect(_decoded(value), secret, depth)
            return
        children = _children(value)
        if children is None:
            return
        if depth >= _MAX_DEPTH:
            raise RedactionLimit(f"a structure deeper than {_MAX_DEPTH} levels")
        key = (id(value), secret)
        if key in self.seen:
            return
        self.seen[key] = value
        for name, item in children:
            named = secret or (name is not None and is_secret_field(name))
            self.collect(item, named, depth + 1)


def _children(value: Any) -> Iterable[tuple[str | None, Any]] | None:
    """(field name or None, item) for each part of ``value``; None for a leaf."""
    if value is None or isinstance(value, (bool, int, float, complex, *_OPAQUE)):
        return None
    if isinstance(value, Mapping):
        return [(key if isinstance(key, str) else None, item) for key, item in value.items()]
    as_dict = getattr(value, "_asdict", None)
    if isinstance(value, tuple) and callable(as_dict):
        return list(as_dict().items())  # a namedtuple: its field names count
    if isinstance(value, list | tuple | Set):
        return [(None, item) for item in value]
    if isinstance(value, BaseModel):
        return list(value.model_dump().items())
    if dataclasses.is_dataclass(value):
        return [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, Mapping):
        return list(attributes.items())
    return None
