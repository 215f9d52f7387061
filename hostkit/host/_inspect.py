"""Inspector view-models: what a session's context decisions and usage rows say, owner-checked.

Every function takes a Host (or its store) and a Host-issued ``PrincipalScope``
and applies ``owner_predicate`` inside each SQL statement, so a foreign and a
missing id get the same ``NotFoundOrUnauthorized``. The values are frozen and
carry only what the decision and usage records hold (token counts, budgets,
layer names): never message content. The CLI tables and the notebook widgets
are drawn from these values alone.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from hostkit.effects import ApprovalStatus, PendingApproval
from hostkit.errors import InvalidValue
from hostkit.host._approvals import MAX_LIST
from hostkit.host._prices import PRICES, ModelPrice, price_for
from hostkit.store import RuntimeStore, owner_predicate
from hostkit.types import LayerSummary, PrincipalScope, SessionRecord

if TYPE_CHECKING:
    from hostkit.host._host import Host

__all__ = [
    "MAX_STEPS",
    "MAX_TURNS",
    "PRICES",
    "ApprovalRows",
    "BudgetView",
    "CalibrationView",
    "ContextStep",
    "ContextView",
    "ModelPrice",
    "SessionRows",
    "StepUsage",
    "TokenTotals",
    "TurnUsage",
    "approval_rows",
    "budget_view",
    "context_view",
    "price_for",
    "session_rows",
]

# Bounds of every list a view holds: the newest turns of a session, the first steps of a turn.
MAX_TURNS = 50
MAX_STEPS = 64

Source: TypeAlias = "Host | RuntimeStore"


# -- context ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextStep:
    """One ``prepare()`` decision of a turn, as ``context_decisions`` recorded it.

    Overflow decisions record only their reason and the tokens needed before
    history (``estimated_input_tokens``); their budgets and layers are empty.
    ``reported_input_tokens`` is the provider's count when usage was observed.
    """

    step_id: int
    decision_id: str
    kind: str
    at: str
    layers: tuple[LayerSummary, ...]
    estimated_input_tokens: int | None
    raw_input_tokens: int | None
    framing_tokens: int | None
    hard_budget: int | None
    output_budget: int | None
    context_window: int | None
    summary_used: bool
    cutoff: int | None
    pruned_results: int
    dropped_messages: int
    protected_dropped: bool
    compaction: str | None
    estimator: str | None
    exact_estimator: bool
    calibration: float | None
    overflow_reason: str | None
    reported_input_tokens: int | None

    @property
    def badges(self) -> tuple[str, ...]:
        """What happened to the step's context, as short labels (CLI and notebook alike)."""
        badges = []
        if self.summary_used:
            badges.append("summary used")
        if self.pruned_results:
            badges.append(f"pruned {self.pruned_results}")
        if self.dropped_messages:
            badges.append(f"dropped {self.dropped_messages}")
        if self.compaction:
            badges.append(f"compaction {self.compaction}")
        if self.overflow_reason:
            badges.append(f"overflow {self.overflow_reason}")
        return tuple(badges)


@dataclass(frozen=True, slots=True)
class ContextView:
    """The context decisions of one turn (``turn_id`` None: the session has no turns yet)."""

    session_id: str
    turn_id: str | None
    turn_status: str | None
    core_id: str | None
    started_at: str | None
    steps: tuple[ContextStep, ...]
    steps_truncated: bool


