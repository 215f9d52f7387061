"""The context group's SQL (SQLite) and the persisted form of ``ContextDecision``.

Every function here runs on the store's database thread inside one
transaction (``RowStore.write``/``read``), so "X together with Y" is
literally one transaction. Rows are read by column name. ``lease_id`` is the
compaction lease's fencing token: only the holder of the lease id on the row
may commit.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hostkit.errors import InvalidValue, StoreError
from hostkit.store._context_values import (
    Calibration,
    CommittedSummary,
    CompactionLease,
    CompactionState,
    ContextState,
    HistoryRow,
    LeaseTake,
    ObservedStep,
    StepRecord,
)
from hostkit.store._json import canonical_json
from hostkit.store._owned import now
from hostkit.types import (
    MAX_DECISION_TEXT,
    CompactionKind,
    ContextDecision,
    DecisionKind,
    LayerSummary,
    ModelMessage,
    OverflowReason,
    UsageObservation,
)

__all__ = [
    "MAX_RATIO",
    "MAX_SAMPLES",
    "MIN_RATIO",
    "calibration_sample",
    "commit_summary",
    "compaction_state",
    "decision",
    "decode_decision",
    "encode_decision",
    "insert_decision",
    "insert_decisions",
    "insert_usage",
    "keep_bootstrap",
    "observe_step",
    "read_calibration",
    "read_state",
    "read_summary",
    "record_refusal",
    "record_step",
    "release_lease",
    "rows",
    "take_lease",
    "upsert_summary",
]

_log = logging.getLogger("hostkit.store")

# A calibration ratio stays within these bounds whatever a provider reports. Dense text
# (base64, hex, decomposed accents) tokenizes at twice the estimate and more: a bound of 2
# would leave such a session over its window for good. The estimate is an upper bound by
# design, and one ratio scales all of a session's content: what one kind of text teaches
# must not put another over the window. Chinese is counted at 0.23-0.34 of the estimate
# (o200k), English prose at 0.71, Python at 0.62: at 0.8 (1/1.25) the ordinary text of a
# session that learned on Chinese is still counted high, by over a tenth for English.
MIN_RATIO, MAX_RATIO = 0.8, 4.0
# Calibration is a moving average over about this many observations, except that a sample
# above both the ratio and 1 (the provider counted more than the estimate) is taken at
# once: the request after one that was under-estimated must fit.
MAX_SAMPLES = 20
# A request estimated below this many tokens is mostly the estimate's fixed costs (framing,
# per-message overhead, schemas), which it counts generously: the provider counting fewer
# says nothing about the content of the larger requests that follow, and taking it would
# scale their estimates down (to MIN_RATIO) and over the window. Such a sample
# counts as at least 1 and leaves a higher ratio as it is; above those it is taken as any other.
MIN_LOWERING_TOKENS = 1_000


def rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    """``sql``'s rows, addressable by column name."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def _row(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
    found = rows(conn, sql, params)
    return found[0] if found else None


# -- the persisted decision -------------------------------------------------------------


class _Layer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(min_length=1, max_length=64)
    tokens: int = Field(ge=0)
    items: int = Field(ge=0)
    pruned: int = Field(default=0, ge=0)


_Text = Field(default=None, min_length=1, max_length=MAX_DECISION_TEXT)


