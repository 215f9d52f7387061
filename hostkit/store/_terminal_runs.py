"""The store's terminal-runs group: background ``terminal.run`` records that outlive a Host.

A background run is Host work with its own lifetime: the turn that started it
ends at once, the Host process may die before the run does. Its record is
written before the process is spawned (``insert``), gets the spawned root's
pid and OS start time (``mark_started``), and ends exactly once, either with
the run's own outcome (``finish``) or, when the Host that owned it is gone,
as ``orphaned`` (``mark_orphaned``). Both ends apply only to a ``running``
row, so a late finish never overwrites an orphan mark and vice versa.

``host_owner`` is ``LeaseOwner.encode()`` of the Host process that spawned
the run: a later Host tells its own runs from a dead Host's by it. That Host
renews the run's lease (``renew``) while the run lives; a Host on another
machine, which cannot tell whether the owner lives, orphans a run only once
its lease expired (``mark_orphaned(..., lease_expired=True)``), and the owner
whose renewal then finds the run no longer its own stops it.
``argv`` is never stored: only the program's base name and the argument
count (an argument may carry a value the model was given).

``insert(..., max_live=N)`` is where the per-session limit on live runs
holds: it counts the session's ``running`` rows (every principal's, every
Host's) in the same write transaction as the insert, so Hosts sharing a
database cannot together pass it. A run counts while its lease is renewed:
one whose Host died stops counting when its lease lapses.
"""

from __future__ import annotations

import math
import sqlite3
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from hostkit.errors import InvalidValue, LeaseLost, PolicyRefusal, bounded
from hostkit.store._owned import now, owner_predicate, turn_status
from hostkit.types import PrincipalScope

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "MAX_TERMINAL_RUN_LIST",
    "TERMINAL_RUN_LEASE_S",
    "NewTerminalRun",
    "SqlTerminalRunStore",
    "TerminalRunEnding",
    "TerminalRunLimit",
    "TerminalRunRecord",
    "TerminalRunState",
    "TerminalRunStore",
    "TerminalStreamStats",
]

MAX_TERMINAL_RUN_LIST = 500
# How long a background run's record stays its Host's without a renewal (seconds of the
# store's clock, RuntimeStore.now, as session leases): its Host renews it every third of this.
TERMINAL_RUN_LEASE_S = 60.0
MAX_RUN_REASON = 500
_MAX_ID = 200
_MAX_PATH = 4_096

TerminalRunState = Literal[
    "running", "succeeded", "failed", "timed_out", "cancelled", "indeterminate", "orphaned"
]
_STATES: tuple[str, ...] = get_args(TerminalRunState)
_ENDINGS = frozenset(_STATES) - {"running", "orphaned"}


class TerminalRunLimit(PolicyRefusal):
    """``insert`` found the session already at its limit of live runs; nothing was written.

    A refusal of the effect (``denied``), not a store failure: nothing may be spawned.
    """

    def __init__(self, session_id: str, limit: int) -> None:
        self.session_id = bounded(session_id, _MAX_ID)
        self.limit = limit
        super().__init__(f"at most {limit} background runs per session")


@dataclass(frozen=True, slots=True)
class TerminalStreamStats:
    """What one output stream amounted to: its size, whether the tail was cut, its artifact.

    ``artifact`` is a reference (``<spawn id>:stdout``), never a path.
    """

    total_bytes: int = 0
    truncated: bool = False
    artifact: str | None = None


@dataclass(frozen=True, slots=True)
class NewTerminalRun:
    """A background run about to be spawned (``TerminalRunStore.insert``)."""

    run_id: str
    session_id: str
    turn_id: str
    call_id: str | None
    principal_id: str
    program: str
    argc: int
    cwd: str
    sandbox: str
    host_owner: str
    lease_s: float = TERMINAL_RUN_LEASE_S


@dataclass(frozen=True, slots=True)
class TerminalRunEnding:
    """How a run ended, as ``finish`` records it (``state`` is never running/orphaned)."""

    state: TerminalRunState
    exit_code: int | None
    reason: str
    duration_s: float
    stdout: TerminalStreamStats
    stderr: TerminalStreamStats


@dataclass(frozen=True, slots=True)
class TerminalRunRecord:
    """One background run as stored. ``signal`` is set when the exit code says a signal."""

    run_id: str
    session_id: str
    turn_id: str
    call_id: str | None
    principal_id: str
    program: str
    argc: int
    cwd: str
    sandbox: str
    state: TerminalRunState
    host_owner: str
    pid: int | None
    pid_start: float | None
    spawn_id: str | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    duration_s: float | None
    stdout: TerminalStreamStats
    stderr: TerminalStreamStats
    started_at: str
    ended_at: str | None
    # Seconds of the store's clock (RuntimeStore.now); None for a run recorded before runs
    # had leases.
    lease_expires_at: float | None = None