async def context_view(
    source: Source,
    scope: PrincipalScope,
    *,
    session_id: str | None = None,
    turn_id: str | None = None,
    steps: int = MAX_STEPS,
) -> ContextView:
    """One turn's decisions (``turn_id``), or those of the session's latest turn.

    Given both, the turn must belong to the session. Raises
    ``NotFoundOrUnauthorized`` for a missing or foreign id, ``InvalidValue``
    when neither id is given or ``steps`` is outside 1..``MAX_STEPS``.
    """
    if session_id is None and turn_id is None:
        raise InvalidValue("context_view needs a session_id or a turn_id")
    limit = _bounded("steps", steps, MAX_STEPS)
    store = _store(source)
    where, params = owner_predicate(store.verify_scope(scope))

    def read(conn: sqlite3.Connection) -> ContextView | None:
        if turn_id is not None:
            clauses, args = ["t.turn_id = ?"], [turn_id]
            if session_id is not None:
                clauses.append("t.session_id = ?")
                args.append(session_id)
        else:
            clauses, args = ["t.session_id = ?"], [session_id]
        turn = conn.execute(
            "SELECT t.session_id, t.turn_id, t.status, t.core_id, t.started_at FROM turns t "
            "JOIN session_owners o ON o.session_id = t.session_id "
            f"WHERE {' AND '.join(clauses)} AND {where} ORDER BY t.id DESC LIMIT 1",
            [*args, *params],
        ).fetchone()
        if turn is None:
            if turn_id is None and _session_owned(conn, where, params, session_id or ""):
                return ContextView(session_id or "", None, None, None, None, (), False)
            return None
        rows = conn.execute(
            "SELECT d.step_id, d.decision_id, d.kind, d.at, d.summary, u.input_tokens "
            "FROM context_decisions d JOIN session_owners o ON o.session_id = d.session_id "
            "LEFT JOIN usage_observations u ON u.decision_id = d.decision_id "
            f"WHERE d.turn_id = ? AND d.session_id = ? AND {where} "
            "ORDER BY d.step_id, d.at LIMIT ?",
            [turn[1], turn[0], *params, limit + 1],
        ).fetchall()
        return ContextView(
            session_id=turn[0],
            turn_id=turn[1],
            turn_status=turn[2],
            core_id=turn[3],
            started_at=turn[4],
            steps=tuple(_context_step(row) for row in rows[:limit]),
            steps_truncated=len(rows) > limit,
        )

    kind, object_id = ("turn", turn_id) if turn_id is not None else ("session", session_id)
    return await store.owned(scope, kind, object_id or "", read)


def _context_step(row: tuple[Any, ...]) -> ContextStep:
    step_id, decision_id, kind, at, summary, reported = row
    data = _json(summary)
    overflow = kind == "overflow"
    layers = tuple(
        LayerSummary(
            str(layer.get("name", "")),
            _int(layer.get("tokens")) or 0,
            _int(layer.get("items")) or 0,
            _int(layer.get("pruned")) or 0,
        )
        for layer in data.get("layers", ())
        if isinstance(layer, Mapping)
    )
    calibration = data.get("calibration")
    return ContextStep(
        step_id=step_id,
        decision_id=decision_id,
        kind=kind,
        at=at,
        layers=layers,
        estimated_input_tokens=_int(data.get("fixed" if overflow else "estimated_input_tokens")),
        raw_input_tokens=_int(data.get("raw_input_tokens")),
        framing_tokens=_int(data.get("framing_tokens")),
        hard_budget=_int(data.get("hard_budget")),
        output_budget=_int(data.get("output_budget")),
        context_window=_int(data.get("context_window")),
        summary_used=bool(data.get("summary_used", False)),
        cutoff=_int(data.get("cutoff")),
        pruned_results=_int(data.get("pruned_results")) or 0,
        dropped_messages=_int(data.get("dropped_messages")) or 0,
        protected_dropped=data.get("protected_dropped") is True,
        compaction=_text(data.get("compaction")),
        estimator=_text(data.get("estimator")),
        exact_estimator=bool(data.get("exact_estimator", False)),
        calibration=float(calibration) if isinstance(calibration, int | float) else None,
        overflow_reason=_text(data.get("reason")) if overflow else None,
        reported_input_tokens=reported,
    )


# -- budget -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenTotals:
    """Summed usage; ``cost_usd`` covers the priced steps (None when none is priced)."""

    steps: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    unpriced_steps: int


@dataclass(frozen=True, slots=True)
class StepUsage:
    """One observed provider call: reported buckets, the estimate, the error and the cost.

    ``error_pct`` is (estimate - reported) / reported * 100, against
    ``input_tokens`` (which includes the cache buckets); positive errs high.
    """

    step_id: int
    decision_id: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    estimated_input_tokens: int | None
    raw_input_tokens: int | None
    error_pct: float | None
    finish_reason: str | None
    cost_usd: float | None
    at: str


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """One turn's observed steps (at most ``MAX_STEPS``) and its totals over every step."""

    turn_id: str
    status: str
    core_id: str
    started_at: str
    steps: tuple[StepUsage, ...]
    totals: TokenTotals
    steps_truncated: bool