class _DecisionJson(BaseModel):
    """The JSON in ``context_decisions.summary``: a ContextDecision without its key columns.

    ``reason`` and ``fixed`` are how overflow decisions were recorded before
    the typed record (the reason; the tokens needed before history); rows that
    old still decode.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    estimated_input_tokens: int | None = Field(default=None, ge=0)
    hard_budget: int | None = None
    output_budget: int | None = Field(default=None, ge=0)
    context_window: int | None = Field(default=None, ge=0)
    layers: tuple[_Layer, ...] = ()
    raw_input_tokens: int | None = Field(default=None, ge=0)
    framing_tokens: int | None = Field(default=None, ge=0)
    estimator: str | None = _Text
    exact_estimator: bool = False
    provider: str | None = _Text
    model: str | None = _Text
    calibration: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    summary_used: bool = False
    cutoff: int | None = None
    pruned_results: int = Field(default=0, ge=0)
    dropped_messages: int = Field(default=0, ge=0)
    protected_dropped: bool = False
    compaction: CompactionKind | None = None
    overflow_reason: OverflowReason | None = None
    reason: OverflowReason | None = None
    fixed: int | None = Field(default=None, ge=0)


# The payload written for every decision: the record's fields but its key columns.
_PAYLOAD = tuple(
    name for name in _DecisionJson.model_fields if name not in ("layers", "reason", "fixed")
)


def encode_decision(decision: ContextDecision) -> str:
    """The JSON payload of ``decision`` (every field but the key columns)."""
    body: dict[str, Any] = {name: getattr(decision, name) for name in _PAYLOAD}
    body["layers"] = [
        {"name": x.name, "tokens": x.tokens, "items": x.items, "pruned": x.pruned}
        for x in decision.layers
    ]
    return canonical_json(body)


def decode_decision(row: sqlite3.Row) -> ContextDecision:
    """The typed record of one ``context_decisions`` row; ``StoreError`` when it is not valid."""
    decision_id = str(row["decision_id"])
    try:
        data = _DecisionJson.model_validate_json(row["summary"])
        estimated = data.estimated_input_tokens
        if estimated is None:
            estimated = data.fixed
        if estimated is None:
            raise InvalidValue("estimated_input_tokens is missing")
        kind: DecisionKind = row["kind"]
        return ContextDecision(
            decision_id=decision_id,
            session_id=row["session_id"],
            turn_id=row["turn_id"],
            step_id=row["step_id"],
            kind=kind,
            estimated_input_tokens=estimated,
            layers=tuple(LayerSummary(x.name, x.tokens, x.items, x.pruned) for x in data.layers),
            overflow_reason=data.overflow_reason or data.reason,
            **{
                name: getattr(data, name)
                for name in _PAYLOAD
                if name not in ("estimated_input_tokens", "overflow_reason")
            },
        )
    except ValidationError as exc:
        # Where and what, never the input: a corrupt row may hold anything.
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "summary"
        raise StoreError(
            f"context decision {decision_id[:80]} is not a valid record: {where}: {first['msg']}"
        ) from exc
    except InvalidValue as exc:
        raise StoreError(
            f"context decision {decision_id[:80]} is not a valid record: {exc.message}"
        ) from exc


_DECISION_COLUMNS = "d.decision_id, d.session_id, d.turn_id, d.step_id, d.kind, d.summary"


# Fenced: no row for a turn another process ended because its holder was gone (a
# takeover or recovery: the ``turn.*`` event's reason). A holder that was paused past
# its lease and resumed writes nothing of its lost turn, its held decisions included.
_INSERT_DECISION = (
    "INSERT INTO context_decisions (decision_id, session_id, turn_id, step_id, kind, "
    "summary, at) SELECT ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
    "WHERE NOT EXISTS (SELECT 1 FROM turn_events WHERE turn_id = ? "
    "AND kind IN ('turn.lost', 'turn.cancelled', 'turn.indeterminate', 'turn.needs_user') "
    "AND json_extract(detail, '$.reason') IN ('owner_dead', 'lease_expired'))"
)


def _decision_values(decision: ContextDecision) -> list[Any]:
    return [
        decision.decision_id,
        decision.session_id,
        decision.turn_id,
        decision.step_id,
        decision.kind,
        encode_decision(decision),
        decision.turn_id,
    ]


def insert_decision(conn: sqlite3.Connection, decision: ContextDecision) -> None:
    try:
        conn.execute(_INSERT_DECISION, _decision_values(decision))
    except sqlite3.IntegrityError as exc:
        raise InvalidValue(f"decision {decision.decision_id[:80]} is already recorded") from exc


def insert_decisions(conn: sqlite3.Connection, decisions: Sequence[ContextDecision]) -> int:
    """Append the decisions not recorded yet; one recorded under the same id stays as it was."""
    new = 0
    for decision in decisions:
        cursor = conn.execute(
            _INSERT_DECISION + " ON CONFLICT (decision_id) DO NOTHING", _decision_values(decision)
        )
        new += cursor.rowcount
    return new


def decision(conn: sqlite3.Connection, decision_id: str) -> ContextDecision | None:
    found = _row(
        conn,
        f"SELECT {_DECISION_COLUMNS} FROM context_decisions d WHERE d.decision_id = ?",
        [decision_id],
    )
    return None if found is None else decode_decision(found)


# -- prepare's state and the bootstrap snapshot ----------------------------------------


def read_state(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    turn_id: str,
    limit: int,
    after_seq: int | None = None,
    after_cutoff: int | None = None,
) -> ContextState:
    """Summary, cutoff, the retained window after it, bootstrap and calibration.

    With ``after_seq``, and ``after_cutoff`` still the committed cutoff, only
    rows after ``after_seq`` are read (the caller holds the rest); otherwise
    the whole window. Rows are walked newest first through the
    ``(session_id, seq)`` index and the walk stops at the first row that is
    not ``turn_id``'s own beyond ``limit`` of them: the cost depends on the
    window, never on the transcript.
    """
    # The summary, bootstrap and calibration rows in one statement (each at most one row).
    context = _row(
        conn,
        "SELECT cs.summary, cs.cutoff_seq, b.snapshot, c.provider, c.model, c.estimator, "
        "c.ratio, c.samples, c.updated_at FROM sessions s "
        "LEFT JOIN context_summaries cs ON cs.session_id = s.session_id "
        "LEFT JOIN context_bootstrap b ON b.session_id = s.session_id "
        "LEFT JOIN context_calibration c ON c.session_id = s.session_id "
        "WHERE s.session_id = ?",
        [session_id],
    )
    summary = cutoff = bootstrap = calibration = None
    if context is not None:
        if context["cutoff_seq"] is not None:
            summary, cutoff = str(context["summary"]), int(context["cutoff_seq"])
        bootstrap = context["snapshot"]
        calibration = None if context["provider"] is None else _calibration(context)
    after = after_seq if after_seq is not None and after_cutoff == cutoff else None
    floor = max(-1 if cutoff is None else cutoff, -1 if after is None else after)
    cursor = conn.execute(
        "SELECT seq, role, content, turn_id FROM messages WHERE session_id = ? AND seq > ? "
        "ORDER BY seq DESC",
        [session_id, floor],
    )
    found: list[tuple[int, str, str, str | None]] = []
    others = 0
    older = False
    for seq, role, content, owner in cursor:
        if owner != turn_id:
            if others == limit:
                older = True
                break
            others += 1
        found.append((seq, role, content, owner))
    cursor.close()
    return ContextState(
        summary=summary,
        cutoff=cutoff,
        rows=tuple(
            HistoryRow(int(seq), ModelMessage.from_json(role, json.loads(content)), owner)
            for seq, role, content, owner in reversed(found)
        ),
        older=older,
        bootstrap=bootstrap,
        calibration=calibration,
        turn_id=turn_id,
        after=after,
    )


_CALIBRATION_COLUMNS = "provider, model, estimator, ratio, samples, updated_at"


def read_calibration(conn: sqlite3.Connection, session_id: str) -> Calibration | None:
    found = _row(
        conn,
        f"SELECT {_CALIBRATION_COLUMNS} FROM context_calibration WHERE session_id = ?",
        [session_id],
    )
    return None if found is None else _calibration(found)


def _calibration(row: sqlite3.Row) -> Calibration:
    return Calibration(
        provider=row["provider"],
        model=row["model"],
        estimator=row["estimator"],
        ratio=float(row["ratio"]),
        samples=int(row["samples"]),
        updated_at=row["updated_at"],
    )


def keep_bootstrap(conn: sqlite3.Connection, session_id: str, snapshot: str, source: str) -> str:
    """Keep the session's first bootstrap snapshot; returns the one that is kept."""
    _require_session(conn, session_id)
    conn.execute(
        "INSERT INTO context_bootstrap (session_id, snapshot, source, created_at) "
        "VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) ON CONFLICT DO NOTHING",
        [session_id, snapshot, source],
    )
    kept = _row(conn, "SELECT snapshot FROM context_bootstrap WHERE session_id = ?", [session_id])
    assert kept is not None  # inserted above or already there, in this transaction
    return str(kept["snapshot"])