class TerminalRunStore(ABC):
    """Durable background terminal runs; every adapter implements this group.

    ``insert``, ``mark_started``, ``renew``, ``finish``, ``get``, ``running``
    and ``mark_orphaned`` are the Host's own bookkeeping (the terminal effects
    key ``get`` by the calling principal and session, so another owner's run
    answers like a missing one). ``list`` is the owner-checked read for
    operators and inspectors. Bad input raises ``InvalidValue`` (bounded
    message) and writes nothing.
    """

    @abstractmethod
    async def insert(
        self, run: NewTerminalRun, *, max_live: int | None = None
    ) -> TerminalRunRecord:
        """Record ``run`` as ``running`` (no pid yet); a used ``run_id`` is ``InvalidValue``;
        ``LeaseLost`` when its turn no longer runs (a takeover ended it: nothing is spawned).

        With ``max_live``, ``TerminalRunLimit`` when the session already has that many
        ``running`` rows, whoever's and whichever Host's: counted in the insert's own
        transaction, so concurrent inserts never pass the limit together.
        """

    @abstractmethod
    async def mark_started(
        self, run_id: str, *, pid: int, pid_start: float | None, spawn_id: str
    ) -> bool:
        """Attach the spawned root's pid, OS start time and spawn id; False unless running."""

    @abstractmethod
    async def renew(self, run_id: str, *, host_owner: str, lease_s: float) -> bool:
        """Move the run's lease expiry to now + ``lease_s``; False (nothing written) unless
        it is still ``running`` under ``host_owner`` (another Host orphaned it)."""

    @abstractmethod
    async def finish(self, run_id: str, ending: TerminalRunEnding) -> bool:
        """Record how a running run ended; False (nothing written) when it is not running."""

    @abstractmethod
    async def mark_orphaned(
        self, run_id: str, *, host_owner: str, reason: str, lease_expired: bool = False
    ) -> bool:
        """End a run still ``running`` under ``host_owner`` as ``orphaned`` with ``reason``.

        With ``lease_expired``, only if its lease expired or it has none (checked
        in the same statement, so a renewal that lands first keeps the run). False when
        the run ended meanwhile, belongs to another owner or was renewed.
        """

    @abstractmethod
    async def get(
        self, run_id: str, *, principal_id: str, session_id: str
    ) -> TerminalRunRecord | None:
        """The run if it belongs to this principal and session; None otherwise."""

    @abstractmethod
    async def running(
        self, *, limit: int = 100, after: str | None = None
    ) -> tuple[TerminalRunRecord, ...]:
        """Runs still recorded as ``running``, oldest first; for recovery.

        ``after``: the last run id of the previous page.
        """

    @abstractmethod
    async def list(
        self, scope: PrincipalScope, *, session_id: str | None = None, limit: int = 50
    ) -> tuple[TerminalRunRecord, ...]:
        """The scope's runs (optionally of one session), newest first; ``limit`` 1..500."""


def _text(what: str, value: object, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value) or len(value) > limit:
        raise InvalidValue(f"terminal run {what} must be a string of at most {limit} characters")
    return value


