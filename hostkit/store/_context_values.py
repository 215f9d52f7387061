"""The frozen values the store's context group takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hostkit.errors import InvalidValue
from hostkit.types import ContextDecision, ModelMessage, UsageObservation

__all__ = [
    "Calibration",
    "CommittedSummary",
    "CompactionLease",
    "CompactionState",
    "ContextState",
    "HistoryRow",
    "LeaseTake",
    "ObservedStep",
    "StepRecord",
]


@dataclass(frozen=True, slots=True)
class Calibration:
    """How far provider-reported input tokens were from the raw estimate, for one session.

    One row per session: a different provider, model or estimator starts it
    afresh. ``ratio`` is reported / raw estimate, a moving average over about
    20 ``samples``.
    """

    provider: str
    model: str
    estimator: str
    ratio: float
    samples: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What ``record_step`` did: whether the observation was new (False: a repeat, nothing
    changed) and the session's calibration as that transaction left it."""

    observed: bool
    calibration: Calibration | None


@dataclass(frozen=True, slots=True)
class ObservedStep:
    """A step's observation to commit inside another write (the turn's transcript write).

    ``decision`` is the step's decision when it was not written yet (the
    ContextManager holds a ready decision until its observation); None when
    it is recorded already. What ``ContextManager.stage`` returns.
    """

    decision: ContextDecision | None
    observation: UsageObservation

    def __post_init__(self) -> None:
        if not isinstance(self.observation, UsageObservation):
            raise InvalidValue("an ObservedStep needs a UsageObservation")
        if self.decision is not None and (
            not isinstance(self.decision, ContextDecision)
            or (self.decision.decision_id, self.decision.session_id)
            != (self.observation.decision_id, self.observation.session_id)
        ):
            raise InvalidValue("the observation is not of this decision and session")


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One transcript message after the cutoff: its seq, the message, the turn that wrote it."""

    seq: int
    message: ModelMessage
    turn_id: str | None


@dataclass(frozen=True, slots=True)
class ContextState:
    """One consistent read of what ``prepare()`` builds from (a single read transaction).

    ``rows`` is a contiguous run of the session's transcript after the
    committed ``cutoff``, oldest first, ending at its newest message: the
    newest ``window`` rows that are not ``turn_id``'s own, and ``turn_id``'s
    own rows among and after them (a caller that keeps the window across
    turns needs those; ``window`` leaves them out). ``older`` says whether
    rows before ``rows`` (and after the cutoff, or after ``after``) that are
    not ``turn_id``'s own exist.

    ``after`` is None for a full read. When the caller passed the seq and
    cutoff of the window it already holds and the cutoff is still the
    committed one, ``after`` is that seq and ``rows`` holds only what came
    after it (``older`` then means more arrived than one window holds).
    """

    summary: str | None
    cutoff: int | None
    rows: tuple[HistoryRow, ...]
    older: bool
    bootstrap: str | None
    calibration: Calibration | None
    turn_id: str = ""
    after: int | None = None

    @property
    def window(self) -> tuple[tuple[int, ModelMessage], ...]:
        """(seq, message) of the rows that are not ``turn_id``'s own, oldest first."""
        turn_id = self.turn_id
        return tuple((row.seq, row.message) for row in self.rows if row.turn_id != turn_id)


@dataclass(frozen=True, slots=True)
class CommittedSummary:
    """A session's committed summary: it stands for every message with ``seq <= cutoff_seq``."""

    session_id: str
    summary: str
    cutoff_seq: int
    summarized_messages: int
    summarizer: str
    created_at: str


@dataclass(frozen=True, slots=True)
class CompactionLease:
    """A session's compaction lease row: its holder (all None when free) and the cooldown.

    ``owner`` is ``LeaseOwner.encode()`` of the holder; ``expires_at`` and
    ``cooldown_until`` are epoch seconds of the store's clock (``RuntimeStore.now``).
    """

    session_id: str
    lease_id: str | None
    owner: str | None
    expires_at: float | None
    cooldown_until: float | None
    updated_at: str


@dataclass(frozen=True, slots=True)
class CompactionState:
    """The committed summary and the lease row of one session, read in one snapshot."""

    summary: CommittedSummary | None
    lease: CompactionLease | None

    @property
    def lease_id(self) -> str | None:
        """The current holder's lease id (None: nobody holds it)."""
        return self.lease.lease_id if self.lease is not None else None


@dataclass(frozen=True, slots=True)
class LeaseTake:
    """What taking the compaction lease found.

    - ``taken``: the caller now holds the lease; ``summary`` is the one it revalidated.
    - ``reread``: the committed cutoff is not the caller's; ``summary`` is the current one.
    - ``cooldown``: the session compacted recently (and ``force`` was not given);
      ``cooldown_until`` says until when (epoch seconds of the store's clock).
    - ``held``: another live holder: ``holder_lease`` and ``holder_owner`` name it.
    """

    kind: Literal["taken", "reread", "cooldown", "held"]
    summary: CommittedSummary | None
    holder_lease: str | None = None
    holder_owner: str | None = None
    cooldown_until: float | None = None
