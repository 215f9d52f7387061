"""The frozen values of the store's turns group: admissions, session leases, turn states.

They validate themselves on construction (``InvalidValue`` with a bounded
message), so every adapter receives the same checked input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue
from hostkit.store._context_values import StepRecord
from hostkit.store._sessions import ConversationSelect, OwnerFacts
from hostkit.types import (
    MAX_INJECTED_CONTEXT_CHARS,
    MAX_INJECTED_CONTEXT_ITEMS,
    MAX_INPUT_CHARS,
    ModelMessage,
    OwnerKind,
    TurnOutcome,
    TurnResult,
    bounded_metadata,
    check_key,
    check_route,
    is_message_text,
)

__all__ = [
    "INTERRUPTED",
    "MAX_EXTENDED_INSTRUCTIONS_CHARS",
    "MAX_LEASE_TTL_S",
    "MAX_TURN_ID_CHARS",
    "TERMINAL",
    "Admitted",
    "CarriedContext",
    "ConversationTarget",
    "RecoveredTurn",
    "SessionBusy",
    "SessionLease",
    "TranscriptEntry",
    "TurnAdmission",
    "TurnState",
    "TurnStatus",
    "TurnWrite",
    "checked_context",
]

TurnStatus = Literal[
    "running", "completed", "needs_user", "failed", "cancelled", "lost", "indeterminate"
]
TERMINAL: frozenset[str] = frozenset(get_args(TurnOutcome))
# What a read shows for a turn still recorded "running" whose holder is gone by the
# store's clock (its lease expired, or its owner provably dead): no status of its own, since
# ending it is a write a view never makes; recovery ends it when a Host next opens or its
# session next admits a turn (``lost``, ``cancelled``, ``needs_user`` or ``indeterminate``).
INTERRUPTED = "interrupted"

# Identifiers are short tokens (request ids, turn ids, channel names); anything longer is
# a bug or an attack, and is refused before it reaches SQL. Identity keys (conversation
# keys, principal ids) are held to ``MAX_KEY_CHARS`` instead, as everywhere else.
MAX_TURN_ID_CHARS = 200
# A lease is renewed every third of its ttl; a day is far past any sensible ttl.
MAX_LEASE_TTL_S = 86_400.0
# What a turn may add to its instructions (a core's bootstrap slot returns at most this).
MAX_EXTENDED_INSTRUCTIONS_CHARS = 100_000
_OWNER_KINDS: tuple[str, ...] = get_args(OwnerKind)


def check_id(name: str, value: object, *, limit: int = MAX_TURN_ID_CHARS) -> str:
    """``value`` as a non-empty string of at most ``limit`` characters, or ``InvalidValue``."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidValue(f"{name} must be a non-empty string of at most {limit} characters")
    return str.__str__(value)  # a plain copy: a subclass's own methods never run later


def check_digest(value: object, name: str = "cancellation_digest") -> str:
    """A sha256 digest as 64 lowercase hex digits, or ``InvalidValue``."""
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise InvalidValue(f"{name} must be a sha256 digest (64 lowercase hex digits)")
    return value


def check_ttl(ttl_s: object) -> float:
    """A finite lease ttl in (0, ``MAX_LEASE_TTL_S``] seconds, or ``InvalidValue``."""
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, int | float)
        or not math.isfinite(ttl_s)
        or not 0 < ttl_s <= MAX_LEASE_TTL_S
    ):
        raise InvalidValue(f"ttl_s must be a number of seconds in (0, {MAX_LEASE_TTL_S:g}]")
    return float(ttl_s)


@dataclass(frozen=True, slots=True)
class ConversationTarget:
    """The conversation whose session admission resolves in its own transaction.

    ``select`` is ``"bound"`` (the bound session, created on first contact),
    ``"fresh"`` (a new session, bound from now on) or the id of a session this
    same conversation owns (resume; rebinds the conversation).
    """

    channel: str
    conversation_key: str
    select: ConversationSelect = "bound"
    owner_kind: OwnerKind = "conversation"

    def __post_init__(self) -> None:
        check_id("channel", self.channel)
        check_key("conversation_key", self.conversation_key)
        check_id("select", self.select)
        if self.owner_kind not in _OWNER_KINDS or self.owner_kind == "legacy_local":
            raise InvalidValue("owner_kind is not a kind a conversation can have")


