"""Background terminal runs kept durable: their records, completion events and orphans.

A background run outlives the turn that started it and may outlive the Host
process too. ``RunJournal`` writes its record to the store before the spawn,
adds the spawned root's pid and OS start time, and records the end (state,
exit code, stream statistics) before it announces ``terminal.run.completed``
to the Host's observer, so anyone who sees the event can read the record.

After a crash a record stays ``running`` under a Host that no longer exists.
``recover()`` (Host start) and every ``lookup`` of such a record mark it
``orphaned`` with a reason, after ending whatever is left of its tree (the
per-run init and bubblewrap die with their parent, so normally nothing is).
A Host is gone when its pid and start time prove it on this machine, or,
for a Host on another machine (which no pid here can prove), when it stopped
renewing the run's lease (``keep``) and the lease expired. Its processes
there cannot be signalled from here: an owner that still lives finds, at its
next renewal, that the run is no longer its own, and stops it.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import psutil

from hostkit._renewal import RenewalPace
from hostkit.builtins.process._process import ProcessOutcome, ProcessOwner, StreamCapture
from hostkit.builtins.process._process_tree import START_TIME_SLACK_S
from hostkit.effects import ToolOutcome
from hostkit.errors import HostkitError, bounded
from hostkit.store import (
    TERMINAL_RUN_LEASE_S,
    LeaseOwner,
    NewTerminalRun,
    RuntimeStore,
    TerminalRunEnding,
    TerminalRunRecord,
    TerminalRunState,
    TerminalStreamStats,
    epoch_of,
)
from hostkit.turns import Observer, TurnEvent, notify_observer
from hostkit.types import EffectStatus

__all__ = ["COMPLETED_EVENT", "RunJournal", "ending_of", "record_view"]

COMPLETED_EVENT = "terminal.run.completed"
# How terminal.status reports a record: an orphan's Host died, so how it ended is unknown.
_EFFECT_STATUS: dict[TerminalRunState, EffectStatus] = {
    "running": "succeeded",
    "succeeded": "succeeded",
    "failed": "failed",
    "timed_out": "timed_out",
    "cancelled": "cancelled",
    "indeterminate": "indeterminate",
    "orphaned": "indeterminate",
}
DEFAULT_RECOVER_LIMIT = 500  # running records read per page of a recovery pass
DEFAULT_KILL_CONFIRM_S = 5.0  # how long an orphan's leftover processes get to disappear
_POLL_S = 0.02
# How long an older Host's lease-less run may be left running while that Host may run:
# its longest run (the default and only deadline limit then, 600 s) and its end.
OLDER_RUN_GRACE_S = 900.0
# The first pause before a failed end record is written again, and the longest.
_FINISH_RETRY_S = 0.05
_FINISH_RETRY_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class RunJournal:
    """The store, this Host's identity and the observer that background runs report to.

    ``host_owner`` is this Host process (``LeaseOwner``); the same value
    marks every run it spawns. ``observer`` receives ``terminal.run.completed``
    (None: no event, the record alone).
    """

    store: RuntimeStore
    host_owner: LeaseOwner
    observer: Observer | None = None
    kill_confirm_s: float = DEFAULT_KILL_CONFIRM_S
    lease_s: float = TERMINAL_RUN_LEASE_S

    @property
    def owner_text(self) -> str:
        return self.host_owner.encode()

    async def begin(self, run: NewTerminalRun, *, max_live: int | None = None) -> None:
        """Record a run as ``running`` before anything is spawned (raises ``HostkitError``).

        ``max_live``: the session's limit of live runs, held by the store across every
        Host on the database (``TerminalRunLimit`` at it).
        """
        await self.store.terminal_runs.insert(replace(run, lease_s=self.lease_s), max_live=max_live)

    async def keep(self, run_id: str, ended: anyio.Event) -> bool:
        """Renew the run's lease every third of it until ``ended``; False when the run
        stopped being this Host's (another Host orphaned it after its lease expired).

        A renewal that fails (the store is slow or down) is retried promptly,
        each try bounded by a third of the lease still left (``RenewalPace``,
        as every lease keeper): only the store decides the run is lost.
        """
        beat = self.lease_s / 3
        pace = RenewalPace(self.lease_s, self.lease_s, beat)
        pause = beat
        while True:
            with anyio.move_on_after(pause):
                await ended.wait()
            if ended.is_set():
                return True
            start = anyio.current_time()
            try:
                with anyio.fail_after(pace.limit(start)):
                    kept = await self.store.terminal_runs.renew(
                        run_id, host_owner=self.owner_text, lease_s=self.lease_s
                    )
            except (HostkitError, TimeoutError) as exc:
                pause = pace.failed(exc)
                continue
            if not kept:
                return ended.is_set()  # an end recorded meanwhile is its own, not a loss
            pace.renewed(start)
            pause = beat

    async def started(self, run_id: str, owner: ProcessOwner) -> None:
        """Attach the spawned root's pid and start time (raises ``HostkitError``)."""
        await self.store.terminal_runs.mark_started(
            run_id, pid=owner.pid, pid_start=owner.create_time, spawn_id=owner.spawn_id
        )

    async def finish(
        self, run_id: str, *, session_id: str, turn_id: str, ending: TerminalRunEnding
    ) -> bool:
        """Persist how the run ended, then announce it; False when it could not be persisted.

        A store that is busy or down is tried again with a growing pause until
        the caller's deadline cancels this: an end left unwritten keeps the
        record ``running`` until its lease expires and another look finds the
        run's processes gone (``_orphan``). No event is sent for an end that is
        not durable: an observer must be able to read what it was told.
        """
        pause = _FINISH_RETRY_S
        while True:
            try:
                written = await self.store.terminal_runs.finish(run_id, ending)
                break
            except HostkitError as exc:
                if not exc.retryable:
                    return False
            await anyio.sleep(pause)
            pause = min(pause * 2, _FINISH_RETRY_MAX_S)
        if written:
            self._announce(run_id, session_id, turn_id, ending.state, ending)
        return written

    async def lookup(
        self, run_id: str, *, principal_id: str, session_id: str
    ) -> TerminalRunRecord | None:
        """The caller's run from the store; a dead Host's ``running`` run comes back orphaned,
        as does this Host's own whose end never landed (``_unrecorded``)."""
        record = await self.store.terminal_runs.get(
            run_id, principal_id=principal_id, session_id=session_id
        )
        if record is None or record.state != "running":
            return record
        if await self._orphan(record):
            return await self.store.terminal_runs.get(
                run_id, principal_id=principal_id, session_id=session_id
            )
        return record

    async def recover(self, *, limit: int = DEFAULT_RECOVER_LIMIT) -> int:
        """Mark every ``running`` run of a gone Host ``orphaned``, and every one of a live
        Host (this one included) whose end never landed; returns how many.

        Every such record is examined, a page of ``limit`` at a time.
        """
        marked, after = 0, None
        while True:
            page = await self.store.terminal_runs.running(limit=limit, after=after)
            for record in page:
                marked += await self._orphan(record)
            if len(page) < limit:
                return marked
            after = page[-1].run_id

    async def _orphan(self, record: TerminalRunRecord) -> bool:
        owner = LeaseOwner.decode(record.host_owner)
        if owner is None:
            return await self._expired(record, None)
        liveness = await anyio.to_thread.run_sync(owner.liveness)
        if liveness == "unknown":
            return await self._expired(record, owner)
        if liveness != "dead":
            return await self._unrecorded(record, owner)
        killed, alive = await anyio.to_thread.run_sync(
            _end_tree, record.pid, record.pid_start, self.kill_confirm_s
        )
        if await anyio.to_thread.run_sync(owner.closed_here):
            reason = (
                "the Host that owned the run, in this process, closed without recording its end"
            )
        else:
            reason = f"the Host process {owner.pid} that owned the run is gone"
        if killed:
            reason += f"; {killed} process(es) of its tree were still running and were killed"
        if alive:
            reason += f"; {alive} could not be confirmed gone"
        return await self._mark_orphaned(record, reason, lease_expired=False)

    async def _mark_orphaned(
        self, record: TerminalRunRecord, reason: str, *, lease_expired: bool
    ) -> bool:
        """Mark the run orphaned (unless another Host or its end got there first) and
        announce it; ``lease_expired`` makes the mark check the lease's expiry itself."""
        marked = await self.store.terminal_runs.mark_orphaned(
            record.run_id, host_owner=record.host_owner, reason=reason, lease_expired=lease_expired
        )
        if marked:
            self._announce(record.run_id, record.session_id, record.turn_id, "orphaned", None)
        return marked

    async def _unrecorded(self, record: TerminalRunRecord, owner: LeaseOwner) -> bool:
        """Orphan the run of a live Host here whose end was never written: its lease
        expired (nobody renews the lease of a run that exited) and its root process is
        gone. A lease that still runs, or a root still running, leaves it alone."""
        expires = record.lease_expires_at
        if expires is None or expires >= self.store.now():
            return False
        if await anyio.to_thread.run_sync(_root_runs, record.pid, record.pid_start):
            return False
        reason = (
            f"the run's process is gone and the Host process {owner.pid} that owned it "
            "stopped renewing its lease without recording how it ended"
        )
        return await self._mark_orphaned(record, reason, lease_expired=True)

    async def _expired(self, record: TerminalRunRecord, owner: LeaseOwner | None) -> bool:
        """Orphan the run of a Host this machine cannot see, once its lease expired.

        A run recorded before runs had leases (none) or by an owner this
        version cannot read has nobody to renew it: it counts as expired, unless
        its owner's process may still be running here.
        """
        expires = record.lease_expires_at
        if expires is not None and expires >= self.store.now():
            return False
        # An older Host on this machine records no machine and no lease: while a
        # process with its pid and start time runs, it may be that Host, running — for
        # as long as one of its runs can last, no longer (a grace, not a proof).
        if (
            expires is None
            and owner is not None
            and _age_s(record.started_at) < OLDER_RUN_GRACE_S
            and await anyio.to_thread.run_sync(owner.runs_here_maybe)
        ):
            return False
        who = (
            f"the Host process {owner.pid} on {owner.host}"
            if owner is not None
            else f"the Host {bounded(record.host_owner, 80)!r}"
        )
        renewing = "stopped renewing its lease" if expires is not None else "recorded no lease"
        reason = (
            f"{who} that owned the run {renewing}; its processes there could not be "
            "signalled from here (that Host stops them if it still runs)"
        )
        return await self._mark_orphaned(record, reason, lease_expired=True)

    def _announce(
        self,
        run_id: str,
        session_id: str,
        turn_id: str,
        state: TerminalRunState,
        ending: TerminalRunEnding | None,
    ) -> None:
        if self.observer is None:
            return
        data: dict[str, Any] = {"run_id": run_id, "state": state}
        if ending is not None:
            data.update(
                exit_code=ending.exit_code,
                duration_s=round(ending.duration_s, 3),
                stdout_bytes=ending.stdout.total_bytes,
                stderr_bytes=ending.stderr.total_bytes,
                stdout_truncated=ending.stdout.truncated,
                stderr_truncated=ending.stderr.truncated,
            )
        # Not a turn's own event: the run outlived its turn (no request id to name).
        event = TurnEvent(COMPLETED_EVENT, "", turn_id, session_id, data)
        notify_observer(self.observer, event)