def _require_session(conn: sqlite3.Connection, session_id: str) -> None:
    # The context rows reference sessions; say so plainly rather than as a constraint error.
    if _row(conn, "SELECT 1 FROM sessions WHERE session_id = ?", [session_id]) is None:
        raise InvalidValue(f"session {session_id[:80]} does not exist")


# -- usage and calibration --------------------------------------------------------------


def insert_usage(conn: sqlite3.Connection, observation: UsageObservation) -> bool:
    """Append one observation, then advance calibration; False when already observed.

    Both happen in the caller's one transaction, the observation first: the
    calibration never moves for an observation that did not commit. A decision
    row that does not decode (written by hand, or damaged) costs the estimate
    and the calibration step, never the provider's reported usage.
    """
    return _append_usage(conn, observation, _recorded_decision(conn, observation)) is not None


def _recorded_decision(
    conn: sqlite3.Connection, observation: UsageObservation
) -> ContextDecision | None:
    found = _row(
        conn,
        f"SELECT {_DECISION_COLUMNS} FROM context_decisions d WHERE d.decision_id = ?",
        [observation.decision_id],
    )
    if found is None:
        return None
    try:
        return decode_decision(found)
    except StoreError as exc:
        _log.warning("usage recorded without calibration: %s", exc.message)
        return None


