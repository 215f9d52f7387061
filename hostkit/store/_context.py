"""The store's context group: prepare's state, bootstrap, decisions, usage, calibration,
summaries and the compaction lease.

These are Host-internal operations keyed by session id (the ContextManager
runs inside an admitted turn, whose session was owner-checked at admission);
owner-checked reads for people live in the ``inspect`` group.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hostkit.errors import InvalidValue
from hostkit.store import _context_rows as rows
from hostkit.store._checks import MAX_CURSOR
from hostkit.store._context_values import (
    Calibration,
    CommittedSummary,
    CompactionState,
    ContextState,
    LeaseTake,
    StepRecord,
)
from hostkit.types import ContextDecision, UsageObservation

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "MAX_BOOTSTRAP_CHARS",
    "MAX_SUMMARY_CHARS",
    "MAX_WINDOW",
    "ContextStore",
    "SqlContextStore",
]

# Bounds of what the context group accepts: history messages per state read, characters
# of a bootstrap snapshot and of a committed summary, characters of ids and names.
MAX_WINDOW = 10_000
MAX_BOOTSTRAP_CHARS = 256_000
MAX_SUMMARY_CHARS = 100_000
_MAX_NAME = 300
_MAX_OWNER = 1_000  # LeaseOwner.encode(): host name, pid, start time, instance, machine


class ContextStore(ABC):
    """What the ContextManager and its compactor store, grouped; every adapter implements it.

    Each method is one transaction. Bad input raises ``InvalidValue`` (bounded
    message) before or inside that transaction, and nothing of the failed call
    is kept; database failures raise ``StoreError`` (``retryable`` set), and
    ``StoreClosed`` after the store closed. Cancelling a write may still let it
    commit (the writer may already run it); callers that must know re-read.
    """

    @abstractmethod
    async def read_state(
        self,
        *,
        session_id: str,
        turn_id: str,
        window: int,
        after_seq: int | None = None,
        after_cutoff: int | None = None,
    ) -> ContextState:
        """One snapshot of what ``prepare()`` builds from, in one read transaction.

        The committed summary and cutoff, the bootstrap snapshot, the
        calibration, and ``rows``: the newest ``window`` (1..``MAX_WINDOW``)
        messages after the cutoff that are not ``turn_id``'s own, with
        ``turn_id``'s own among and after them, oldest first; ``older`` says
        whether more exist before them. Costs do not grow with the transcript.
        A session without rows gives an empty state.

        A caller that keeps the window across reads passes the newest seq it
        holds (``after_seq``) and the cutoff it read it under
        (``after_cutoff``, None for none). While that cutoff is still the
        committed one, only rows after ``after_seq`` are read, with the same
        bound, and ``after`` on the state says so; once the cutoff moved, the
        state is a full read (``after`` None). Transcripts are append-only and
        a new message's seq follows every committed one, so the caller's rows
        plus these are the session's rows.
        """

    @abstractmethod
    async def keep_bootstrap(self, session_id: str, *, snapshot: str, source: str) -> str:
        """Keep ``snapshot`` as the session's bootstrap snapshot unless it has one already.

        Returns the snapshot that is kept (the first one ever stored wins). An
        empty ``snapshot`` with an empty ``source`` records that the session
        looked and found nothing: it keeps none, ever (a file written later is
        no instruction of this session). ``InvalidValue`` for a missing
        session or an over-long snapshot (``MAX_BOOTSTRAP_CHARS``).
        """

    @abstractmethod
    async def record_decision(self, decision: ContextDecision) -> None:
        """Append one ``prepare()`` decision (its typed record; never message content).

        ``InvalidValue`` when ``decision`` is not a ``ContextDecision`` or its
        id is already recorded (the recorded one stays as it was).
        """

    @abstractmethod
    async def record_decisions(self, decisions: Sequence[ContextDecision]) -> int:
        """Append the decisions not recorded yet, in one transaction; returns how many were new.

        A decision whose id is already recorded is skipped and the recorded
        one stays as it was, so writing the same decisions again is safe (the
        ContextManager writes a step that was never observed this way).
        ``InvalidValue`` when an item is not a ``ContextDecision``.
        """

    @abstractmethod
    async def decision(self, decision_id: str) -> ContextDecision | None:
        """The recorded decision, typed; None when there is none.

        ``StoreError`` when the stored record does not decode (damaged by hand).
        """

    @abstractmethod
    async def record_usage(self, observation: UsageObservation) -> bool:
        """Append provider-reported usage for one decision, then advance calibration.

        One transaction, the observation first, so calibration never moves for
        an observation that did not commit. Calibration is keyed by the
        decision's pinned provider, model and estimator; it moves only for a
        ``ready`` decision with a raw estimate. Returns False (and changes
        nothing) when the decision was already observed. ``InvalidValue`` when
        ``observation`` is not a ``UsageObservation``.
        """

    @abstractmethod
    async def record_step(
        self, decision: ContextDecision, observation: UsageObservation
    ) -> StepRecord:
        """One observed step in one transaction: its decision, its usage, then calibration.

        What ``record_decision`` followed by ``record_usage`` do, in one
        transaction and without reading the decision back. A decision already
        recorded under the same id stays as it was and the usage is appended
        against it (a retry after a write whose outcome was unknown).
        ``observed`` is False (and nothing changed) when the decision was
        already observed; ``calibration`` is the session's as the transaction
        left it. ``InvalidValue`` when the arguments are not a
        ``ContextDecision`` and a ``UsageObservation`` of the same decision and
        session.
        """

    @abstractmethod
    async def record_refusal(self, decision: ContextDecision) -> Calibration | None:
        """The provider refused ``decision``'s request as too long for its window.

        One transaction: the decision (kept as it was when already recorded),
        then the session's calibration raised at once, to at least the ratio
        that puts that request at its hard budget and ``REFUSAL_STEP`` times
        the current one (bounded to ``MAX_RATIO``), so the next ``prepare()``
        of the session shrinks it. Returns the calibration as it was left, or
        None when the decision carries nothing to calibrate by (not ``ready``,
        no raw estimate, no pinned provider and model). ``InvalidValue`` when
        ``decision`` is not a ``ContextDecision``.
        """

    @abstractmethod
    async def summary(self, session_id: str) -> CommittedSummary | None:
        """The session's committed summary, or None."""

    @abstractmethod
    async def compaction_state(self, session_id: str) -> CompactionState:
        """The committed summary and the compaction lease row, in one snapshot."""

    @abstractmethod
    async def take_compaction_lease(
        self,
        session_id: str,
        *,
        expected_cutoff: int | None,
        lease_id: str,
        owner: str,
        now: float,
        expires_at: float,
        force: bool = False,
        dead_lease: str | None = None,
    ) -> LeaseTake:
        """Revalidate the caller's cutoff and take the session's compaction lease, atomically.

        ``reread`` when the committed cutoff is not ``expected_cutoff``;
        ``cooldown`` while the cooldown (epoch seconds, compared with ``now``)
        lasts, unless ``force``; ``held`` while another unexpired lease exists
        whose id is not ``dead_lease`` (a lease id whose holder the caller
        proved dead); else ``taken`` under ``lease_id`` until ``expires_at``.
        ``InvalidValue`` for a missing session, an empty id or owner, or times
        that are not finite or expire before ``now``.
        """

    @abstractmethod
    async def commit_summary(
        self,
        session_id: str,
        *,
        lease_id: str,
        text: str,
        cutoff_seq: int,
        added: int,
        summarizer: str,
        cooldown_until: float,
    ) -> CommittedSummary | None:
        """Summary, cutoff, lease release and cooldown in one transaction, fenced by ``lease_id``.

        Returns the committed summary (``summarized_messages`` counts on from
        the previous one by ``added``), or None when the lease row no longer
        carries ``lease_id`` (another worker took it over): then nothing is
        written. ``InvalidValue`` for empty or over-long text
        (``MAX_SUMMARY_CHARS``), ``added`` below 1, or a cutoff that does not
        follow the committed one.
        """

    @abstractmethod
    async def release_compaction_lease(self, session_id: str, lease_id: str) -> bool:
        """Free the lease if it still carries ``lease_id`` (no cooldown); True if it did."""


