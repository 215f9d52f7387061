"""The argument checks every ``InboxStore`` adapter applies, so all refuse alike.

An embedder's tests run against the in-memory inbox; if it accepted an
argument the production store refuses, those tests would pass on code that
fails in production. So the SQLite adapter, the in-memory one (and later
PostgreSQL) call these same checks, each raising ``InvalidValue`` before any
state is read or changed, with the limits the ``InboxStore`` docstrings name.
The generic checks live in ``_checks`` (shared with the delivery group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from hostkit.errors import InvalidValue
from hostkit.store._checks import (
    MAX_ATTEMPTS,
    check_count,
    check_duration,
    check_finite,
    check_instant,
    check_owner_page,
    check_owners,
    check_reason,
    check_ref,
    check_refs,
)
from hostkit.store._inbox import MAX_BRING_FORWARD, MAX_CLAIM_BATCH, MAX_INBOX_LIST, InboxLimits
from hostkit.types import (
    MAX_BATCH,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    InboundState,
    SourceCheckpoint,
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
    "check_inbound_ids",
    "check_instant",
    "check_list",
    "check_owner_page",
    "check_owners",
    "check_reason",
    "check_ref",
    "check_result",
    "check_room_limits",
    "reconcile_limit",
]

STATES: tuple[str, ...] = get_args(InboundState)
# Rows of each kind one retention pass may touch.
MAX_PRUNE = 1_000_000


def check_batch(
    envelopes: object, checkpoint: object
) -> tuple[tuple[InboundEnvelope, ...], SourceCheckpoint | None]:
    """1..``MAX_BATCH`` envelopes and an optional checkpoint, or ``InvalidValue``."""
    if type(envelopes) is not tuple and (  # a tuple skips the costlier ABC check
        not isinstance(envelopes, Sequence) or isinstance(envelopes, str | bytes)
    ):
        raise InvalidValue("accept takes a sequence of InboundEnvelope")
    batch = tuple(envelopes)
    if not 1 <= len(batch) <= MAX_BATCH:
        raise InvalidValue(f"a batch holds 1 to {MAX_BATCH} envelopes")
    if not all(isinstance(envelope, InboundEnvelope) for envelope in batch):
        raise InvalidValue("accept takes InboundEnvelope values")
    if checkpoint is not None and not isinstance(checkpoint, SourceCheckpoint):
        raise InvalidValue("checkpoint must be a SourceCheckpoint")
    return batch, checkpoint


def check_limits(limits: object) -> InboxLimits | None:
    """None or an ``InboxLimits`` (checked when it was made), or ``InvalidValue``."""
    if limits is not None and not isinstance(limits, InboxLimits):
        raise InvalidValue("limits must be an InboxLimits")
    return limits


def check_room_limits(limits: object) -> InboxLimits:
    """The ``InboxLimits`` of ``room`` (required: room is measured against them)."""
    if not isinstance(limits, InboxLimits):
        raise InvalidValue("room takes an InboxLimits")
    return limits


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


def reconcile_limit(max_attempts: int, *, turn_reserved: bool) -> int:
    """The attempt whose expired lease dead-letters an inbound (its worker died holding it).

    An attempt that reserved its turn id may have died after the turn ended (its
    answer sent, the inbound not yet completed): one claim more only reconciles
    with that turn's record (or ends it, its holder gone), so it is given, once.
    """
    return max_attempts + 1 if turn_reserved else max_attempts


def check_inbound_ids(inbound_ids: object) -> tuple[str, ...]:
    """The ids of ``bring_forward``: 1..``MAX_BRING_FORWARD`` inbound ids, once each."""
    return check_refs(
        "inbound_ids", inbound_ids, MAX_BRING_FORWARD, each="inbound_id", kind="inbound ids"
    )