def record_step(
    conn: sqlite3.Connection, decision: ContextDecision, observation: UsageObservation
) -> StepRecord:
    """One observed step: its decision, then its usage, then calibration.

    A decision already recorded under the same id stays as it was, and the
    usage is appended against the recorded one (a retry after a write whose
    outcome was unknown). Otherwise the decision in hand is used as is: it
    is not read back. Returns the session's calibration as it is now.
    """
    inserted = conn.execute(
        _INSERT_DECISION + " ON CONFLICT (decision_id) DO NOTHING", _decision_values(decision)
    )
    recorded = decision if inserted.rowcount == 1 else _recorded_decision(conn, observation)
    return _step_record(conn, observation, _append_usage(conn, observation, recorded))


def observe_step(conn: sqlite3.Connection, step: ObservedStep) -> StepRecord:
    """``record_step`` for a held decision, else the usage alone; then the calibration."""
    if step.decision is not None:
        return record_step(conn, step.decision, step.observation)
    observation = step.observation
    appended = _append_usage(conn, observation, _recorded_decision(conn, observation))
    return _step_record(conn, observation, appended)


def _step_record(
    conn: sqlite3.Connection, observation: UsageObservation, appended: _Appended | None
) -> StepRecord:
    if appended is not None and appended.calibration is not None:
        return StepRecord(True, appended.calibration)
    return StepRecord(appended is not None, read_calibration(conn, observation.session_id))


@dataclass(frozen=True, slots=True)
class _Appended:
    """An observation that was new, with the calibration it moved (None: it moved none)."""

    calibration: Calibration | None


