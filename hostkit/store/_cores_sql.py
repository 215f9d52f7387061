"""The SQLite adapter of the cores group: ``core_history`` and ``core_state`` (migration 14)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hostkit.errors import InvalidValue, LeaseLost, StaleClaim, StateConflict
from hostkit.freeze import thaw
from hostkit.store._approval_revocations import insert_revocation
from hostkit.store._checks import check_count, check_instant
from hostkit.store._cores import ANY_VERSION, MAX_CORE_HISTORY, CoreStore
from hostkit.store._sessions import insert_audit
from hostkit.store._turn_rows import fence
from hostkit.store._turn_values import SessionLease
from hostkit.types import (
    MAX_STATE_KEY,
    CoreEvent,
    GateOutcome,
    SessionPin,
    StateEntry,
    is_core_id,
    is_revision,
    state_json,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["SqlCoreStore"]

_MAX_SCOPE = 256
# The events that move the live revision (a refused promotion moved nothing), and in SQL.
_MOVES = ("promote", "rollback")
_MOVED = f"action IN ({', '.join(repr(action) for action in _MOVES)})"
_EVENT_COLUMNS = "id, core_id, action, revision, previous, gates, security_diff, actor, reason, at"


def _core(core_id: object) -> str:
    if not is_core_id(core_id):
        raise InvalidValue("core_id must be a core id (a-z, 0-9, '_', '-'; at most 64)")
    assert isinstance(core_id, str)
    return core_id


def _revision(revision: object) -> str:
    """A full commit id, as every event records (``is_revision``)."""
    if not is_revision(revision):
        raise InvalidValue("revision must be a full commit id (40 lowercase hex digits)")
    assert isinstance(revision, str)
    return revision


def _scope(scope: object) -> str:
    if not isinstance(scope, str) or len(scope) > _MAX_SCOPE:
        raise InvalidValue(f"scope must be '' (core-wide) or a session id of at most {_MAX_SCOPE}")
    return scope


def _key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_STATE_KEY or "\x00" in key:
        raise InvalidValue(
            f"a state key is a non-empty string of at most {MAX_STATE_KEY} characters"
        )
    return key


def _rows(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor whose rows are read by column name (the connection's factory is plain tuples)."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor


def _event(row: sqlite3.Row) -> CoreEvent:
    return CoreEvent(
        core_id=row["core_id"],
        action=row["action"],
        revision=row["revision"],
        previous=row["previous"],
        gates=tuple(
            GateOutcome(gate["gate"], bool(gate["passed"]), gate.get("detail", ""))
            for gate in json.loads(row["gates"])
        ),
        actor=row["actor"],
        at=row["at"],
        reason=row["reason"],
        security_diff=json.loads(row["security_diff"]),
        event_id=row["id"],
    )


def _event_row(event: CoreEvent) -> list[Any]:
    gates = json.dumps(
        [{"gate": g.gate, "passed": g.passed, "detail": g.detail} for g in event.gates],
        ensure_ascii=False,
    )
    diff = json.dumps(thaw(event.security_diff), ensure_ascii=False, sort_keys=True)
    return [
        event.core_id,
        event.action,
        event.revision,
        event.previous,
        gates,
        diff,
        event.actor,
        event.reason,
        event.at,
    ]


def _insert_event(conn: sqlite3.Connection, row: list[Any]) -> int:
    cursor = conn.execute(
        "INSERT INTO core_history (core_id, action, revision, previous, gates, "
        "security_diff, actor, reason, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        row,
    )
    return int(cursor.fetchone()[0])


def _live(conn: sqlite3.Connection, core_id: str) -> str | None:
    """The revision of the newest move of ``core_id`` (the index covers core_id, id)."""
    found = conn.execute(
        f"SELECT revision FROM core_history WHERE core_id = ? AND {_MOVED} "
        "ORDER BY id DESC LIMIT 1",
        [core_id],
    ).fetchone()
    return None if found is None else str(found[0])


def _entry(row: sqlite3.Row) -> StateEntry:
    return StateEntry(
        core_id=row["core_id"],
        scope=row["scope"],
        key=row["key"],
        value=json.loads(row["value"]),
        version=row["version"],
    )


class SqlCoreStore(CoreStore):
    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def record_event(self, event: CoreEvent) -> CoreEvent:
        if not isinstance(event, CoreEvent):
            raise InvalidValue("record_event takes a CoreEvent")
        if event.action != "refused":
            raise InvalidValue("record_event records refused attempts; a move is move_live")
        row = _event_row(event)

        def write(conn: sqlite3.Connection) -> int:
            return _insert_event(conn, row)

        return replace(event, event_id=await self._db.write(write))

    async def move_live(self, event: CoreEvent) -> CoreEvent:
        if not isinstance(event, CoreEvent):
            raise InvalidValue("move_live takes a CoreEvent")
        if event.action not in _MOVES:
            raise InvalidValue("move_live records a promote or a rollback")
        row = _event_row(event)

        def write(conn: sqlite3.Connection) -> int:
            if _live(conn, event.core_id) != event.previous:
                raise StaleClaim(event.core_id, subject="core live revision")
            event_id = _insert_event(conn, row)
            # Answers given for the core's previous revision end in every Host process.
            insert_revocation(
                conn,
                actor=event.actor,
                reason=f"the core's live revision moved ({event.action})",
                core_id=event.core_id,
            )
            insert_audit(
                conn,
                f"core.{event.action}",
                principal_id=event.actor,
                subject=event.core_id,
                reason=event.reason,
                detail={"revision": event.revision, "previous": event.previous},
            )
            return event_id

        return replace(event, event_id=await self._db.write(write))

    async def live_revision(self, core_id: str) -> str | None:
        core_id = _core(core_id)
        return await self._db.read(lambda conn: _live(conn, core_id))

    async def history(
        self, core_id: str | None = None, *, limit: int = 100, moves_only: bool = False
    ) -> tuple[CoreEvent, ...]:
        limit = check_count("limit", limit, MAX_CORE_HISTORY)
        if core_id is not None:
            core_id = _core(core_id)
        if not isinstance(moves_only, bool):
            raise InvalidValue("moves_only must be True or False")
        where: list[str] = []
        params: list[object] = []
        if core_id is not None:
            where.append("core_id = ?")
            params.append(core_id)
        if moves_only:
            where.append(_MOVED)
        filtered = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {_EVENT_COLUMNS} FROM core_history{filtered} ORDER BY id DESC LIMIT ?"
        params.append(limit)

        def read(conn: sqlite3.Connection) -> tuple[CoreEvent, ...]:
            return tuple(_event(row) for row in _rows(conn).execute(sql, params))

        return await self._db.read(read)

    async def was_live(self, core_id: str, revision: str) -> bool:
        core_id = _core(core_id)
        revision = _revision(revision)

        def read(conn: sqlite3.Connection) -> bool:
            found = conn.execute(
                f"SELECT 1 FROM core_history WHERE core_id = ? AND {_MOVED} "
                "AND (revision = ? OR previous = ?) LIMIT 1",
                [core_id, revision, revision],
            ).fetchone()
            return found is not None

        return await self._db.read(read)

    async def session_pins(self, core_id: str, *, limit: int = 100) -> tuple[SessionPin, ...]:
        core_id = _core(core_id)
        limit = check_count("limit", limit, MAX_CORE_HISTORY)

        def read(conn: sqlite3.Connection) -> tuple[SessionPin, ...]:
            rows = _rows(conn).execute(
                "SELECT t.session_id, t.core_revision, t.turn_id, "
                "(julianday(t.started_at) - 2440587.5) * 86400.0 AS at "
                "FROM turns t WHERE t.id IN (SELECT MAX(id) FROM turns WHERE core_id = ? "
                "GROUP BY session_id) ORDER BY t.id DESC LIMIT ?",
                [core_id, limit],
            )
            return tuple(
                SessionPin(
                    session_id=row["session_id"],
                    core_id=core_id,
                    core_revision=row["core_revision"],
                    turn_id=row["turn_id"],
                    at=float(row["at"] or 0.0),
                )
                for row in rows
            )

        return await self._db.read(read)

    async def state_get(self, core_id: str, scope: str, key: str) -> StateEntry | None:
        core_id, scope, key = _core(core_id), _scope(scope), _key(key)

        def read(conn: sqlite3.Connection) -> StateEntry | None:
            row = (
                _rows(conn)
                .execute(
                    "SELECT core_id, scope, key, value, version FROM core_state "
                    "WHERE core_id = ? AND scope = ? AND key = ?",
                    [core_id, scope, key],
                )
                .fetchone()
            )
            return None if row is None else _entry(row)

        return await self._db.read(read)

    async def state_set(
        self,
        core_id: str,
        scope: str,
        key: str,
        value: Any,
        *,
        lease: SessionLease,
        expected: int | None = ANY_VERSION,
        now: float,
    ) -> StateEntry:
        core_id, scope, key = _core(core_id), _scope(scope), _key(key)
        text = state_json(value)
        now = check_instant("now", now)
        if not isinstance(lease, SessionLease):
            raise InvalidValue("state_set takes the writing turn's SessionLease")
        if expected is not ANY_VERSION and expected is not None:
            expected = check_count("expected", expected)
        # A turn writes its own session's scope or its core's, never another's.
        if scope not in ("", lease.session_id):
            raise LeaseLost("session lease")

        def write(conn: sqlite3.Connection) -> StateEntry:
            fence(conn, lease)
            owner = conn.execute(
                "SELECT core_id FROM turns WHERE turn_id = ?", [lease.turn_id]
            ).fetchone()
            if owner is None or owner[0] != core_id:
                raise LeaseLost("session lease")
            row = (
                _rows(conn)
                .execute(
                    "SELECT version FROM core_state WHERE core_id = ? AND scope = ? AND key = ?",
                    [core_id, scope, key],
                )
                .fetchone()
            )
            current = None if row is None else int(row["version"])
            if expected is not ANY_VERSION and expected != current:
                raise StateConflict(key, expected=expected, actual=current)
            version = (current or 0) + 1
            conn.execute(
                "INSERT INTO core_state (core_id, scope, key, value, version, updated_at, turn_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (core_id, scope, key) DO UPDATE SET "
                "value = excluded.value, version = excluded.version, "
                "updated_at = excluded.updated_at, turn_id = excluded.turn_id",
                [core_id, scope, key, text, version, now, lease.turn_id],
            )
            return StateEntry(core_id, scope, key, json.loads(text), version)

        return await self._db.write(write)

    async def state_keys(
        self, core_id: str, scope: str, *, limit: int = 100
    ) -> tuple[StateEntry, ...]:
        core_id, scope = _core(core_id), _scope(scope)
        limit = check_count("limit", limit, MAX_CORE_HISTORY)

        def read(conn: sqlite3.Connection) -> tuple[StateEntry, ...]:
            rows = _rows(conn).execute(
                "SELECT core_id, scope, key, value, version FROM core_state "
                "WHERE core_id = ? AND scope = ? ORDER BY key LIMIT ?",
                [core_id, scope, limit],
            )
            return tuple(_entry(row) for row in rows)

        return await self._db.read(read)
