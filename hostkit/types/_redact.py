"""Bounded, field-name-redacted views of free-form metadata."""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap, freeze
from hostkit.types._bounds import is_encodable

__all__ = [
    "PARTIAL_KEY",
    "PARTIAL_NOTE",
    "REDACTED",
    "bounded_data",
    "bounded_metadata",
    "check_route",
    "is_cut",
    "is_secret_field",
    "redact_secret_fields",
]

REDACTED = "[redacted]"
# The key an approval view carries when its arguments are cut to fit, and what it says.
PARTIAL_KEY = "partial"
PARTIAL_NOTE = (
    "not all of the arguments are shown: text or items are cut, or text is masked as secret-looking"
)
# Integers past 64 bits are kept as a short description, not their digits.
_MAX_INT = 2**63
# What ``bounded_data`` keeps by default: keys per level, levels, characters per string.
_MAX_KEYS, _MAX_DEPTH, _MAX_STRING = 32, 4, 512
_SECRET_FIELD = re.compile(
    r"(?i)(pass(word|wd)?|secret|token|api[_-]?key|authorization|cookie|credential|private[_-]?key|proof)"
)


# "tokens" names a count (``input_tokens``) as often as a credential list: a name
# whose only secret word is it keeps a plain integer value (a count), nothing else.
_TOKENS_WORD = re.compile(r"(?i)tokens")


# Field names repeat (every event, every turn): names up to this length have their
# answer cached, so a hostile stream of long or unique names cannot grow the cache.
_CACHED_NAME = 128


def is_secret_field(name: str) -> bool:
    """True when a field's name says its value must never be shown."""
    if len(name) <= _CACHED_NAME:
        return _secret_name(name)
    return bool(_SECRET_FIELD.search(name))


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    return bool(_SECRET_FIELD.search(name))