def _append_usage(
    conn: sqlite3.Connection, observation: UsageObservation, recorded: ContextDecision | None
) -> _Appended | None:
    """Append the observation and calibrate; None when it was already observed."""
    usage = observation.usage
    cursor = conn.execute(
        "INSERT INTO usage_observations (decision_id, session_id, turn_id, step_id, "
        "provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
        "estimated_input_tokens, finish_reason, provider_request_id, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
        "ON CONFLICT DO NOTHING",
        [
            observation.decision_id,
            observation.session_id,
            observation.turn_id,
            observation.step_id,
            observation.provider,
            observation.model,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            recorded.estimated_input_tokens if recorded is not None else None,
            observation.finish_reason,
            observation.provider_request_id,
        ],
    )
    if cursor.rowcount != 1:
        return None
    # Cache buckets are subsets of the input tokens (see Usage).
    sampled = calibration_sample(recorded, usage.input_tokens)
    if recorded is None or recorded.estimator is None or sampled is None:
        return _Appended(None)
    # Keyed by the pinned provider/model: a provider may report a dated alias.
    key = (
        observation.session_id,
        recorded.provider or observation.provider,
        recorded.model or observation.model,
        recorded.estimator,
    )
    sample, lowers = sampled
    return _Appended(_calibrate(conn, key, sample, lowers=lowers))


def calibration_sample(
    decision: ContextDecision | None, reported: int
) -> tuple[float, bool] | None:
    """The ratio a step's reported input tokens give against its ``decision``'s raw
    estimate (within ``MIN_RATIO``..``MAX_RATIO``), and whether it may lower the session's;
    None when it calibrates nothing.

    What observing the step will move the calibration toward: the ContextManager
    checks a step's calls with it before the observation commits.
    """
    if (
        decision is None
        or decision.kind != "ready"
        or not decision.raw_input_tokens
        or not decision.estimator
        or reported <= 0
    ):
        return None
    sample = reported / decision.raw_input_tokens
    lowers = decision.raw_input_tokens >= MIN_LOWERING_TOKENS
    if not lowers:
        sample = max(sample, 1.0)
    return min(MAX_RATIO, max(MIN_RATIO, sample)), lowers


_SAME_KEY = (
    "context_calibration.provider = excluded.provider "
    "AND context_calibration.model = excluded.model "
    "AND context_calibration.estimator = excluded.estimator"
)
_WEIGHT = f"MIN(context_calibration.samples, {MAX_SAMPLES - 1})"
_CALIBRATE = (
    "INSERT INTO context_calibration (session_id, provider, model, estimator, ratio, samples, "
    "updated_at) VALUES (?, ?, ?, ?, ?, 1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
    f"ON CONFLICT (session_id) DO UPDATE SET ratio = CASE WHEN {_SAME_KEY} "
    # A sample that may not lower the ratio (a small request's) leaves it where it is.
    "AND ? = 0 AND excluded.ratio <= context_calibration.ratio THEN context_calibration.ratio "
    f"WHEN {_SAME_KEY} "
    "AND (excluded.ratio <= context_calibration.ratio OR excluded.ratio <= 1.0) "
    f"THEN (context_calibration.ratio * {_WEIGHT} + excluded.ratio) / ({_WEIGHT} + 1) "
    "ELSE excluded.ratio END, "
    f"samples = CASE WHEN {_SAME_KEY} THEN context_calibration.samples + 1 ELSE 1 END, "
    "provider = excluded.provider, model = excluded.model, estimator = excluded.estimator, "
    f"updated_at = excluded.updated_at RETURNING {_CALIBRATION_COLUMNS}"
)


def _calibrate(
    conn: sqlite3.Connection, key: tuple[str, str, str, str], sample: float, *, lowers: bool
) -> Calibration:
    """Move the session's ratio toward ``sample`` (up to it at once when the provider
    counted more than the estimate); another provider/model/estimator resets it.
    ``lowers=False``: the sample raises the ratio or leaves it, never lowers it.

    One statement: the moving average is taken in SQL against the row as it
    is, and the row comes back as it was left.
    """
    session_id, provider, model, estimator = key
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    params = [session_id, provider, model, estimator, sample, int(lowers)]
    (row,) = cursor.execute(_CALIBRATE, params).fetchall()
    return _calibration(row)