@dataclass(frozen=True, slots=True)
class CalibrationView:
    """The session's calibration row: reported / raw estimate for one provider/model/estimator."""

    provider: str
    model: str
    estimator: str
    ratio: float
    samples: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class BudgetView:
    """A session's usage: its newest turns oldest first, calibration, totals over every turn."""

    session_id: str
    turns: tuple[TurnUsage, ...]
    calibration: CalibrationView | None
    totals: TokenTotals
    turns_truncated: bool


_USAGE_SUMS = (
    "u.provider, u.model, COUNT(*), SUM(u.input_tokens), SUM(u.output_tokens), "
    "SUM(u.cache_read_tokens), SUM(u.cache_write_tokens)"
)


async def budget_view(
    source: Source,
    scope: PrincipalScope,
    session_id: str,
    *,
    prices: Mapping[str, ModelPrice] | None = None,
    turns: int = MAX_TURNS,
    steps: int = MAX_STEPS,
) -> BudgetView:
    """Usage of the session's newest ``turns`` turns, per step, with cost where priced.

    Raises ``NotFoundOrUnauthorized`` for a missing or foreign session and
    ``InvalidValue`` for a bound outside 1..``MAX_TURNS``/``MAX_STEPS``.
    """
    turn_limit = _bounded("turns", turns, MAX_TURNS)
    step_limit = _bounded("steps", steps, MAX_STEPS)
    table = {**PRICES, **(prices or {})}
    store = _store(source)
    where, params = owner_predicate(store.verify_scope(scope))

    def read(conn: sqlite3.Connection) -> BudgetView | None:
        if not _session_owned(conn, where, params, session_id):
            return None
        recent = conn.execute(
            "SELECT t.turn_id, t.status, t.core_id, t.started_at FROM turns t "
            "JOIN session_owners o ON o.session_id = t.session_id "
            f"WHERE t.session_id = ? AND {where} ORDER BY t.id DESC LIMIT ?",
            [session_id, *params, turn_limit + 1],
        ).fetchall()
        shown = [
            _turn_usage(conn, row, session_id, where, params, step_limit, table)
            for row in reversed(recent[:turn_limit])
        ]
        calibration = conn.execute(
            "SELECT c.provider, c.model, c.estimator, c.ratio, c.samples, c.updated_at "
            "FROM context_calibration c JOIN session_owners o ON o.session_id = c.session_id "
            f"WHERE c.session_id = ? AND {where}",
            [session_id, *params],
        ).fetchone()
        sums = conn.execute(
            f"SELECT {_USAGE_SUMS} FROM usage_observations u "
            "JOIN session_owners o ON o.session_id = u.session_id "
            f"WHERE u.session_id = ? AND {where} GROUP BY u.provider, u.model",
            [session_id, *params],
        ).fetchall()
        return BudgetView(
            session_id=session_id,
            turns=tuple(shown),
            calibration=CalibrationView(*calibration) if calibration else None,
            totals=_totals(sums, table),
            turns_truncated=len(recent) > turn_limit,
        )

    return await store.owned(scope, "session", session_id, read)


def _turn_usage(
    conn: sqlite3.Connection,
    turn: tuple[Any, ...],
    session_id: str,
    where: str,
    params: list[Any],
    limit: int,
    table: Mapping[str, ModelPrice],
) -> TurnUsage:
    # Through the decisions' (turn_id, step_id) index; each usage row names its decision.
    joins = (
        "FROM context_decisions d JOIN usage_observations u ON u.decision_id = d.decision_id "
        "JOIN session_owners o ON o.session_id = d.session_id "
        f"WHERE d.turn_id = ? AND d.session_id = ? AND {where}"
    )
    rows = conn.execute(
        "SELECT d.step_id, d.decision_id, u.provider, u.model, u.input_tokens, u.output_tokens, "
        "u.cache_read_tokens, u.cache_write_tokens, u.estimated_input_tokens, "
        "json_extract(d.summary, '$.raw_input_tokens'), u.finish_reason, u.at "
        f"{joins} ORDER BY d.step_id, u.id LIMIT ?",
        [turn[0], session_id, *params, limit + 1],
    ).fetchall()
    sums = conn.execute(
        f"SELECT {_USAGE_SUMS} {joins} GROUP BY u.provider, u.model",
        [turn[0], session_id, *params],
    ).fetchall()
    return TurnUsage(
        turn_id=turn[0],
        status=turn[1],
        core_id=turn[2],
        started_at=turn[3],
        steps=tuple(_step_usage(row, table) for row in rows[:limit]),
        totals=_totals(sums, table),
        steps_truncated=len(rows) > limit,
    )