def _end_tree(pid: int | None, pid_start: float | None, confirm_s: float) -> tuple[int, int]:
    """Worker thread: KILL the recorded root (if it is still that process) and its descendants.

    Returns how many processes were found and how many were still there after
    ``confirm_s``. A pid whose start time differs was reused: never signalled.
    """
    if pid is None or pid_start is None:
        return 0, 0
    try:
        root = psutil.Process(pid)
        if abs(root.create_time() - pid_start) > START_TIME_SLACK_S:
            return 0, 0
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)  # the run's own group: root is alive, so no reuse
    for proc in members:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    # Watched, never waited for: psutil's wait would reap a process that happens to be
    # this Host's child and steal its exit status from the event loop's child watcher.
    deadline = time.monotonic() + confirm_s
    alive = [proc for proc in members if _alive(proc)]
    while alive and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        alive = [proc for proc in alive if _alive(proc)]
    return len(members), len(alive)


def _age_s(started_at: str) -> float:
    """Seconds since a record's ``started_at``; unreadable counts as old."""
    started = epoch_of(started_at)
    return math.inf if started is None else time.time() - started


def _root_runs(pid: int | None, pid_start: float | None) -> bool:
    """Worker thread: whether the recorded root process (that pid, started then) still runs."""
    if pid is None or pid_start is None:
        return False
    try:
        root = psutil.Process(pid)
        return abs(root.create_time() - pid_start) <= START_TIME_SLACK_S and _alive(root)
    except psutil.Error:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _stats(capture: StreamCapture, name: str, spawn_id: str | None) -> TerminalStreamStats:
    artifact = f"{spawn_id}:{name}" if spawn_id and capture.artifact else None
    return TerminalStreamStats(capture.total_bytes, capture.truncated, artifact)


