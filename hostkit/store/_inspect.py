"""The store's inspect group: owner-checked, read-only queries behind the inspectors.

Every query verifies the scope and applies ``owner_predicate`` inside each
statement, so a foreign and a missing id get the same
``NotFoundOrUnauthorized`` (the real reason goes to the Host-only audit). The
values hold counts, budgets, names and ids, never message content; pricing
and presentation are ``hostkit.inspect``'s.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.store._context_rows import decode_decision, read_calibration, rows
from hostkit.store._context_values import Calibration
from hostkit.store._lease_rows import shown_status
from hostkit.store._owned import (
    OwnedKind,
    decode_ranked_cursor,
    encode_cursor,
    owner_predicate,
)
from hostkit.store._sessions import read_effect_audit
from hostkit.types import AuditRecord, ContextDecision, Page, PrincipalScope, SessionRecord

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "MAX_INSPECT_ROWS",
    "InspectQueries",
    "RecordedDecision",
    "SessionActivity",
    "SessionUsage",
    "SqlInspectQueries",
    "TurnDecisions",
    "TurnHeader",
    "TurnUsageRows",
    "UsageRow",
    "UsageSums",
]

# The most turns or steps one inspect query returns.
MAX_INSPECT_ROWS = 500


@dataclass(frozen=True, slots=True)
class TurnHeader:
    """A turn as the inspectors show it.

    ``status`` is the recorded one, except ``INTERRUPTED`` for a turn still recorded
    ``running`` whose holder is gone (``shown_status``): nobody runs it any more.
    """

    session_id: str
    turn_id: str
    status: str
    core_id: str
    started_at: str


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A recorded ``prepare()`` decision, when it was recorded, and the provider's count.

    ``reported_input_tokens`` is None until usage for the decision is observed.
    """

    decision: ContextDecision
    at: str
    reported_input_tokens: int | None


