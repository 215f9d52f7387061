"""The argument checks every ``InboxStore`` adapter applies, so all refuse alike.

An embedder's tests run against the in-memory inbox; if it accepted an
argument the production store refuses, those tests would pass on code that
fails in production. So the SQLite adapter, the in-memory one (and later
PostgreSQL) call these same checks, each raising ``InvalidValue`` before any
state is read or changed, with the limits the ``InboxStore`` docstrings name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from hostkit.errors import InvalidValue
from hostkit.store._inbox import MAX_CLAIM_BATCH, MAX_INBOX_LIST
from hostkit.types import (
    MAX_BATCH,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    InboundState,
    SourceCheckpoint,
    finite_seconds,
)

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_PRUNE",
    "STATES",
    "check_batch",
    "check_claim_args",
    "check_count",
    "check_duration",
    "check_failure",
    "check_finite",
    "check_instant",
    "check_list",
    "check_reason",
    "check_ref",
    "check_result",
]

STATES: tuple[str, ...] = get_args(InboundState)
# An audit reason's length (as hostkit.store.MAX_REASON).
MAX_REASON = 500
# The longest id, token, owner or source id the adapter stores (as the SQLite columns).
_MAX_REF = 256
# The policy never allows more attempts than this (RetryPolicy.max_attempts).
MAX_ATTEMPTS = 100
# Rows of each kind one retention pass may touch.
MAX_PRUNE = 1_000_000


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


def check_count(name: str, value: object, high: int | None = None) -> int:
    """An integer from 1 to ``high`` (no upper bound when ``high`` is None)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(f"{name} must be an integer")
    if high is None and value < 1:
        raise InvalidValue(f"{name} must be a positive integer")
    if high is not None and not 1 <= value <= high:
        raise InvalidValue(f"{name} must be between 1 and {high}")
    return value


def check_ref(name: str, value: object) -> str:
    """An id, token or owner text: non-empty and bounded."""
    if not isinstance(value, str) or not value or len(value) > _MAX_REF:
        raise InvalidValue(f"{name} must be a non-empty string of at most {_MAX_REF} characters")
    return value


def check_reason(value: object) -> str:
    """An audit reason: non-empty text of at most ``MAX_REASON`` characters, stripped."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_REASON:
        raise InvalidValue(f"a requeue needs a reason of 1 to {MAX_REASON} characters")
    return value.strip()


def check_batch(
    envelopes: object, checkpoint: object
) -> tuple[tuple[InboundEnvelope, ...], SourceCheckpoint | None]:
    """1..``MAX_BATCH`` envelopes and an optional checkpoint, or ``InvalidValue``."""
    if not isinstance(envelopes, Sequence) or isinstance(envelopes, str | bytes):
        raise InvalidValue("accept takes a sequence of InboundEnvelope")
    batch = tuple(envelopes)
    if not 1 <= len(batch) <= MAX_BATCH:
        raise InvalidValue(f"a batch holds 1 to {MAX_BATCH} envelopes")
    if not all(isinstance(envelope, InboundEnvelope) for envelope in batch):
        raise InvalidValue("accept takes InboundEnvelope values")
    if checkpoint is not None and not isinstance(checkpoint, SourceCheckpoint):
        raise InvalidValue("checkpoint must be a SourceCheckpoint")
    return batch, checkpoint


def check_claim_args(
    owner: object, now: object, lease_s: object, limit: object, attempts: object
) -> None:
    """The arguments of ``claim``."""
    check_ref("owner", owner)
    check_instant("now", now)
    check_duration("lease_s", lease_s)
    check_count("limit", limit, MAX_CLAIM_BATCH)
    check_count("max_attempts", attempts, MAX_ATTEMPTS)


def check_result(value: object) -> InboundResult:
    if not isinstance(value, InboundResult):
        raise InvalidValue("complete takes an InboundResult")
    return value


def check_failure(value: object) -> InboundFailure:
    if not isinstance(value, InboundFailure):
        raise InvalidValue("fail takes an InboundFailure")
    return value


def check_list(state: object, channel_instance_id: object, limit: object) -> None:
    """The filters of ``records``."""
    if state is not None and state not in STATES:
        raise InvalidValue(f"state must be one of {', '.join(STATES)}")
    if channel_instance_id is not None:
        check_ref("channel_instance_id", channel_instance_id)
    check_count("limit", limit, MAX_INBOX_LIST)