def _shown_secret_field(name: str, value: Any) -> bool:
    """True for a count under a secret-looking name: ``{"output_tokens": 12}`` is no secret."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return len(name) <= _CACHED_NAME and _count_name(name)


@functools.lru_cache(maxsize=4096)
def _count_name(name: str) -> bool:
    return bool(_TOKENS_WORD.search(name)) and not _SECRET_FIELD.search(_TOKENS_WORD.sub("", name))


def redact_secret_fields(value: Any) -> Any:
    """``value`` with every string under a secret-named key replaced by ``REDACTED``.

    Nothing else changes: sizes, numbers and other fields stay as they are, so
    a model's tool-call arguments can be kept in its transcript without the
    password it sent. Returns ``value`` itself when there is nothing to redact.
    """
    return _redact_fields(value, inside=False)


def _redact_fields(value: Any, *, inside: bool) -> Any:
    if isinstance(value, str):
        return REDACTED if inside else value
    if isinstance(value, Mapping):
        out = {
            key: _redact_fields(item, inside=inside or is_secret_field(str(key)))
            for key, item in value.items()
        }
        same = all(out[key] is item for key, item in value.items())
        return value if same else out
    if isinstance(value, list | tuple):
        items = [_redact_fields(item, inside=inside) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def bounded_metadata(
    value: Mapping[str, Any] | None,
    *,
    max_keys: int = _MAX_KEYS,
    max_depth: int = _MAX_DEPTH,
    max_string: int = _MAX_STRING,
) -> FrozenMap:
    """Freeze ``value`` after redacting secret-named fields and bounding its size.

    Metadata comes from transports and ends up in events and widgets; it is cut
    to ``max_keys`` keys per level, ``max_depth`` levels and ``max_string``
    characters per string so a hostile adapter cannot inflate it.
    """
    frozen: FrozenMap = freeze(bounded_data(value, max_keys, max_depth, max_string))
    return frozen


def bounded_data(
    value: Mapping[str, Any] | None,
    max_keys: int = _MAX_KEYS,
    max_depth: int = _MAX_DEPTH,
    max_string: int = _MAX_STRING,
) -> dict[str, Any]:
    """What ``bounded_metadata`` freezes, as plain JSON data (dicts, lists, scalars).

    For a value about to be encoded anyway (a stored event's detail), where
    freezing it only to thaw it again would double the work.
    """
    data: dict[str, Any] = _bound(value or {}, max_keys, max_depth, max_string, 0)
    return data


def _bound(value: Any, max_keys: int, max_depth: int, max_string: int, depth: int) -> Any:
    kind = type(value)
    if kind is float or kind is bool or value is None:
        return value  # the common exact types first: the isinstance chain costs more
    if kind is int and -_MAX_INT < value < _MAX_INT:
        return value
    if isinstance(value, str):
        return value if len(value) <= max_string else value[: max_string - 1] + "…"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _MAX_INT:
        # Its digits alone could be megabytes (and str() refuses past 4,300 of them).
        return f"[integer of {value.bit_length()} bits]"
    if isinstance(value, int | float | bool) or value is None:
        return value
    if depth >= max_depth:
        return "[truncated]"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= max_keys:
                out["…"] = f"{len(value) - max_keys} more keys"
                break
            name = str(key)[:max_string]
            out[name] = (
                REDACTED
                if is_secret_field(name) and not _shown_secret_field(name, item)
                else _bound(item, max_keys, max_depth, max_string, depth + 1)
            )
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        kept = [
            _bound(item, max_keys, max_depth, max_string, depth + 1) for item in items[:max_keys]
        ]
        if len(items) > max_keys:
            # Said, never silent: an approver reading 32 items must know a 33rd exists.
            kept.append(f"… {len(items) - max_keys} more items")
        return kept
    return _bound(repr(value), max_keys, max_depth, max_string, depth)


def check_route(value: Any, *, error: type[InvalidValue] = InvalidValue) -> None:
    """Refuse (``error``, naming the field) a reply route no store can read back (None
    is no route).

    A route is kept as JSON text that the databases' own JSON functions read when
    deliveries are claimed: PostgreSQL refuses the whole document for one NUL or
    lone surrogate escape, SQLite for a ``NaN``; one such route failed every claim,
    the healthy intents of every session with it. ``bounded_data`` keeps those as
    they are and writes an integer past 64 bits as a description (another address),
    so a route holding any of them is refused instead. Walks what ``bounded_data``
    keeps, with the same bounds.
    """
    if value is not None and not isinstance(value, Mapping):
        raise error("route must be a mapping or None")
    problem = _route_problem(value)
    if problem is not None:
        raise error(f"route holds {problem}, which no store can read back")


def _route_problem(
    value: Any, max_keys: int = _MAX_KEYS, max_depth: int = _MAX_DEPTH
) -> str | None:
    """What in ``value`` no store can read back, in a few words; None when nothing."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if str.__contains__(value, "\x00"):
            return "a NUL character"
        return None if is_encodable(value) else "a lone surrogate (undecodable bytes)"
    if isinstance(value, int):
        return None if -_MAX_INT < value < _MAX_INT else "an integer past 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else "a number that is not finite"
    if max_depth <= 0:
        return None  # kept as "[truncated]"
    if isinstance(value, Mapping):
        pairs = itertools.islice(value.items(), max_keys)
        items: list[Any] = [part for key, item in pairs for part in (str(key), item)]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(itertools.islice(value, max_keys))
    else:
        return _route_problem(repr(value), max_keys, max_depth)
    for item in items:
        problem = _route_problem(item, max_keys, max_depth - 1)
        if problem is not None:
            return problem
    return None


def is_cut(
    value: Any,
    max_keys: int = _MAX_KEYS,
    max_depth: int = _MAX_DEPTH,
    max_string: int = _MAX_STRING,
) -> bool:
    """Whether ``bounded_data`` with these bounds would leave part of ``value`` out."""
    if isinstance(value, str):
        return len(value) > max_string
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) >= _MAX_INT
    if isinstance(value, float | bool) or value is None:
        return False
    if max_depth <= 0:
        return True
    if isinstance(value, Mapping):
        items: list[Any] = [*value.keys(), *value.values()]
        if len(value) > max_keys:
            return True
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if len(items) > max_keys:
            return True
    else:
        return is_cut(repr(value), max_keys, max_depth, max_string)
    return any(is_cut(item, max_keys, max_depth - 1, max_string) for item in items)