@dataclass(frozen=True, slots=True)
class TurnAdmission:
    """Everything the admission transaction records for a new turn.

    ``session`` is a ``ConversationTarget`` (resolved inside the transaction)
    or the session id a verified scope is bound to. ``(principal_id,
    request_id)`` is the idempotency key.
    """

    turn_id: str
    request_id: str
    principal_id: str
    core_id: str
    core_revision: str
    generation: int
    session: ConversationTarget | str
    trace_id: str | None = None
    # The user's input, persisted with ``input.persisted`` (event 2) in the same
    # transaction; None for a turn that opens otherwise (an approval continuation).
    input: ModelMessage | None = None
    # True when the pinned core has an input slot: the contract persists the normalized
    # input after the slot runs (an appended message), so admission records only the
    # input's digest (``input.admitted``) and transcripts stay append-only.
    input_deferred: bool = False
    # sha256 (hex) of the turn's cancellation token nonce: a token presented to any
    # Host process is checked against it (``TurnStore.request_cancel``).
    cancellation_digest: str | None = None
    # The route the turn captured (``TurnRequest.route``), stored on the turn row so that
    # recovery can still reach the conversation of a turn whose process died. Bounded as
    # the request bounds it; None for an unrouted turn (CLI, notebook).
    route: Mapping[str, Any] | None = None
    # The context the embedder injected for the turn (``TurnRequest.injected_context``),
    # kept whole with a ``context.injected`` event in the same transaction when there is
    # any, so that the continuation of an approval it pauses on — run by any process,
    # after any restart — sends it again (``TurnStore.injected_context``). Bounded as the
    # request bounds it.
    injected_context: tuple[str, ...] = ()
    # False when the turn leaves the bootstrap snapshot out (``TurnRequest.bootstrap``):
    # kept with the injected context (the same event), so a continuation leaves it out too.
    bootstrap: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap, bool):
            raise InvalidValue("bootstrap must be True or False")
        if self.injected_context:
            object.__setattr__(self, "injected_context", checked_context(self.injected_context))
        check_route(self.route)
        if self.route is not None:
            object.__setattr__(self, "route", bounded_metadata(self.route))
        for name in ("turn_id", "request_id", "core_id", "core_revision"):
            check_id(name, getattr(self, name))
        check_key("principal_id", self.principal_id)
        if isinstance(self.generation, bool) or not isinstance(self.generation, int):
            raise InvalidValue("generation must be an integer")
        if not 0 <= self.generation < 2**63:
            raise InvalidValue("generation must be a non-negative 64-bit integer")
        if not isinstance(self.session, ConversationTarget):
            check_id("session", self.session)
        if self.trace_id is not None:
            check_id("trace_id", self.trace_id)
        if self.input is not None and not isinstance(self.input, ModelMessage):
            raise InvalidValue("input must be a ModelMessage")
        if self.cancellation_digest is not None:
            check_digest(self.cancellation_digest)


def checked_context(context: object) -> tuple[str, ...]:
    """``context`` as a turn's injected context, refused (``InvalidValue``) beyond its
    bounds: at most ``MAX_INJECTED_CONTEXT_ITEMS`` entries of valid text, each at most
    ``MAX_INPUT_CHARS`` characters and ``MAX_INJECTED_CONTEXT_CHARS`` together."""
    if not isinstance(context, tuple | list):
        raise InvalidValue("injected_context must be a list of text")
    items = tuple(context)
    if (
        len(items) > MAX_INJECTED_CONTEXT_ITEMS
        or not all(isinstance(item, str) for item in items)
        or any(item and not is_message_text(item, limit=MAX_INPUT_CHARS) for item in items)
        or sum(map(len, items)) > MAX_INJECTED_CONTEXT_CHARS
    ):
        raise InvalidValue(
            f"injected_context is at most {MAX_INJECTED_CONTEXT_ITEMS} entries of valid text, "
            f"{MAX_INJECTED_CONTEXT_CHARS} characters together"
        )
    return tuple(str.__str__(item) for item in items)


