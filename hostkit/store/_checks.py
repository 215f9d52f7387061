"""Argument checks shared by the store's queue groups (inbox, delivery), so all refuse alike.

Each raises ``InvalidValue`` before any state is read or changed. An adapter
of either group (SQLite, in-memory, later PostgreSQL) calls these same
functions, so an argument one adapter refuses is refused by every adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

from hostkit.errors import InvalidValue
from hostkit.types import finite_seconds, is_count, is_text

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_CLAIM_OWNERS",
    "MAX_CURSOR",
    "MAX_REASON",
    "UNSTORABLE_TEXT",
    "check_count",
    "check_cursor",
    "check_duration",
    "check_finite",
    "check_instant",
    "check_owner_page",
    "check_owners",
    "check_reason",
    "check_ref",
    "check_refs",
    "check_wait",
]

# An audit reason's length (as hostkit.store.MAX_REASON).
MAX_REASON = 500
# The longest id, token, owner or source id the adapters store (as the SQLite columns).
_MAX_REF = 256
# What a store call raises (InvalidValue) when text it was given holds a lone surrogate
# (undecodable bytes, e.g. from a command line): no database can store it, and the
# engine's own UnicodeEncodeError would name neither the value nor the caller's fault.
UNSTORABLE_TEXT = "text with a lone surrogate (undecodable bytes) cannot be stored"
# Owners one claimed_owners page lists, and one expire_claims call names (both groups).
MAX_CLAIM_OWNERS = 100
# No policy allows more attempts than this (RetryPolicy.max_attempts, delivery's too).
MAX_ATTEMPTS = 100
# The largest row id or sequence number a 64-bit column (SQLite INTEGER, PostgreSQL
# BIGINT) holds: SQLite cannot bind a larger int at all, PostgreSQL compares it as numeric.
MAX_CURSOR = 2**63 - 1


def check_finite(name: str, value: object) -> float:
    """A time in seconds that may lie before the epoch (a retention cut-off)."""
    return finite_seconds(name, value)


def check_instant(name: str, value: object) -> float:
    """A wall-clock time in seconds: finite and not negative."""
    seconds = check_finite(name, value)
    if seconds < 0:
        raise InvalidValue(f"{name} must not be negative")
    return seconds


def check_duration(name: str, value: object) -> float:
    """A length of time in seconds: finite and positive."""
    seconds = check_finite(name, value)
    if seconds <= 0:
        raise InvalidValue(f"{name} must be positive")
    return seconds


def check_wait(name: str, value: object) -> float:
    """How long something may wait, in seconds: finite, 0 (not at all) or more."""
    seconds = check_finite(name, value)
    if seconds < 0:
        raise InvalidValue(f"{name} must not be negative")
    return seconds


def check_count(name: str, value: object, high: int | None = None) -> int:
    """An integer from 1 to ``high`` (no upper bound when ``high`` is None)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(f"{name} must be an integer")
    if not is_count(value, high=high):
        raise InvalidValue(
            f"{name} must be a positive integer"
            if high is None
            else f"{name} must be between 1 and {high}"
        )
    return value


def check_cursor(name: str, value: object) -> int:
    """A row id or sequence number to list after: an integer from 0 to ``MAX_CURSOR``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CURSOR:
        raise InvalidValue(f"{name} must be an integer from 0 to {MAX_CURSOR}")
    return value


def check_ref(name: str, value: object) -> str:
    """An id, token or owner text: non-empty, bounded, storable (no NUL, no lone surrogate)."""
    if not is_text(value, limit=_MAX_REF):
        raise InvalidValue(
            f"{name} must be a non-empty string of at most {_MAX_REF} characters of valid text"
        )
    return str.__str__(value)  # a plain copy: a subclass's own __str__ never runs


def check_reason(value: object, action: str = "a requeue") -> str:
    """An audit reason: non-empty text of at most ``MAX_REASON`` characters, stripped."""
    if not is_text(value, limit=MAX_REASON) or not str(value).strip():
        raise InvalidValue(f"{action} needs a reason of 1 to {MAX_REASON} characters of valid text")
    return str(value).strip()


def check_owner_page(after: object, limit: object) -> tuple[str | None, int]:
    """The page of ``claimed_owners``: an optional owner to list after, and a limit."""
    return (
        None if after is None else check_ref("after", after),
        check_count("limit", limit, MAX_CLAIM_OWNERS),
    )


def check_owners(owners: object) -> tuple[str, ...]:
    """The owners of ``expire_claims``: 1..``MAX_CLAIM_OWNERS`` owner texts."""
    return check_refs("owners", owners, MAX_CLAIM_OWNERS, each="owner", kind="owner texts")


def check_refs(field: str, values: object, limit: int, *, each: str, kind: str) -> tuple[str, ...]:
    """``field``: 1..``limit`` texts of ``kind``, each checked as ``each``, once each
    (in their order)."""
    if not isinstance(values, Sequence) or isinstance(values, str | bytes):
        raise InvalidValue(f"{field} must be a sequence of {kind}")
    named = tuple(values)
    if not 1 <= len(named) <= limit:
        raise InvalidValue(f"name 1 to {limit} {field.replace('_', ' ')}")
    return tuple(dict.fromkeys(check_ref(each, value) for value in named))