# A refused request's calibration rises at least this much: the estimate that let it
# through under-counted by an unknown amount, so the next one must come out smaller.
REFUSAL_STEP = 1.25

_REFUSE = (
    "INSERT INTO context_calibration (session_id, provider, model, estimator, ratio, samples, "
    "updated_at) VALUES (?, ?, ?, ?, ?, 1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
    f"ON CONFLICT (session_id) DO UPDATE SET ratio = CASE WHEN {_SAME_KEY} "
    f"AND context_calibration.ratio * {REFUSAL_STEP} > excluded.ratio "
    f"THEN MIN(context_calibration.ratio * {REFUSAL_STEP}, {MAX_RATIO}) "
    "ELSE excluded.ratio END, "
    f"samples = CASE WHEN {_SAME_KEY} THEN context_calibration.samples ELSE 1 END, "
    "provider = excluded.provider, model = excluded.model, estimator = excluded.estimator, "
    f"updated_at = excluded.updated_at RETURNING {_CALIBRATION_COLUMNS}"
)


def record_refusal(conn: sqlite3.Connection, decision: ContextDecision) -> Calibration | None:
    """The provider refused ``decision``'s request as too long: record the decision and
    raise the session's ratio at once, to the one that would have put the request at the
    hard budget (with a margin) and at least ``REFUSAL_STEP`` times the current one.

    None (and only the decision kept) when the decision has no raw estimate or pinned
    provider and model to key a ratio by.
    """
    conn.execute(
        _INSERT_DECISION + " ON CONFLICT (decision_id) DO NOTHING", _decision_values(decision)
    )
    if (
        decision.kind != "ready"
        or not decision.raw_input_tokens
        or not decision.hard_budget
        or not decision.estimator
        or decision.provider is None
        or decision.model is None
    ):
        return None
    floor = decision.hard_budget / decision.raw_input_tokens * REFUSAL_STEP
    params = [
        decision.session_id,
        decision.provider,
        decision.model,
        decision.estimator,
        min(MAX_RATIO, max(MIN_RATIO, floor)),
    ]
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    (row,) = cursor.execute(_REFUSE, params).fetchall()
    return _calibration(row)


# -- summaries and the compaction lease -------------------------------------------------


def read_summary(conn: sqlite3.Connection, session_id: str) -> CommittedSummary | None:
    """The session's committed summary, if any."""
    found = _row(
        conn,
        "SELECT summary, cutoff_seq, summarized_messages, summarizer, created_at "
        "FROM context_summaries WHERE session_id = ?",
        [session_id],
    )
    if found is None:
        return None
    return CommittedSummary(
        session_id=session_id,
        summary=found["summary"],
        cutoff_seq=int(found["cutoff_seq"]),
        summarized_messages=int(found["summarized_messages"]),
        summarizer=found["summarizer"],
        created_at=found["created_at"],
    )


def _lease(conn: sqlite3.Connection, session_id: str) -> CompactionLease | None:
    found = _row(
        conn,
        "SELECT lease_id, owner, expires_at, cooldown_until, updated_at FROM context_leases "
        "WHERE session_id = ?",
        [session_id],
    )
    if found is None:
        return None
    return CompactionLease(
        session_id=session_id,
        lease_id=found["lease_id"],
        owner=found["owner"],
        expires_at=found["expires_at"],
        cooldown_until=found["cooldown_until"],
        updated_at=found["updated_at"],
    )


def compaction_state(conn: sqlite3.Connection, session_id: str) -> CompactionState:
    """The committed summary and the lease row, in one snapshot."""
    return CompactionState(read_summary(conn, session_id), _lease(conn, session_id))