def ending_of(
    outcome: ProcessOutcome | None,
    error: str | None,
    *,
    redact: Callable[[str], str] = str,
) -> TerminalRunEnding:
    """The durable end of a run from its outcome (or the error that replaced one).

    ``redact`` masks the secrets the agent holds in the reason kept with it.
    """
    if outcome is None:
        empty = TerminalStreamStats()
        reason = redact(error or "the run failed")
        return TerminalRunEnding("failed", None, reason, 0.0, empty, empty)
    state: TerminalRunState
    if outcome.status == "exited":
        state = "succeeded" if outcome.exit_code == 0 else "failed"
    else:
        state = outcome.status
    spawn_id = outcome.owner.spawn_id if outcome.owner else None
    return TerminalRunEnding(
        state=state,
        exit_code=outcome.exit_code,
        reason=None if outcome.reason is None else redact(outcome.reason),
        duration_s=outcome.duration_s,
        stdout=_stats(outcome.stdout, "stdout", spawn_id),
        stderr=_stats(outcome.stderr, "stderr", spawn_id),
    )


def _stream_view(stats: TerminalStreamStats) -> dict[str, Any]:
    return {
        "total_bytes": stats.total_bytes,
        "truncated": stats.truncated,
        "artifact": stats.artifact,
    }


def record_view(record: TerminalRunRecord) -> ToolOutcome:
    """``terminal.status`` from the durable record (tails are not kept: see the artifacts)."""
    output: dict[str, Any] = {
        "run_id": record.run_id,
        "status": record.state,
        "exit_code": record.exit_code,
        "reason": record.reason,
        "duration_s": record.duration_s,
        "sandbox": record.sandbox,
        "pid": record.pid,
        "stderr": _stream_view(record.stderr),
        "stdout": _stream_view(record.stdout),
    }
    status = _EFFECT_STATUS[record.state]
    error = None if status == "succeeded" else bounded(record.reason or record.state, 300)
    return ToolOutcome(status, output, error)