def _step_usage(row: tuple[Any, ...], table: Mapping[str, ModelPrice]) -> StepUsage:
    step_id, decision_id, provider, model, inp, out, read, write, estimated, raw, finish, at = row
    price = price_for(model, table)
    return StepUsage(
        step_id=step_id,
        decision_id=decision_id,
        provider=provider,
        model=model,
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=read,
        cache_write_tokens=write,
        estimated_input_tokens=estimated,
        raw_input_tokens=_int(raw),
        error_pct=(
            round((estimated - inp) / inp * 100, 2) if estimated is not None and inp > 0 else None
        ),
        finish_reason=finish,
        cost_usd=(
            None
            if price is None
            else price.cost(
                input_tokens=inp,
                output_tokens=out,
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
        ),
        at=at,
    )


def _totals(sums: list[tuple[Any, ...]], table: Mapping[str, ModelPrice]) -> TokenTotals:
    """Totals from ``(provider, model, count, input, output, cache read, cache write)`` groups.

    Cost is linear in the buckets, so pricing each model's sums equals summing step costs.
    """
    cost: float | None = None
    unpriced = 0
    for _, model, count, inp, out, read, write in sums:
        price = price_for(model, table)
        if price is None:
            unpriced += count
            continue
        cost = (cost or 0.0) + price.cost(
            input_tokens=inp, output_tokens=out, cache_read_tokens=read, cache_write_tokens=write
        )
    return TokenTotals(
        steps=sum(row[2] for row in sums),
        input_tokens=sum(row[3] for row in sums),
        output_tokens=sum(row[4] for row in sums),
        cache_read_tokens=sum(row[5] for row in sums),
        cache_write_tokens=sum(row[6] for row in sums),
        cost_usd=cost,
        unpriced_steps=unpriced,
    )


# -- sessions and approvals ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRows:
    """The scope's newest sessions; ``truncated`` when there are more."""

    sessions: tuple[SessionRecord, ...]
    truncated: bool


async def session_rows(source: Source, scope: PrincipalScope, *, limit: int = 50) -> SessionRows:
    """Newest first, through the store's owned ``list_sessions`` (``limit`` 1..500)."""
    page = await _store(source).list_sessions(scope, limit=limit)
    return SessionRows(page.items, page.next_cursor is not None)


@dataclass(frozen=True, slots=True)
class ApprovalRows:
    """Approvals newest first with their redacted views (``status`` None: every status)."""

    approvals: tuple[PendingApproval, ...]
    status: ApprovalStatus | None
    truncated: bool


async def approval_rows(
    host: Host,
    scope: PrincipalScope,
    *,
    status: ApprovalStatus | None = "pending",
    limit: int = 50,
) -> ApprovalRows:
    """Through ``host.approvals.list`` (owner-checked; ``limit`` 1..200)."""
    _bounded("limit", limit, MAX_LIST)
    found = await host.approvals.list(scope, status=status, limit=min(limit + 1, MAX_LIST))
    return ApprovalRows(tuple(found[:limit]), status, len(found) > limit)


# -- helpers ------------------------------------------------------------------------------


def _store(source: Source) -> RuntimeStore:
    return source if isinstance(source, RuntimeStore) else source.store


def _bounded(name: str, value: int, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise InvalidValue(f"{name} must be between 1 and {most}")
    return value


def _session_owned(
    conn: sqlite3.Connection, where: str, params: list[Any], session_id: str
) -> bool:
    return (
        conn.execute(
            f"SELECT 1 FROM session_owners o WHERE o.session_id = ? AND {where}",
            [session_id, *params],
        ).fetchone()
        is not None
    )


def _json(text: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
