"""A process tree owned for a caller that talks to it itself (an MCP stdio server).

``run_process`` owns a command from spawn to outcome; a long-lived child whose
pipes the caller reads and writes needs the same guarantee without that
lifecycle: nothing it starts outlives ``end()``. ``owned_process`` spawns it
exactly like ``run_process`` does (a new session and process group, under the
per-run subreaper init on Linux, so an orphan stays a descendant and the init
kills what is left when the command exits), with the caller's pipes, and
yields an ``OwnedProcess`` over the same ``_Tree``: snapshots the caller takes
(before closing stdin, say) and periodic ones make every process ever seen in
the tree known by pid and start time, so one that left the group (``setsid``)
is still ended, whether or not the root already exited. The Host's process is
a child subreaper while an unsandboxed tree lives here too, without a
supervisor (``adopting``): an init killed from inside hands its orphans to the
Host, not to the machine's init.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process

from hostkit.builtins.process._process_tree import ProcessOwner, _Tree
from hostkit.builtins.process._reaper import adopting, read_report, spawn_under_init
from hostkit.types import new_id

__all__ = ["OwnedProcess", "owned_process"]

# How long ``end`` waits for the ended root to be reaped (it is already dead by then).
WAIT_ROOT_S = 5.0


class OwnedProcess:
    """The caller's handle: the process (its pipes), snapshots, and the single-flight end."""

    def __init__(self, process: Process, tree: _Tree, report: int | None) -> None:
        self.process = process
        self._tree = tree
        self._report = report

    @property
    def owner(self) -> ProcessOwner | None:
        return self._tree.owner

    def tracked_pids(self) -> frozenset[int]:
        """Pids of the tree seen so far that were alive at the last snapshot."""
        return self._tree.tracked_pids()

    async def snapshot(self) -> None:
        """Record every live member now, so it is ended later even if it detaches."""
        await self._tree._refresh()

    async def watch(self, interval_s: float) -> None:
        """Snapshot every ``interval_s`` until cancelled."""
        await self._tree.watch(interval_s)

    async def end(self) -> bool:
        """End the tree (TERM, grace, KILL; shielded, idempotent); whether it is confirmed gone.

        Not confirmed when a member could not be seen to go, or when the init
        exited before the end began without reporting: it was killed from
        inside, so the orphans it kept may have escaped.
        """
        exited_first = self.process.returncode is not None
        confirmed = await self._tree.terminate("shutdown")
        # The root is this process's own child: reaped here, before the caller goes on,
        # not whenever the event loop next runs its child watcher (no zombie in between).
        with anyio.move_on_after(WAIT_ROOT_S, shield=True):
            await self.process.wait()
        await self._tree.reap_stragglers(WAIT_ROOT_S)
        if exited_first and self._report is not None and read_report(self._report) is None:
            confirmed = False
        return confirmed

    def close_report(self) -> None:
        """Release the init's status pipe (after ``end``)."""
        if self._report is not None:
            os.close(self._report)
            self._report = None


@asynccontextmanager
async def owned_process(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str],
    stdin: int,
    stdout: int,
    stderr: int,
    grace_s: float,
    confirm_s: float,
    sandboxed: bool = False,
) -> AsyncIterator[OwnedProcess]:
    """Spawn ``argv`` as an owned tree; on exit (also by cancellation) the tree is ended.

    ``env`` is the child's whole environment; ``sandboxed``: ``argv`` is a sandbox
    launcher (see ``adopting``). Raises ``OSError`` when the program cannot be
    started (nothing is left running then).
    """
    with adopting(sandboxed=sandboxed):
        spawned_at = time.time()
        # Shielded: a cancellation between the spawn and the try below would leak the tree.
        with anyio.CancelScope(shield=True):
            process, report = await spawn_under_init(
                argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr
            )
            tree = _Tree(
                process,
                spawn_id=new_id("spawn"),
                spawned_at=spawned_at,
                grace_s=grace_s,
                confirm_s=confirm_s,
            )
            owned = OwnedProcess(process, tree, report)
        try:
            with anyio.CancelScope(shield=True):
                await tree.record()
            yield owned
        finally:
            with anyio.CancelScope(shield=True):
                await owned.end()
            owned.close_report()
