"""ChannelInbox values: what a transport hands the Host, and what the inbox answers.

Every value is frozen and checked on construction, so an adapter can never
store an envelope the contract calls malformed, and a failure text is
redacted and bounded before it can reach a row, a log or a widget. A
transport's *authenticated* facts (which channel instance, which principal)
are fields of their own; nothing in ``payload`` or ``metadata`` is ever read
as authority.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import FrozenMap, thaw
from hostkit.types._bounds import storable
from hostkit.types._keys import MAX_KEY_CHARS, principal_id_of
from hostkit.types._redact import bounded_metadata
from hostkit.types._scope import is_channel_id

__all__ = [
    "INBOUND_RESULT_KINDS",
    "MAX_ARTIFACTS",
    "MAX_BATCH",
    "MAX_EVENT_KEY",
    "MAX_FAILURE_MESSAGE",
    "MAX_INBOUND_PAYLOAD",
    "MAX_METADATA_CHARS",
    "UNANSWERED_OUTCOMES",
    "UNPROCESSABLE",
    "ChannelCounts",
    "ClaimedInbound",
    "CompletionDecision",
    "CompletionDisposition",
    "FailureKind",
    "InboundEnvelope",
    "InboundFailure",
    "InboundRecord",
    "InboundResult",
    "InboundResultKind",
    "InboundState",
    "InboxBacklog",
    "InboxReceipt",
    "PruneReport",
    "ReceiptDisposition",
    "RetryDecision",
    "RetryDisposition",
    "SourceCheckpoint",
    "finite_seconds",
]

# Text of one inbound message (characters). Larger content travels as a
# payload_ref / artifact reference the transport stored first.
MAX_INBOUND_PAYLOAD = 65_536
# The kind (and metadata key, holding why) of an authenticated event whose text the inbox
# cannot keep: accepted without it, then dead-lettered by the worker where operators see it.
UNPROCESSABLE = "unprocessable"
# The turn outcomes of a ``turn`` result that answered nothing (``ChannelCounts.unanswered``).
UNANSWERED_OUTCOMES: tuple[str, ...] = ("lost", "failed", "cancelled", "indeterminate")
MAX_EVENT_KEY = 256
MAX_ARTIFACTS = 16
MAX_FAILURE_MESSAGE = 500
# An envelope's metadata as JSON, after redaction and the per-level bounds: routing
# facts (thread, reply-to, message ids), not content.
MAX_METADATA_CHARS = 8_192
# Envelopes in one batch accept (one transaction with its checkpoint).
MAX_BATCH = 500
_MAX_KEY = 256
_MAX_CURSOR = 1_024
_MAX_DETAIL = 500
_NO_METADATA = FrozenMap()

ReceiptDisposition = Literal["accepted", "duplicate"]
InboundResultKind = Literal["turn", "command", "ignored", "cancelled"]
INBOUND_RESULT_KINDS: tuple[str, ...] = get_args(InboundResultKind)
FailureKind = Literal["transient", "permanent"]
CompletionDisposition = Literal["completed", "stale_claim", "already_terminal", "conflict"]
RetryDisposition = Literal["retry", "dead_lettered", "stale_claim", "already_terminal", "conflict"]
# ready: waiting for its next attempt; claimed: a worker holds the lease;
# completed: a business result is recorded (terminal); dead_lettered: given up (terminal
# until an operator requeues it).
InboundState = Literal["ready", "claimed", "completed", "dead_lettered"]


def _identifier(name: str, value: object) -> str:
    """Channel instance ids name a configured transport ("telegram.support") and are
    channel ids, so usable as the conversation's channel; kinds, how a principal was
    authenticated and failure codes have the same shape."""
    if not is_channel_id(value):
        raise InvalidValue(f"{name} must be a lower-case identifier (a-z, 0-9, '_', '-', '.')")
    return value


def _text(name: str, value: object, limit: int = _MAX_KEY) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidValue(f"{name} must be a non-empty string of at most {limit} characters")
    if "\x00" in value:
        raise InvalidValue(f"{name} must not contain NUL")
    _utf8(name, value)
    return value


def _utf8(name: str, value: str) -> None:
    """Refuse text that cannot be stored: a lone surrogate (``"\\ud800"``, which a
    JSON escape can carry) passes every other check and then fails inside the
    store's write, where a webhook answers 500 (retried forever) and a poller
    cannot step past it."""
    if value.isascii():  # a flag of the string: no copy, and ASCII always encodes
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(f"{name} must be valid Unicode text (no lone surrogates)") from None


def finite_seconds(name: str, value: object) -> float:
    """``value`` as a finite float, or ``InvalidValue`` (never ``OverflowError``)."""
    if type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidValue(f"{name} must be a finite number of seconds")
    try:
        seconds = float(value)
    except OverflowError:
        raise InvalidValue(f"{name} must be a finite number of seconds") from None
    if not math.isfinite(seconds):
        raise InvalidValue(f"{name} must be a finite number of seconds")
    return seconds


def _time(name: str, value: object) -> float:
    seconds = finite_seconds(name, value)
    if seconds < 0:
        raise InvalidValue(f"{name} must not be negative")
    return seconds


def _artifacts(value: object) -> tuple[str, ...]:
    if not isinstance(value, tuple | list):
        raise InvalidValue("artifacts is a sequence of references")
    artifacts = tuple(value)
    if len(artifacts) > MAX_ARTIFACTS:
        raise InvalidValue(f"at most {MAX_ARTIFACTS} artifact references per inbound")
    for ref in artifacts:
        _text("artifact reference", ref)
    return artifacts


def _metadata(value: Mapping[str, Any]) -> FrozenMap:
    if not value:
        return _NO_METADATA
    metadata = bounded_metadata(value)
    try:
        text = json.dumps(thaw(metadata), ensure_ascii=False)
    except (TypeError, ValueError):
        raise InvalidValue("metadata must be JSON data") from None
    _utf8("metadata", text)
    size = len(text)
    if size > MAX_METADATA_CHARS:
        raise InvalidValue(f"metadata is at most {MAX_METADATA_CHARS} characters as JSON")
    return metadata


@dataclass(frozen=True, slots=True)
class SourceCheckpoint:
    """Where a polled source has been read up to; advanced only with its batch."""

    source_id: str
    cursor: str

    def __post_init__(self) -> None:
        _text("source_id", self.source_id)
        _text("cursor", self.cursor, _MAX_CURSOR)


@dataclass(frozen=True, slots=True)
class InboundEnvelope:
    """One authenticated platform event, checked and bounded before ``accept``.

    ``(channel_instance_id, platform_event_key)`` is the dedup identity: the
    same platform event delivered again is a duplicate. ``principal_key`` and
    ``authenticated_by`` are facts the transport adapter established
    (signature, token, local socket); the Host resolves authority from them
    and the channel instance, never from ``payload`` or ``metadata``.
    ``metadata`` is redacted and bounded like every other transport metadata.
    """

    channel_instance_id: str
    platform_event_key: str
    conversation_key: str
    principal_key: str
    authenticated_by: str
    received_at: float
    kind: str = "message"
    payload: str = ""
    payload_ref: str | None = None
    artifacts: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = _NO_METADATA
    source_checkpoint: SourceCheckpoint | None = None

    def __post_init__(self) -> None:
        _identifier("channel_instance_id", self.channel_instance_id)
        _text("platform_event_key", self.platform_event_key, MAX_EVENT_KEY)
        # Identity keys are held to the bound turn admission holds them to, so an envelope
        # the inbox accepts never becomes a dead letter for the length of its key.
        _text("conversation_key", self.conversation_key, MAX_KEY_CHARS)
        _text("principal_key", self.principal_key, MAX_KEY_CHARS)
        principal_id_of(self.channel_instance_id, self.principal_key)
        _identifier("authenticated_by", self.authenticated_by)
        object.__setattr__(self, "received_at", _time("received_at", self.received_at))
        _identifier("kind", self.kind)
        if not isinstance(self.payload, str) or len(self.payload) > MAX_INBOUND_PAYLOAD:
            raise InvalidValue(f"payload is text of at most {MAX_INBOUND_PAYLOAD} characters")
        if "\x00" in self.payload:
            raise InvalidValue("payload must not contain NUL")
        _utf8("payload", self.payload)
        if self.payload_ref is not None:
            _text("payload_ref", self.payload_ref)
        if type(self.artifacts) is not tuple or self.artifacts:
            object.__setattr__(self, "artifacts", _artifacts(self.artifacts))
        if self.metadata is not _NO_METADATA:
            if not isinstance(self.metadata, Mapping):
                raise InvalidValue("metadata must be a mapping")
            object.__setattr__(self, "metadata", _metadata(self.metadata))
        if self.source_checkpoint is not None and not isinstance(
            self.source_checkpoint, SourceCheckpoint
        ):
            raise InvalidValue("source_checkpoint must be a SourceCheckpoint")

    @classmethod
    def restore(cls, **fields: Any) -> InboundEnvelope:
        """An envelope read back from an inbox adapter, without checking it again.

        For storage adapters only: every stored envelope passed ``__post_init__``
        when it was accepted (metadata already redacted and bounded), and a claim
        rebuilds many of them inside the claim's transaction. ``metadata`` must be
        the frozen form.
        """
        envelope = object.__new__(cls)
        for name in cls.__dataclass_fields__:
            object.__setattr__(envelope, name, fields[name])
        return envelope

    @property
    def dedup_key(self) -> tuple[str, str]:
        """The unique identity of this platform event."""
        return (self.channel_instance_id, self.platform_event_key)


@dataclass(frozen=True, slots=True)
class InboxReceipt:
    """The durable identity of an accepted event; a duplicate gets the first one's id."""

    inbound_id: str
    disposition: ReceiptDisposition