def _name(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise InvalidValue(f"{name} must be a non-empty string of at most {_MAX_NAME} characters")
    return value


def _epoch(name: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidValue(f"{name} must be a finite number of epoch seconds")
    return float(value)


def _seq(name: str, value: object, *, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_CURSOR:
        raise InvalidValue(f"{name} must be an integer from {least} to {MAX_CURSOR}")
    return value


def _text(name: str, value: object, most: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise InvalidValue(f"{name} must be non-empty text of at most {most:,} characters")
    return value


class SqlContextStore(ContextStore):
    """The SQLite adapter of ContextStore (SQL in ``_context_rows``)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def read_state(
        self,
        *,
        session_id: str,
        turn_id: str,
        window: int,
        after_seq: int | None = None,
        after_cutoff: int | None = None,
    ) -> ContextState:
        _name("session_id", session_id)
        _name("turn_id", turn_id)
        if not isinstance(window, int) or isinstance(window, bool) or not 0 < window <= MAX_WINDOW:
            raise InvalidValue(f"window must be between 1 and {MAX_WINDOW}")
        if after_seq is not None:
            _seq("after_seq", after_seq, least=0)
        if after_cutoff is not None:
            _seq("after_cutoff", after_cutoff, least=0)
        return await self._db.read(
            lambda conn: rows.read_state(
                conn,
                session_id=session_id,
                turn_id=turn_id,
                limit=window,
                after_seq=after_seq,
                after_cutoff=after_cutoff,
            )
        )

    async def keep_bootstrap(self, session_id: str, *, snapshot: str, source: str) -> str:
        _name("session_id", session_id)
        if snapshot or source:
            _text("snapshot", snapshot, MAX_BOOTSTRAP_CHARS)
            _name("source", source)
        return await self._db.write(
            lambda conn: rows.keep_bootstrap(conn, session_id, snapshot, source)
        )

    async def record_decision(self, decision: ContextDecision) -> None:
        if not isinstance(decision, ContextDecision):
            raise InvalidValue("record_decision takes a ContextDecision")
        await self._db.write(lambda conn: rows.insert_decision(conn, decision))

    async def record_decisions(self, decisions: Sequence[ContextDecision]) -> int:
        batch = tuple(decisions) if isinstance(decisions, list | tuple) else None
        if batch is None or not all(isinstance(decision, ContextDecision) for decision in batch):
            raise InvalidValue("record_decisions takes ContextDecision values")
        if not batch:
            return 0
        return await self._db.write(lambda conn: rows.insert_decisions(conn, batch))

    async def decision(self, decision_id: str) -> ContextDecision | None:
        _name("decision_id", decision_id)
        return await self._db.read(lambda conn: rows.decision(conn, decision_id))

    async def record_usage(self, observation: UsageObservation) -> bool:
        if not isinstance(observation, UsageObservation):
            raise InvalidValue("record_usage takes a UsageObservation")
        return await self._db.write(lambda conn: rows.insert_usage(conn, observation))

    async def record_step(
        self, decision: ContextDecision, observation: UsageObservation
    ) -> StepRecord:
        if not isinstance(decision, ContextDecision):
            raise InvalidValue("record_step takes a ContextDecision")
        if not isinstance(observation, UsageObservation):
            raise InvalidValue("record_step takes a UsageObservation")
        if (observation.decision_id, observation.session_id) != (
            decision.decision_id,
            decision.session_id,
        ):
            raise InvalidValue("the observation is not of this decision and session")
        return await self._db.write(lambda conn: rows.record_step(conn, decision, observation))

    async def record_refusal(self, decision: ContextDecision) -> Calibration | None:
        if not isinstance(decision, ContextDecision):
            raise InvalidValue("record_refusal takes a ContextDecision")
        return await self._db.write(lambda conn: rows.record_refusal(conn, decision))

    async def summary(self, session_id: str) -> CommittedSummary | None:
        _name("session_id", session_id)
        return await self._db.read(lambda conn: rows.read_summary(conn, session_id))

    async def compaction_state(self, session_id: str) -> CompactionState:
        _name("session_id", session_id)
        return await self._db.read(lambda conn: rows.compaction_state(conn, session_id))

    async def take_compaction_lease(
        self,
        session_id: str,
        *,
        expected_cutoff: int | None,
        lease_id: str,
        owner: str,
        now: float,
        expires_at: float,
        force: bool = False,
        dead_lease: str | None = None,
    ) -> LeaseTake:
        _name("session_id", session_id)
        _name("lease_id", lease_id)
        _text("owner", owner, _MAX_OWNER)
        if expected_cutoff is not None:
            _seq("expected_cutoff", expected_cutoff, least=0)
        if dead_lease is not None:
            _name("dead_lease", dead_lease)
        at, until = _epoch("now", now), _epoch("expires_at", expires_at)
        if until < at:
            raise InvalidValue("expires_at cannot be before now")
        return await self._db.write(
            lambda conn: rows.take_lease(
                conn,
                session_id=session_id,
                expected_cutoff=expected_cutoff,
                lease_id=lease_id,
                owner=owner,
                now_epoch=at,
                expires_at=until,
                force=bool(force),
                dead_lease=dead_lease,
            )
        )

    async def commit_summary(
        self,
        session_id: str,
        *,
        lease_id: str,
        text: str,
        cutoff_seq: int,
        added: int,
        summarizer: str,
        cooldown_until: float,
    ) -> CommittedSummary | None:
        _name("session_id", session_id)
        _name("lease_id", lease_id)
        _text("text", text, MAX_SUMMARY_CHARS)
        _seq("cutoff_seq", cutoff_seq, least=0)
        _seq("added", added, least=1)
        _name("summarizer", summarizer)
        until = _epoch("cooldown_until", cooldown_until)
        return await self._db.write(
            lambda conn: rows.commit_summary(
                conn,
                session_id=session_id,
                lease_id=lease_id,
                text=text,
                cutoff_seq=cutoff_seq,
                added=added,
                summarizer=summarizer,
                cooldown_until=until,
            )
        )

    async def release_compaction_lease(self, session_id: str, lease_id: str) -> bool:
        _name("session_id", session_id)
        _name("lease_id", lease_id)
        return await self._db.write(lambda conn: rows.release_lease(conn, session_id, lease_id))
