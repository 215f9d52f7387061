"""Owned process trees: finding every member, signalling them, ending the tree once.

A tree is the process the Host spawned in a new session and process group,
plus everything descended from it (contract: EffectRuntime, terminal
execution):

- An owner record of pid, pgid, spawn id and OS start time. Every signal sent
  by pid goes through a ``psutil.Process`` whose identity includes that start
  time, so a recycled pid is never signalled.
- Descendants are tracked, not only the group: a grandchild that called
  ``setsid()`` leaves the group but is found by ancestry in periodic
  snapshots and again at kill time, and is killed with the rest.
- Ending is single-flight: TERM, a grace period, then KILL until every
  tracked process is confirmed gone or the confirmation time passes. KILL
  goes to the root last: while the root (a subreaper init, see ``_reaper``)
  lives, a process created after the last scan is still its descendant.
- Processes the Host adopted (its own subreaper flag) because their parent
  in the tree died are killed and then reaped here; a run that lost a
  process to the Host this way cannot vouch for ones it never saw, so it is
  not confirmed.
- A tree that grows past ``max_processes`` members is ended (the process
  limit that holds even for root, for whom ``RLIMIT_NPROC`` does not).

Every ``/proc`` read (psutil) runs in a worker thread: the Host shares its
event loop with turns, widgets and the inbox.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import psutil
from anyio.abc import Process

from hostkit.builtins.process._reaper import reap

__all__ = ["ProcessOwner"]

_POLL_S = 0.02  # while waiting for signalled processes to disappear
START_TIME_SLACK_S = 1.0  # psutil start times sit on a whole-second boot-time base

# Why a tree is ended (the first request wins); ``_process`` maps each to a status.
_Cause = Literal[
    "exited",
    "deadline",
    "cancelled",
    "shutdown",
    "drain_failed",
    "write_failed",
    "abandoned",
    "process_limit",
]


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """Who the Host started: enough to find, revalidate and end the tree later.

    ``create_time`` is the OS start time (psutil, seconds since the epoch);
    None only when the process was gone before it could be read, and then
    nothing is ever signalled by its pid.
    """

    pid: int
    pgid: int
    spawn_id: str
    create_time: float | None
    platform: str


def _lookup_root(pid: int) -> tuple[psutil.Process, float] | None:
    try:
        root = psutil.Process(pid)
        return root, root.create_time()
    except psutil.Error:
        return None


def _scan(
    root: psutil.Process | None,
    not_before: float,
    pgid: int,
    known: Mapping[int, psutil.Process],
) -> dict[int, psutil.Process]:
    """The live, non-zombie members of one tree: known ones, their group/session, descendants.

    Group and session members count only when they started no earlier than
    ``not_before``. Identity is pid plus start time (``psutil.Process.__eq__``).
    """
    own = os.getpid()
    live: dict[int, psutil.Process] = {}
    children: dict[int, list[psutil.Process]] = {}
    for pid in psutil.pids():
        if pid == own:
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                children.setdefault(proc.ppid(), []).append(proc)
            ours = proc == known.get(pid) or proc == root
            if ours or (
                pgid in (os.getpgid(pid), os.getsid(pid)) and proc.create_time() >= not_before
            ):
                live[pid] = proc
        except (psutil.Error, OSError):
            continue
    pending = list(live.values())
    while pending:
        for child in children.get(pending.pop().pid, ()):
            if child.pid not in live:
                live[child.pid] = child
                pending.append(child)
    return live


def _signal(
    members: Sequence[psutil.Process], sig: int, root: psutil.Process | None, pgid: int
) -> None:
    # killpg only while the root is unreaped: its pid, and so the group id, cannot be reused.
    if root is not None and root.is_running():
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for proc in members:
        try:
            proc.send_signal(sig)  # psutil refuses a pid whose start time changed
        except psutil.Error:
            continue


def _adopted(
    members: Sequence[psutil.Process], root: psutil.Process | None
) -> list[psutil.Process]:
    """Members whose parent is now the Host: orphans it adopted as a subreaper."""
    own = os.getpid()
    found = []
    for proc in members:
        if proc == root:
            continue
        try:
            if proc.ppid() == own:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _vanished(members: Sequence[psutil.Process]) -> list[psutil.Process]:
    """Blocking: the members no longer in the process table (a zombie is still there; a
    reused pid is another process: ``is_running`` compares start times)."""
    return [proc for proc in members if not _in_table(proc)]


def _in_table(proc: psutil.Process) -> bool:
    try:
        return proc.is_running()
    except psutil.Error:
        return True  # not known to be gone: kept


def _wait_gone(members: Sequence[psutil.Process], timeout_s: float) -> None:
    # A worker-thread poll: these are not our children, so there is nothing to wait on.
    deadline = time.monotonic() + timeout_s
    while any(_alive(proc) for proc in members) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


class _Tree:
    """One owned process tree: owner record, descendants seen so far, single-flight ending."""

    def __init__(
        self,
        process: Process,
        *,
        spawn_id: str,
        spawned_at: float,
        grace_s: float,
        confirm_s: float,
        max_processes: int | None = None,
    ) -> None:
        self.process = process
        self._max_processes = max_processes
        self._orphans: dict[int, psutil.Process] = {}
        self.spawn_id = spawn_id
        self._spawned_at = spawned_at
        self.owner: ProcessOwner | None = None
        self.stop_requested = anyio.Event()
        self.stop_cause: _Cause | None = None
        self._grace_s = grace_s
        self._confirm_s = confirm_s
        self._root: psutil.Process | None = None
        self._known: dict[int, psutil.Process] = {}
        # Every member seen that may still be handed to the Host as a zombie, for reaping.
        self._seen: dict[int, psutil.Process] = {}
        self._recorded = anyio.Event()
        self._ending: anyio.Event | None = None
        self._confirmed = False

    async def record(self) -> ProcessOwner:
        """Read the root's OS start time and write the owner record."""
        pid = self.process.pid
        found = None
        try:
            found = await anyio.to_thread.run_sync(_lookup_root, pid)
        finally:
            self._root, started = found if found else (None, None)
            self.owner = ProcessOwner(
                pid=pid,
                pgid=pid,
                spawn_id=self.spawn_id,
                create_time=started,
                platform=sys.platform,
            )
            self._recorded.set()
        return self.owner

    def tracked_pids(self) -> frozenset[int]:
        return frozenset(self._known)

    def request_stop(self, cause: _Cause) -> None:
        """Record the first reason to end the tree and wake the run; idempotent."""
        if self.stop_cause is None:
            self.stop_cause = cause
        self.stop_requested.set()

    async def watch(self, interval_s: float) -> None:
        """Snapshot descendants while the tree runs, so ones that detach are still known."""
        while True:
            await anyio.sleep(interval_s)
            await self._refresh()

    async def terminate(self, cause: _Cause) -> bool:
        """End the tree once, whoever asks; every caller gets whether it is confirmed gone."""
        self.request_stop(cause)
        if self._ending is None:
            self._ending = anyio.Event()
            try:
                with anyio.CancelScope(shield=True):
                    await self._recorded.wait()
                    self._confirmed = await self._end()
            finally:
                self._ending.set()
        else:
            await self._ending.wait()
        return self._confirmed

    async def _refresh(self) -> list[psutil.Process]:
        before = dict(self._known)
        # Without the root's own start time (it was reaped before it could be read), the
        # wall clock at spawn is the bound; psutil's boot-time base is only whole seconds.
        started = self.owner.create_time if self.owner else None
        not_before = self._spawned_at - START_TIME_SLACK_S if started is None else started
        pgid = self.process.pid
        live = await anyio.to_thread.run_sync(_scan, self._root, not_before, pgid, before)
        self._known.update(live)
        self._seen.update(live)
        for pid, proc in before.items():
            if pid not in live and self._known.get(pid) is proc:
                del self._known[pid]
        # A member gone from the process table was reaped (by its parent): never the Host's
        # to reap. Kept, a tree that forks for as long as it runs grew by each child.
        ended = [proc for pid, proc in self._seen.items() if pid not in live]
        if ended:
            for proc in await anyio.to_thread.run_sync(_vanished, ended):
                if self._seen.get(proc.pid) is proc:
                    del self._seen[proc.pid]
        members = list(live.values())
        adopted = await anyio.to_thread.run_sync(_adopted, members, self._root)
        self._orphans.update((proc.pid, proc) for proc in adopted)
        limit = self._max_processes
        if limit is not None and len(members) - 1 > limit and self.stop_cause is None:
            self.request_stop("process_limit")
        return members

    @property
    def lost_orphans(self) -> bool:
        """Whether a member was orphaned to the Host: unseen siblings may have been too."""
        return bool(self._orphans)

    async def _end(self) -> bool:
        try:
            gone = await self._kill()
        finally:
            with anyio.CancelScope(shield=True):
                # A member can die after the last scan and be handed to the Host as a
                # zombie when its parent (the init) dies: reap every member ever seen.
                members = [*self._orphans.values(), *self._seen.values()]
                await anyio.to_thread.run_sync(reap, members)
        return gone and not self.lost_orphans

    async def reap_stragglers(self, deadline_s: float) -> None:
        """Reap members handed to the Host as zombies after the tree ended (a namespace's
        pid 1 whose parent went first), until none is left or ``deadline_s`` passes."""
        with anyio.move_on_after(deadline_s, shield=True):
            while True:
                members = [*self._orphans.values(), *self._seen.values()]
                if not await anyio.to_thread.run_sync(_adopted_alive, members):
                    return
                await anyio.to_thread.run_sync(reap, members)
                await anyio.sleep(0.02)

    async def _kill(self) -> bool:
        members = await self._refresh()
        if not members:
            return True
        pgid = self.process.pid
        await anyio.to_thread.run_sync(_signal, members, signal.SIGTERM, self._root, pgid)
        await anyio.to_thread.run_sync(_wait_gone, members, self._grace_s)
        with anyio.move_on_after(self._confirm_s):
            while members := await self._refresh():
                # The root last: while it lives, whatever a dying member just forked is
                # still its descendant, and so still found by the next scan.
                others = [proc for proc in members if proc != self._root]
                root = None if others else self._root
                targets = others or members
                await anyio.to_thread.run_sync(_signal, targets, signal.SIGKILL, root, pgid)
                await anyio.sleep(_POLL_S)
            return True
        return False


def _adopted_alive(members: list[psutil.Process]) -> bool:
    """Blocking: whether a member is still a child of this process (alive or a zombie)."""
    own = os.getpid()
    for proc in members:
        try:
            if psutil.Process(proc.pid) == proc and proc.ppid() == own:
                return True
        except psutil.Error:
            continue
    return False