@dataclass(frozen=True, slots=True)
class ClaimedInbound:
    """A leased inbound: only the holder of ``claim_token`` may complete or fail it.

    ``turn_request_id`` was reserved from the inbound id at accept time and is
    the same on every attempt, so a turn started by a crashed attempt is found
    (and not run again) by the next one. ``turn_reserved`` says an earlier
    attempt got as far as reserving it; ``existing_turn_id`` is filled in by
    reconciliation when a turn for that id already exists.
    """

    inbound_id: str
    envelope: InboundEnvelope
    claim_token: str
    attempt: int
    lease_expires_at: float
    turn_request_id: str
    turn_reserved: bool = False
    existing_turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class InboundResult:
    """The business result that ends an inbound (not its outbound delivery).

    ``turn``: a model turn ran (``turn_id``, its outcome); ``command``: a
    Host command answered it; ``ignored``: nothing to do (an edit, a reaction);
    ``cancelled``: the user cancelled it: terminal, never replayed.
    """

    kind: InboundResultKind
    turn_id: str | None = None
    outcome: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in INBOUND_RESULT_KINDS:
            raise InvalidValue(f"result kind must be one of {', '.join(INBOUND_RESULT_KINDS)}")
        if self.kind == "turn" and self.turn_id is None:
            raise InvalidValue("a turn result names its turn_id")
        if self.turn_id is not None:
            _text("turn_id", self.turn_id)
        if not isinstance(self.outcome, str) or len(self.outcome) > 64:
            raise InvalidValue("outcome is text of at most 64 characters")
        if not isinstance(self.detail, str):
            raise InvalidValue("detail must be text")
        object.__setattr__(self, "detail", bounded(self.detail, _MAX_DETAIL) if self.detail else "")

    def digest(self) -> str:
        """What makes two completions "the same terminal payload" (idempotent repeat)."""
        body = json.dumps([self.kind, self.turn_id, self.outcome, self.detail])
        return hashlib.sha256(body.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class InboundFailure:
    """Why an attempt failed: typed, redacted and bounded at construction.

    ``transient`` failures are retried with backoff up to the maximum number
    of attempts; ``permanent`` ones (authenticated but unprocessable) are
    dead-lettered at once.
    """

    kind: FailureKind
    code: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("transient", "permanent"):
            raise InvalidValue("failure kind must be 'transient' or 'permanent'")
        _identifier("failure code", self.code)
        if not isinstance(self.message, str):
            raise InvalidValue("failure message must be text")
        # From an exception's text, which may hold anything: a lone surrogate would fail
        # the store's write and leave the inbound claimed.
        object.__setattr__(self, "message", bounded(storable(self.message), MAX_FAILURE_MESSAGE))

    def digest(self) -> str:
        body = json.dumps([self.kind, self.code, self.message])
        return hashlib.sha256(body.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class CompletionDecision:
    """What ``complete`` did: ``completed`` (also for an idempotent repeat) or why not."""

    inbound_id: str
    disposition: CompletionDisposition
    state: InboundState


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What ``fail`` did: scheduled a retry at ``next_attempt_at``, dead-lettered, or why not."""

    inbound_id: str
    disposition: RetryDisposition
    state: InboundState
    attempt: int
    next_attempt_at: float | None = None


@dataclass(frozen=True, slots=True)
class InboundRecord:
    """An inbound as operators see it: state, attempts, last failure; never the payload.

    ``payload_pruned`` says retention removed the payload (the row stays as
    the dedup tombstone). Times are wall-clock seconds.
    """

    inbound_id: str
    channel_instance_id: str
    platform_event_key: str
    kind: str
    conversation_key: str
    state: InboundState
    attempt: int
    received_at: float
    accepted_at: float
    updated_at: float
    due_at: float | None = None
    result_kind: InboundResultKind | None = None
    turn_id: str | None = None
    failure_code: str = ""
    failure_message: str = ""
    payload_pruned: bool = False
    requeues: int = 0

    @property
    def unprocessable(self) -> bool:
        """Accepted without its text (too long, a NUL): no turn can answer it, so a
        requeue would only dead-letter it again."""
        return UNPROCESSABLE in (self.kind, self.failure_code)


@dataclass(frozen=True, slots=True)
class ChannelCounts:
    """How many inbounds of one channel instance are in each state.

    ``unanswered`` counts the ``completed`` ones (a subset) whose turn ended
    without an answer (``UNANSWERED_OUTCOMES``): ``lost``, ``failed``,
    ``cancelled`` or ``indeterminate``, as the turn's terminal record says
    (the inbox result carries the same outcome). Its sender was sent a notice
    unless a person cancelled the turn.
    """

    channel_instance_id: str
    ready: int = 0
    claimed: int = 0
    completed: int = 0
    dead_lettered: int = 0
    unanswered: int = 0


@dataclass(frozen=True, slots=True)
class InboxBacklog:
    """What waits on people or workers, over every channel instance: the live status line.

    Read without the completed history (``ChannelCounts`` counts that too), so
    its cost follows the backlog and the dead letters, never the inbox's age.
    """

    ready: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one retention pass removed: payloads cleared, tombstones deleted."""

    payloads_cleared: int
    tombstones_removed: int