def take_lease(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    expected_cutoff: int | None,
    lease_id: str,
    owner: str,
    now_epoch: float,
    expires_at: float,
    force: bool,
    dead_lease: str | None,
) -> LeaseTake:
    """Revalidate the snapshot and take the lease in one transaction.

    The lease is free, expired, or held under ``dead_lease`` (a lease id whose
    owner the caller proved dead) -> taken. A cooldown refuses unless ``force``.
    """
    _require_session(conn, session_id)
    summary = read_summary(conn, session_id)
    if (summary.cutoff_seq if summary is not None else None) != expected_cutoff:
        return LeaseTake("reread", summary)
    held = _lease(conn, session_id)
    if held is not None:
        cooldown = held.cooldown_until
        if cooldown is not None and cooldown > now_epoch and not force:
            return LeaseTake("cooldown", summary, cooldown_until=cooldown)
        live = held.expires_at is not None and held.expires_at >= now_epoch
        if held.lease_id is not None and live and held.lease_id != dead_lease:
            return LeaseTake("held", summary, held.lease_id, held.owner)
    conn.execute(
        "INSERT INTO context_leases (session_id, lease_id, owner, expires_at, cooldown_until, "
        "updated_at) VALUES (?, ?, ?, ?, NULL, ?) ON CONFLICT (session_id) DO UPDATE SET "
        "lease_id = excluded.lease_id, owner = excluded.owner, "
        "expires_at = excluded.expires_at, updated_at = excluded.updated_at",
        [session_id, lease_id, owner, expires_at, now(conn)],
    )
    return LeaseTake("taken", summary)


def upsert_summary(conn: sqlite3.Connection, summary: CommittedSummary) -> None:
    conn.execute(
        "INSERT INTO context_summaries (session_id, summary, cutoff_seq, summarized_messages, "
        "summarizer, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
        "SET summary = excluded.summary, cutoff_seq = excluded.cutoff_seq, "
        "summarized_messages = excluded.summarized_messages, summarizer = excluded.summarizer, "
        "created_at = excluded.created_at",
        [
            summary.session_id,
            summary.summary,
            summary.cutoff_seq,
            summary.summarized_messages,
            summary.summarizer,
            summary.created_at,
        ],
    )


def _end_lease(conn: sqlite3.Connection, session_id: str, cooldown_until: float, at: str) -> None:
    conn.execute(
        "UPDATE context_leases SET lease_id = NULL, owner = NULL, expires_at = NULL, "
        "cooldown_until = ?, updated_at = ? WHERE session_id = ?",
        [cooldown_until, at, session_id],
    )


def commit_summary(
    conn: sqlite3.Connection,
    *,
    session_id: str,
    lease_id: str,
    text: str,
    cutoff_seq: int,
    added: int,
    summarizer: str,
    cooldown_until: float,
) -> CommittedSummary | None:
    """Summary, cutoff, lease release and cooldown together; None if the lease is not ours."""
    held = _lease(conn, session_id)
    if held is None or held.lease_id != lease_id:
        return None
    previous = read_summary(conn, session_id)
    if previous is not None and cutoff_seq <= previous.cutoff_seq:
        raise InvalidValue("a new summary's cutoff must follow the committed one")
    at = now(conn)
    summary = CommittedSummary(
        session_id=session_id,
        summary=text,
        cutoff_seq=cutoff_seq,
        summarized_messages=(previous.summarized_messages if previous else 0) + added,
        summarizer=summarizer,
        created_at=at,
    )
    upsert_summary(conn, summary)
    _end_lease(conn, session_id, cooldown_until, at)
    return summary


def release_lease(conn: sqlite3.Connection, session_id: str, lease_id: str) -> bool:
    """Free the lease if it is still ours (no cooldown: nothing was committed)."""
    cursor = conn.execute(
        "UPDATE context_leases SET lease_id = NULL, owner = NULL, expires_at = NULL, "
        "updated_at = ? WHERE session_id = ? AND lease_id = ?",
        [now(conn), session_id, lease_id],
    )
    return cursor.rowcount == 1