@dataclass(frozen=True, slots=True)
class TurnDecisions:
    """One turn's decisions in step order (``turn`` None: the session has no turns yet)."""

    session_id: str
    turn: TurnHeader | None
    decisions: tuple[RecordedDecision, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One observed provider call with the estimates of the decision it answered.

    ``estimator`` and ``exact_estimator`` are the decision's: whether its
    estimate was counted by the provider's own tokenizer or by a stand-in.
    ``summary`` marks a context compaction's summarizer call, made while
    preparing step ``step_id`` (not a step of the turn's loop).
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
    finish_reason: str | None
    provider_request_id: str | None
    at: str
    estimator: str | None = None
    exact_estimator: bool = False
    summary: bool = False


@dataclass(frozen=True, slots=True)
class UsageSums:
    """Usage summed over every observed provider call of one provider/model (``steps``),
    a compaction's summarizer calls included."""

    provider: str
    model: str
    steps: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@dataclass(frozen=True, slots=True)
class TurnUsageRows:
    """One turn's first observed steps and its sums over every step."""

    turn: TurnHeader
    steps: tuple[UsageRow, ...]
    steps_truncated: bool
    sums: tuple[UsageSums, ...]


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """A session's newest turns (oldest first), its calibration and its sums over every turn."""

    session_id: str
    turns: tuple[TurnUsageRows, ...]
    turns_truncated: bool
    calibration: Calibration | None
    sums: tuple[UsageSums, ...]


@dataclass(frozen=True, slots=True)
class SessionActivity:
    """A session with what a person scanning a list wants: who ran in it, how much, how it went.

    ``agent`` and ``last_outcome`` are those of its newest turn (None before
    the first; ``INTERRUPTED`` as in ``TurnHeader``); ``last_activity`` is when
    that turn ended (or started, while it runs), else when the session was created.
    """

    session: SessionRecord
    agent: str | None
    turns: int
    last_activity: str
    last_outcome: str | None


class InspectQueries(ABC):
    """Owner-checked reads of what the Host recorded; every adapter implements it.

    Each method is one read transaction, and writes nothing: a running turn
    whose holder is gone shows ``INTERRUPTED`` (``TurnHeader``) until
    recovery ends it. ``ScopeError`` for a scope this store
    did not issue, ``NotFoundOrUnauthorized`` for a missing or foreign id,
    ``InvalidValue`` for a bound outside 1..``MAX_INSPECT_ROWS``, ``StoreError``
    when a recorded decision does not decode.
    """

    @abstractmethod
    async def turn_decisions(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        limit: int = 64,
    ) -> TurnDecisions:
        """The first ``limit`` decisions of ``turn_id``, or of the session's latest turn.

        Given both ids, the turn must belong to the session. A session without
        turns gives ``turn`` None and no decisions. ``InvalidValue`` when
        neither id is given.
        """

    async def recent_sessions(
        self, scope: PrincipalScope, *, limit: int = 50
    ) -> tuple[SessionActivity, ...]:
        """The scope's sessions, most recent activity first, ties the newer session first
        (at most ``limit``): ``session_page``'s first page."""
        return (await self.session_page(scope, limit=limit)).items

    @abstractmethod
    async def session_page(
        self, scope: PrincipalScope, *, cursor: str | None = None, limit: int = 50
    ) -> Page[SessionActivity]:
        """The scope's sessions in ``recent_sessions``' order, keyset-paginated: pass
        ``next_cursor`` back as ``cursor`` for the next page.

        The cursor holds the last row's activity and row id, so the pages list each
        session once, in order: a session active since (or new) ranks before the
        cursor and is on an earlier page, never again on a later one.
        ``InvalidValue`` for a cursor this store did not issue.
        """

    @abstractmethod
    async def session_usage(
        self, scope: PrincipalScope, session_id: str, *, turns: int = 50, steps: int = 64
    ) -> SessionUsage:
        """Usage of the session's newest ``turns`` turns, the first ``steps`` of each.

        Sums count every observed step of the session (and of each turn shown),
        whatever the bounds cut.
        """

    @abstractmethod
    async def effect_audits(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        turn_id: str | None = None,
        limit: int = 100,
    ) -> tuple[AuditRecord, ...]:
        """The persisted audit views of a session's effect calls (or one turn's): the newest
        ``limit`` of them, in order (oldest of them first).

        Each is an ``effect.<name>`` audit row: ``subject`` is the call id and
        ``detail`` holds ``turn_id``, ``call_id``, ``outcome`` and the view
        (a terminal run's working directory, environment names, executable and
        launcher; a fetch's origin and validated addresses per hop). The audit
        log is Host-only: ``ScopeError`` unless ``scope`` is an operator's.
        A missing session, or a turn not in it, is ``NotFoundOrUnauthorized``.
        """


def _bounded(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_INSPECT_ROWS:
        raise InvalidValue(f"{name} must be between 1 and {MAX_INSPECT_ROWS}")
    return value


class SqlInspectQueries(InspectQueries):
    """The SQLite adapter of InspectQueries."""

    def __init__(self, db: RowStore) -> None:
        self._db = db
        # The store's clock, which every lease is in (``RuntimeStore.now``).
        self._clock: Callable[[], float] = db.now

    async def turn_decisions(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        limit: int = 64,
    ) -> TurnDecisions:
        if session_id is None and turn_id is None:
            raise InvalidValue("give a session_id or a turn_id")
        _bounded("limit", limit)
        where, params = owner_predicate(self._db.verify_scope(scope))
        clock = self._clock

        def read(conn: sqlite3.Connection) -> TurnDecisions | None:
            turn = _turn(
                conn, where, params, session_id=session_id, turn_id=turn_id, now_epoch=clock()
            )
            if turn is None:
                if turn_id is None and _session_owned(conn, where, params, session_id or ""):
                    return TurnDecisions(session_id or "", None, (), False)
                return None
            found = rows(
                conn,
                "SELECT d.decision_id, d.session_id, d.turn_id, d.step_id, d.kind, d.summary, "
                "d.at, u.input_tokens AS reported FROM context_decisions d "
                "JOIN session_owners o ON o.session_id = d.session_id "
                "LEFT JOIN usage_observations u ON u.decision_id = d.decision_id "
                # A summarizer call is not a prepare() decision: the budget view shows it.
                f"WHERE d.turn_id = ? AND d.session_id = ? AND d.kind <> 'summary' AND {where} "
                "ORDER BY d.step_id, d.at LIMIT ?",
                [turn.turn_id, turn.session_id, *params, limit + 1],
            )
            return TurnDecisions(
                session_id=turn.session_id,
                turn=turn,
                decisions=tuple(
                    RecordedDecision(decode_decision(row), row["at"], row["reported"])
                    for row in found[:limit]
                ),
                truncated=len(found) > limit,
            )

        def why(conn: sqlite3.Connection) -> str | None:
            # An owned turn asked for under another (owned or not) session id.
            if turn_id is None or session_id is None:
                return None
            found = _turn(conn, where, params, session_id=None, turn_id=turn_id, now_epoch=clock())
            return "other_session" if found is not None else None

        kind: OwnedKind = "turn" if turn_id is not None else "session"
        object_id = turn_id if turn_id is not None else session_id
        return await self._db.owned(scope, kind, object_id or "", read, why=why)

    async def session_page(
        self, scope: PrincipalScope, *, cursor: str | None = None, limit: int = 50
    ) -> Page[SessionActivity]:
        _bounded("limit", limit)
        after = () if cursor is None else decode_ranked_cursor(cursor)
        where, params = owner_predicate(self._db.verify_scope(scope))
        sql = _RECENT_SESSIONS.format(where=where, after=_AFTER if after else "")
        clock = self._clock

        def read(conn: sqlite3.Connection) -> Page[SessionActivity]:
            # One row past the page says whether there is another.
            found = rows(conn, sql, [*params, *after, limit + 1])
            now_epoch = clock()
            shown = found[:limit]
            last = shown[-1] if len(found) > limit else None
            return Page(
                tuple(_activity(conn, row, now_epoch) for row in shown),
                None if last is None else encode_cursor(last["last_activity"], last["row_id"]),
            )

        return await self._db.read(read)

    async def session_usage(
        self, scope: PrincipalScope, session_id: str, *, turns: int = 50, steps: int = 64
    ) -> SessionUsage:
        turn_limit = _bounded("turns", turns)
        step_limit = _bounded("steps", steps)
        where, params = owner_predicate(self._db.verify_scope(scope))
        clock = self._clock

        def read(conn: sqlite3.Connection) -> SessionUsage | None:
            if not _session_owned(conn, where, params, session_id):
                return None
            now_epoch = clock()
            recent = rows(
                conn,
                f"SELECT {_TURN_COLUMNS} FROM turns t "
                "JOIN session_owners o ON o.session_id = t.session_id "
                f"WHERE t.session_id = ? AND {where} ORDER BY t.id DESC LIMIT ?",
                [session_id, *params, turn_limit + 1],
            )
            shown = [
                _turn_usage(conn, _header(conn, row, now_epoch), where, params, step_limit)
                for row in reversed(recent[:turn_limit])
            ]
            sums = rows(
                conn,
                f"SELECT {_USAGE_SUMS} FROM usage_observations u "
                "JOIN session_owners o ON o.session_id = u.session_id "
                f"WHERE u.session_id = ? AND {where} GROUP BY u.provider, u.model "
                "ORDER BY u.provider, u.model",
                [session_id, *params],
            )
            return SessionUsage(
                session_id=session_id,
                turns=tuple(shown),
                turns_truncated=len(recent) > turn_limit,
                calibration=read_calibration(conn, session_id),
                sums=tuple(_sums(row) for row in sums),
            )

        return await self._db.owned(scope, "session", session_id, read)

    async def effect_audits(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        turn_id: str | None = None,
        limit: int = 100,
    ) -> tuple[AuditRecord, ...]:
        _bounded("limit", limit)
        verified = self._db.verify_scope(scope)
        if verified.authority != "operator":
            raise ScopeError("effect audit views require operator authority")
        where, params = owner_predicate(verified)

        def read(conn: sqlite3.Connection) -> tuple[bool, tuple[AuditRecord, ...]] | None:
            # A mistyped id is "not found", never an empty list that looks like a quiet one.
            if not _session_owned(conn, where, params, session_id):
                return None
            if turn_id is not None and not rows(
                conn,
                "SELECT 1 FROM turns WHERE turn_id = ? AND session_id = ?",
                [turn_id, session_id],
            ):
                return False, ()
            return True, read_effect_audit(
                conn, session_id=session_id, turn_id=turn_id, limit=limit
            )

        turn_known, audits = await self._db.owned(scope, "session", session_id, read)
        if not turn_known:
            raise NotFoundOrUnauthorized("turn")
        return audits


# The scope's sessions by last activity, with their turn counts (schema v25's columns,
# kept by triggers with the turns): the walk of ``sessions_last_activity`` newest first
# (from a cursor's key down: ``_AFTER``) stops at the limit, and only the sessions shown
# have their newest turn read.
_RECENT_SESSIONS = (
    "SELECT s.id AS row_id, s.session_id, s.created_at, s.status, s.title, o.owner_kind, "
    "o.parent_session_id, o.parent_turn_id, lt.core_id AS agent, "
    "lt.turn_id AS last_turn_id, lt.status AS last_outcome, s.last_activity, "
    "s.turn_count AS turns "
    "FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
    "LEFT JOIN turns lt ON lt.id = "
    "(SELECT MAX(n.id) FROM turns n WHERE n.session_id = s.session_id) "
    "WHERE {where}{after} ORDER BY s.last_activity DESC, s.id DESC LIMIT ?"
)
# Below the last row shown, in the order's own terms (a row value, as the index holds it).
_AFTER = " AND (s.last_activity, s.id) < (?, ?)"
_TURN_COLUMNS = "t.session_id, t.turn_id, t.status, t.core_id, t.started_at"
_USAGE_SUMS = (
    "u.provider, u.model, COUNT(*) AS steps, SUM(u.input_tokens) AS input_tokens, "
    "SUM(u.output_tokens) AS output_tokens, SUM(u.cache_read_tokens) AS cache_read_tokens, "
    "SUM(u.cache_write_tokens) AS cache_write_tokens"
)


def _header(conn: sqlite3.Connection, row: sqlite3.Row, now_epoch: float) -> TurnHeader:
    return TurnHeader(
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        status=shown_status(conn, row["turn_id"], row["status"], now_epoch),
        core_id=row["core_id"],
        started_at=row["started_at"],
    )


def _turn(
    conn: sqlite3.Connection,
    where: str,
    params: list[Any],
    *,
    session_id: str | None,
    turn_id: str | None,
    now_epoch: float,
) -> TurnHeader | None:
    clauses: list[str] = []
    args: list[Any] = []
    if turn_id is not None:
        clauses.append("t.turn_id = ?")
        args.append(turn_id)
    if session_id is not None:
        clauses.append("t.session_id = ?")
        args.append(session_id)
    found = rows(
        conn,
        f"SELECT {_TURN_COLUMNS} FROM turns t "
        "JOIN session_owners o ON o.session_id = t.session_id "
        f"WHERE {' AND '.join(clauses)} AND {where} ORDER BY t.id DESC LIMIT 1",
        [*args, *params],
    )
    return _header(conn, found[0], now_epoch) if found else None


def _activity(conn: sqlite3.Connection, row: sqlite3.Row, now_epoch: float) -> SessionActivity:
    session = SessionRecord(
        session_id=row["session_id"],
        created_at=row["created_at"],
        status=row["status"],
        title=row["title"],
        owner_kind=row["owner_kind"],
        parent_session_id=row["parent_session_id"],
        parent_turn_id=row["parent_turn_id"],
    )
    return SessionActivity(
        session=session,
        agent=row["agent"],
        turns=int(row["turns"]),
        last_activity=row["last_activity"],
        last_outcome=None
        if row["last_outcome"] is None
        else shown_status(conn, row["last_turn_id"], row["last_outcome"], now_epoch),
    )


def _session_owned(
    conn: sqlite3.Connection, where: str, params: list[Any], session_id: str
) -> bool:
    return bool(
        rows(
            conn,
            f"SELECT 1 FROM session_owners o WHERE o.session_id = ? AND {where}",
            [session_id, *params],
        )
    )


def _sums(row: sqlite3.Row) -> UsageSums:
    return UsageSums(
        provider=row["provider"],
        model=row["model"],
        steps=int(row["steps"]),
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=int(row["cache_write_tokens"]),
    )


def _turn_usage(
    conn: sqlite3.Connection, turn: TurnHeader, where: str, params: list[Any], limit: int
) -> TurnUsageRows:
    # Through the decisions' (turn_id, step_id) index; each usage row names its decision.
    joins = (
        "FROM context_decisions d JOIN usage_observations u ON u.decision_id = d.decision_id "
        "JOIN session_owners o ON o.session_id = d.session_id "
        f"WHERE d.turn_id = ? AND d.session_id = ? AND {where}"
    )
    found = rows(
        conn,
        "SELECT d.decision_id, d.session_id, d.turn_id, d.step_id, d.kind, d.summary, "
        "u.provider, u.model, u.input_tokens, u.output_tokens, u.cache_read_tokens, "
        "u.cache_write_tokens, u.estimated_input_tokens, u.finish_reason, u.provider_request_id, "
        "u.at "
        f"{joins} ORDER BY d.step_id, u.id LIMIT ?",
        [turn.turn_id, turn.session_id, *params, limit + 1],
    )
    sums = rows(
        conn,
        f"SELECT {_USAGE_SUMS} {joins} GROUP BY u.provider, u.model ORDER BY u.provider, u.model",
        [turn.turn_id, turn.session_id, *params],
    )
    return TurnUsageRows(
        turn=turn,
        steps=tuple(_usage(row) for row in found[:limit]),
        steps_truncated=len(found) > limit,
        sums=tuple(_sums(row) for row in sums),
    )


def _usage(row: sqlite3.Row) -> UsageRow:
    decision = decode_decision(row)
    return UsageRow(
        step_id=decision.step_id,
        decision_id=decision.decision_id,
        provider=row["provider"],
        model=row["model"],
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=int(row["cache_write_tokens"]),
        estimated_input_tokens=row["estimated_input_tokens"],
        raw_input_tokens=decision.raw_input_tokens,
        finish_reason=row["finish_reason"],
        provider_request_id=row["provider_request_id"],
        at=row["at"],
        estimator=decision.estimator,
        exact_estimator=decision.exact_estimator,
        summary=decision.kind == "summary",
    )