@dataclass(frozen=True, slots=True)
class SessionLease:
    """A session lease as held by one running turn: what every fenced write carries.

    ``token`` is the fencing token (monotonic per session, never reused);
    ``expires_at`` (epoch seconds) is as of when this value was read — each
    heartbeat moves the stored one to now + ``ttl_s``.
    """

    session_id: str
    turn_id: str
    token: int
    owner: str
    expires_at: float
    ttl_s: float

    def __post_init__(self) -> None:
        check_id("session_id", self.session_id)
        check_id("turn_id", self.turn_id)
        if isinstance(self.token, bool) or not isinstance(self.token, int) or self.token < 1:
            raise InvalidValue("token must be a positive integer")


@dataclass(frozen=True, slots=True)
class RecoveredTurn:
    """A running turn whose holder died or went silent, now ended ``lost`` (or ``cancelled``)."""

    turn_id: str
    session_id: str
    outcome: TurnOutcome


@dataclass(frozen=True, slots=True)
class Admitted:
    """The admission committed: the turn row, ``turn.started`` and the session lease.

    ``owner`` is the session's durable owner row, read in the same transaction
    (the AuthorityResolver mints the turn's scope from it). ``created`` says a
    new session was created; ``recovered`` lists the turn of a dead or silent
    holder this admission ended before taking its session over.
    ``open_approvals`` says the session had calls that can still run (pending,
    or answered and not yet claimed), read in the same transaction: while the
    lease holds, no other turn can add one, so False spares a new turn its
    look for calls to supersede.
    """

    lease: SessionLease
    owner: OwnerFacts
    created: bool = False
    recovered: tuple[RecoveredTurn, ...] = ()
    # The seq of the turn's next event: 2, or 3 when the input was persisted too.
    next_event_seq: int = 2
    open_approvals: bool = True

    @property
    def session_id(self) -> str:
        return self.lease.session_id


@dataclass(frozen=True, slots=True)
class SessionBusy:
    """Admission found the session held by another live turn; nothing of the turn was written.

    The conversation binding it resolved (created, fresh or resumed) is kept.
    ``expires_at`` is the holder's lease expiry at the time of the check.
    """

    session_id: str
    holder_turn_id: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class TurnState:
    """A turn's durable state: its status and, once terminal, the persisted result.

    ``started_at`` is when it was admitted (wall-clock seconds); a running turn
    a repeated request found also says until when its holder's lease runs
    (``holder_expires_at``, unless renewed): when asking again can tell more.
    """

    turn_id: str
    session_id: str
    status: TurnStatus
    result: TurnResult | None = None
    cancel_requested: bool = False
    started_at: float | None = None
    holder_expires_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class TurnWrite:
    """What a fenced transcript write committed: the message's seq, and whether to stop."""

    seq: int
    cancel_requested: bool
    # The observation committed with the write (``observed=``), as that transaction left it.
    step: StepRecord | None = None


@dataclass(frozen=True, slots=True)
class TranscriptEntry:
    """One transcript message of a turn with its event, written inside another write.

    The terminal commit takes the turn's last answer this way, so a turn's
    final step and its terminal record are one transaction.
    """

    message: ModelMessage
    event: str
    event_seq: int
    detail: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.message, ModelMessage):
            raise InvalidValue("a ModelMessage is required")
        check_id("event", self.event, limit=100)
        if isinstance(self.event_seq, bool) or not isinstance(self.event_seq, int):
            raise InvalidValue("event_seq must be an integer")
        if not 2 <= self.event_seq < 2**31:
            raise InvalidValue("event_seq must be between 2 and 2**31 - 1")


@dataclass(frozen=True, slots=True)
class CarriedContext:
    """What a paused turn's admission kept for its continuation to carry: the context the
    embedder injected, and whether the turn left the bootstrap snapshot out."""

    injected: tuple[str, ...] = ()
    bootstrap: bool = True