def _lease(seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidValue("a terminal run lease is a positive number of seconds (at most a day)")
    if not math.isfinite(seconds) or not 0 < seconds <= 86_400:
        raise InvalidValue("a terminal run lease is a positive number of seconds (at most a day)")
    return float(seconds)


def _limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidValue(f"limit must be an integer 1-{MAX_TERMINAL_RUN_LIST}")
    if not 1 <= limit <= MAX_TERMINAL_RUN_LIST:
        raise InvalidValue(f"limit must be an integer 1-{MAX_TERMINAL_RUN_LIST}")
    return limit


def _stats(row: sqlite3.Row, name: str) -> TerminalStreamStats:
    return TerminalStreamStats(
        total_bytes=row[f"{name}_bytes"],
        truncated=bool(row[f"{name}_truncated"]),
        artifact=row[f"{name}_artifact"],
    )


def _record(row: sqlite3.Row) -> TerminalRunRecord:
    return TerminalRunRecord(
        run_id=row["run_id"],
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        call_id=row["call_id"],
        principal_id=row["principal_id"],
        program=row["program"],
        argc=row["argc"],
        cwd=row["cwd"],
        sandbox=row["sandbox"],
        state=row["state"],
        host_owner=row["host_owner"],
        pid=row["pid"],
        pid_start=row["pid_start"],
        spawn_id=row["spawn_id"],
        exit_code=row["exit_code"],
        signal=row["signal"],
        reason=row["reason"],
        duration_s=row["duration_s"],
        stdout=_stats(row, "stdout"),
        stderr=_stats(row, "stderr"),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        lease_expires_at=row["lease_expires_at"],
    )


def _select(raw: sqlite3.Connection, sql: str, params: list[Any]) -> list[sqlite3.Row]:
    cursor = raw.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


class SqlTerminalRunStore(TerminalRunStore):
    """The SQLite adapter of TerminalRunStore: the ``terminal_runs`` table (migration 8)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def insert(
        self, run: NewTerminalRun, *, max_live: int | None = None
    ) -> TerminalRunRecord:
        for what, value, limit in (
            ("run_id", run.run_id, _MAX_ID),
            ("session_id", run.session_id, _MAX_ID),
            ("turn_id", run.turn_id, _MAX_ID),
            ("principal_id", run.principal_id, _MAX_PATH),
            ("program", run.program, _MAX_PATH),
            ("cwd", run.cwd, _MAX_PATH),
            ("sandbox", run.sandbox, _MAX_ID),
            ("host_owner", run.host_owner, _MAX_PATH),
        ):
            _text(what, value, limit)
        if run.call_id is not None:
            _text("call_id", run.call_id, _MAX_ID)
        if isinstance(run.argc, bool) or not isinstance(run.argc, int) or run.argc < 1:
            raise InvalidValue("terminal run argc must be a positive integer")
        _lease(run.lease_s)
        if max_live is not None and (
            isinstance(max_live, bool) or not isinstance(max_live, int) or max_live < 1
        ):
            raise InvalidValue("max_live must be a positive integer")

        def insert(raw: sqlite3.Connection) -> TerminalRunRecord:
            exists = raw.execute(
                "SELECT 1 FROM terminal_runs WHERE run_id = ?", [run.run_id]
            ).fetchone()
            if exists is not None:
                raise InvalidValue("terminal run id already used")
            # Fenced like the turn's own writes: a turn a takeover ended (lost) while its
            # process was paused starts no background run in the session it lost.
            if turn_status(raw, run.turn_id, run.session_id) not in (None, "running"):
                raise LeaseLost("session lease")
            if max_live is not None:
                # A run whose Host stopped renewing its lease (died, or recorded before runs
                # had leases) is not live: it does not hold the session's places until a
                # restart's recovery marks it orphaned.
                (live,) = raw.execute(
                    "SELECT COUNT(*) FROM terminal_runs WHERE session_id = ? "
                    "AND state = 'running' AND lease_expires_at >= ?",
                    [run.session_id, self._db.now()],
                ).fetchone()
                if live >= max_live:
                    raise TerminalRunLimit(run.session_id, max_live)
            raw.execute(
                "INSERT INTO terminal_runs (run_id, session_id, turn_id, call_id, principal_id, "
                "program, argc, cwd, sandbox, state, host_owner, started_at, lease_expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                [
                    run.run_id,
                    run.session_id,
                    run.turn_id,
                    run.call_id,
                    run.principal_id,
                    run.program,
                    run.argc,
                    run.cwd,
                    run.sandbox,
                    run.host_owner,
                    now(raw),
                    self._db.now() + run.lease_s,
                ],
            )
            rows = _select(raw, "SELECT * FROM terminal_runs WHERE run_id = ?", [run.run_id])
            return _record(rows[0])

        return await self._db.write(insert)

    async def mark_started(
        self, run_id: str, *, pid: int, pid_start: float | None, spawn_id: str
    ) -> bool:
        _text("run_id", run_id, _MAX_ID)
        _text("spawn_id", spawn_id, _MAX_ID)
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
            raise InvalidValue("pid must be a positive integer")

        def update(raw: sqlite3.Connection) -> bool:
            cursor = raw.execute(
                "UPDATE terminal_runs SET pid = ?, pid_start = ?, spawn_id = ? "
                "WHERE run_id = ? AND state = 'running'",
                [pid, pid_start, spawn_id, run_id],
            )
            return cursor.rowcount == 1

        return await self._db.write(update)

    async def renew(self, run_id: str, *, host_owner: str, lease_s: float) -> bool:
        _text("run_id", run_id, _MAX_ID)
        _text("host_owner", host_owner, _MAX_PATH)
        _lease(lease_s)

        def update(raw: sqlite3.Connection) -> bool:
            cursor = raw.execute(
                "UPDATE terminal_runs SET lease_expires_at = ? "
                "WHERE run_id = ? AND state = 'running' AND host_owner = ?",
                [self._db.now() + lease_s, run_id, host_owner],
            )
            return cursor.rowcount == 1

        return await self._db.write(update)

    async def finish(self, run_id: str, ending: TerminalRunEnding) -> bool:
        _text("run_id", run_id, _MAX_ID)
        if ending.state not in _ENDINGS:
            raise InvalidValue(f"a run ends as one of {', '.join(sorted(_ENDINGS))}")
        code = ending.exit_code
        signal = -code if code is not None and code < 0 else None
        streams = []
        for stats in (ending.stdout, ending.stderr):
            streams += [max(0, int(stats.total_bytes)), int(stats.truncated), stats.artifact]

        def update(raw: sqlite3.Connection) -> bool:
            cursor = raw.execute(
                "UPDATE terminal_runs SET state = ?, exit_code = ?, signal = ?, reason = ?, "
                "duration_s = ?, stdout_bytes = ?, stdout_truncated = ?, stdout_artifact = ?, "
                "stderr_bytes = ?, stderr_truncated = ?, stderr_artifact = ?, ended_at = ? "
                "WHERE run_id = ? AND state = 'running'",
                [
                    ending.state,
                    code,
                    signal,
                    bounded(ending.reason, MAX_RUN_REASON),
                    ending.duration_s,
                    *streams,
                    now(raw),
                    run_id,
                ],
            )
            return cursor.rowcount == 1

        return await self._db.write(update)

    async def mark_orphaned(
        self, run_id: str, *, host_owner: str, reason: str, lease_expired: bool = False
    ) -> bool:
        _text("run_id", run_id, _MAX_ID)
        _text("host_owner", host_owner, _MAX_PATH)
        _text("reason", reason, MAX_RUN_REASON * 4)
        # A run recorded before runs had leases (NULL) has nobody to renew it.
        expired = " AND (lease_expires_at IS NULL OR lease_expires_at < ?)" if lease_expired else ""

        def update(raw: sqlite3.Connection) -> bool:
            cursor = raw.execute(
                "UPDATE terminal_runs SET state = 'orphaned', reason = ?, ended_at = ? "
                f"WHERE run_id = ? AND state = 'running' AND host_owner = ?{expired}",
                [
                    bounded(reason, MAX_RUN_REASON),
                    now(raw),
                    run_id,
                    host_owner,
                    *([self._db.now()] if lease_expired else []),
                ],
            )
            return cursor.rowcount == 1

        return await self._db.write(update)

    async def get(
        self, run_id: str, *, principal_id: str, session_id: str
    ) -> TerminalRunRecord | None:
        if not isinstance(run_id, str) or len(run_id) > _MAX_ID:
            return None  # a malformed id is a missing one

        def query(raw: sqlite3.Connection) -> TerminalRunRecord | None:
            rows = _select(
                raw,
                "SELECT * FROM terminal_runs WHERE run_id = ? AND principal_id = ? "
                "AND session_id = ?",
                [run_id, principal_id, session_id],
            )
            return _record(rows[0]) if rows else None

        return await self._db.read(query)

    async def running(
        self, *, limit: int = 100, after: str | None = None
    ) -> tuple[TerminalRunRecord, ...]:
        _limit(limit)
        where, params = "state = 'running'", []
        if after is not None:
            _text("after", after, _MAX_ID)
            where += " AND id > COALESCE((SELECT id FROM terminal_runs WHERE run_id = ?), 0)"
            params.append(after)

        def query(raw: sqlite3.Connection) -> tuple[TerminalRunRecord, ...]:
            rows = _select(
                raw,
                f"SELECT * FROM terminal_runs WHERE {where} ORDER BY id LIMIT ?",
                [*params, limit],
            )
            return tuple(_record(row) for row in rows)

        return await self._db.read(query)

    async def list(
        self, scope: PrincipalScope, *, session_id: str | None = None, limit: int = 50
    ) -> tuple[TerminalRunRecord, ...]:
        self._db.verify_scope(scope)
        _limit(limit)
        where, params = owner_predicate(scope)
        sql = (
            "SELECT r.* FROM terminal_runs r JOIN session_owners o "
            f"ON o.session_id = r.session_id WHERE {where}"
        )
        if session_id is not None:
            sql += " AND r.session_id = ?"
            params = [*params, session_id]

        def query(raw: sqlite3.Connection) -> tuple[TerminalRunRecord, ...]:
            rows = _select(raw, f"{sql} ORDER BY r.id DESC LIMIT ?", [*params, limit])
            return tuple(_record(row) for row in rows)

        return await self._db.read(query)
