"""Clause: a background run of a Host on another machine is orphaned once its lease expired.

No pid on this machine can prove a Host on another machine dead, so a
background run records a lease its Host renews while the run lives. Another
Host orphans the run only after that lease expired (checked in the statement
that marks it, so a renewal that lands first keeps the run); the owner whose
renewal then finds the run no longer its own stops the run's processes.
Recovery examines every running record, however many there are.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process import RunJournal
from hostkit.errors import InvalidValue, StoreError
from hostkit.store import LeaseOwner, RuntimeStore, TerminalRunEnding
from tests.contract.test_clause_effects_background_runs_durable import (
    completed,
    dead_host,
    host_process,
    me,
    new_run,
    session_of,
    start,
)

pytestmark = pytest.mark.anyio

WAIT_S = 30.0
# Short enough to wait out, long enough that a loaded machine's scheduling never lets a lease
# lapse between two renewals (every second) or before the first check of a fresh one.
SHORT_LEASE_S = 3.0


@dataclass(frozen=True)
class ShortLease(RunJournal):
    """A Host whose runs' leases are short, so a test sees several renewals."""

    lease_s: float = SHORT_LEASE_S


async def elsewhere() -> LeaseOwner:
    """A Host process on another machine: this one can neither see nor signal it."""
    return dataclasses.replace(await me("host_far"), host="another-machine.invalid")


async def test_a_far_hosts_run_is_orphaned_only_once_its_lease_expired(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await session_of(authority)
    far = await elsewhere()
    run = dataclasses.replace(new_run(scope, "run_far", far), lease_s=SHORT_LEASE_S)
    recorded = await store.terminal_runs.insert(run)
    assert recorded.lease_expires_at is not None
    assert abs(recorded.lease_expires_at - (time.time() + SHORT_LEASE_S)) < 5
    async with host_process(store, authority, tmp_path, "host_near") as host:
        assert await host.journal.recover() == 0  # its lease still runs: left alone
        await anyio.sleep(SHORT_LEASE_S + 0.2)  # expired now
        assert await host.journal.recover() == 1
        event = await host.events.wait_for(completed("run_far"))
    record = await store.terminal_runs.get(
        "run_far", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert record is not None
    assert record.state == "orphaned"
    assert "another-machine.invalid" in (record.reason or "")
    assert "stopped renewing its lease" in (record.reason or "")
    assert dict(event.data) == {"run_id": "run_far", "state": "orphaned"}


async def test_a_renewal_that_lands_before_the_orphaning_keeps_the_run(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await session_of(authority)
    far = await elsewhere()
    run = dataclasses.replace(new_run(scope, "run_far", far), lease_s=0.1)
    await store.terminal_runs.insert(run)
    await anyio.sleep(0.2)  # expired: then its Host comes back and renews it
    assert await store.terminal_runs.renew("run_far", host_owner=far.encode(), lease_s=60)
    async with host_process(store, authority, tmp_path, "host_near") as host:
        assert await host.journal.recover() == 0
    # The mark itself checks the expiry: read as expired, renewed before the write.
    assert not await store.terminal_runs.mark_orphaned(
        "run_far", host_owner=far.encode(), reason="late", lease_expired=True
    )
    record = await store.terminal_runs.get(
        "run_far", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert record is not None
    assert record.state == "running"


async def test_a_live_host_renews_its_runs_and_stops_one_another_host_orphaned(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    async with host_process(store, authority, tmp_path, "host_a", ShortLease) as host:
        session = await host.session()
        run_id = await start(session, "import time; time.sleep(60)")
        key = {
            "principal_id": session.context.principal.principal_id,
            "session_id": session.context.session_id,
        }
        await anyio.sleep(SHORT_LEASE_S * 1.5)  # past its first lease: renewed all along
        record = await store.terminal_runs.get(run_id, **key)
        assert record is not None
        assert record.state == "running"
        assert record.lease_expires_at is not None
        assert record.lease_expires_at > time.time()
        assert record.pid is not None
        # Another Host, which could not see this one, took the run from it.
        assert await store.terminal_runs.mark_orphaned(
            run_id, host_owner=record.host_owner, reason="its lease expired"
        )
        with anyio.fail_after(WAIT_S):
            while True:  # polled: the process is not ours to wait for, and its end is recorded
                gone = not await anyio.to_thread.run_sync(psutil.pid_exists, record.pid)
                status = await session.call("terminal.status", run_id=run_id)
                if gone and status.status != "succeeded":  # no longer reads running
                    break
                await anyio.sleep(0.05)
    # The end was another Host's to record: this one announces none.
    assert not [e for e in host.events.seen if e.data["run_id"] == run_id]
    assert "orphaned" in (status.error or "")
    final = await store.terminal_runs.get(run_id, **key)
    assert final is not None
    assert (final.state, final.reason) == ("orphaned", "its lease expired")


@pytest.mark.parametrize("checker", ["host_near", "host_live"], ids=["another Host", "its own"])
@pytest.mark.parametrize("root", ["exited", "running"])
async def test_a_live_hosts_run_whose_end_was_never_written_is_orphaned_once_its_root_is_gone(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, root: str, checker: str
) -> None:
    """The Host that owns the run lives (this process, as Host instance ``host_live``), but
    its end record never landed (the store was locked past the write's deadline): nobody
    renews the lease of a run that exited, so once that lease expired and the run's root
    process is gone, the next look orphans it, another Host's or its own, instead of
    leaving it ``running`` for as long as its Host lives. A root still running keeps it,
    expired or not."""
    scope = await session_of(authority)
    owner = await me("host_live")
    run = dataclasses.replace(new_run(scope, "run_unwritten", owner), lease_s=0.1)
    await store.terminal_runs.insert(run)
    child = await anyio.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"])
    async with child:
        info = await anyio.to_thread.run_sync(psutil.Process, child.pid)
        started = await anyio.to_thread.run_sync(info.create_time)
        assert await store.terminal_runs.mark_started(
            "run_unwritten", pid=child.pid, pid_start=started, spawn_id="spawn_1"
        )
        if root == "exited":
            assert child.stdin is not None
            await child.stdin.aclose()
            await child.wait()
        await anyio.sleep(0.2)  # the lease expired
        async with host_process(store, authority, tmp_path, checker) as host:
            recovered = await host.journal.recover()
        if child.returncode is None:
            assert child.stdin is not None
            await child.stdin.aclose()
    record = await store.terminal_runs.get(
        "run_unwritten", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert record is not None
    if root == "running":
        assert (recovered, record.state) == (0, "running")
        return
    assert (recovered, record.state) == (1, "orphaned")
    assert "stopped renewing its lease without recording how it ended" in (record.reason or "")


async def test_an_end_record_the_store_refused_for_a_while_is_written_when_it_comes_back(
    store: RuntimeStore,
    authority: AuthorityResolver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy store (a lock held elsewhere) fails the end record's first writes: the
    journal tries again until it lands, and only then announces the end."""
    real = store.terminal_runs.finish
    refusals = 2

    async def busy_then_real(run_id: str, ending: TerminalRunEnding) -> bool:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise StoreError("database is locked", retryable=True)
        return await real(run_id, ending)

    monkeypatch.setattr(store.terminal_runs, "finish", busy_then_real)
    async with host_process(store, authority, tmp_path, "host_a") as host:
        session = await host.session()
        run_id = await start(session, "print('done')")
        await host.events.wait_for(completed(run_id))
        key = {
            "principal_id": session.context.principal.principal_id,
            "session_id": session.context.session_id,
        }
        record = await store.terminal_runs.get(run_id, **key)
    assert refusals == 0
    assert record is not None
    assert record.state == "succeeded"


async def test_recovery_examines_every_running_record_a_page_at_a_time(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await session_of(authority)
    dead = await dead_host()
    async with host_process(store, authority, tmp_path, "host_new") as host:
        mine = dataclasses.replace(
            new_run(scope, "run_mine", dead), host_owner=host.journal.owner_text
        )
        await store.terminal_runs.insert(mine)  # this Host's own: never examined
        for index in range(7):
            await store.terminal_runs.insert(new_run(scope, f"run_{index}", dead))
        assert await host.journal.recover(limit=3) == 7
        assert await host.journal.recover(limit=3) == 0
    running = await store.terminal_runs.running(limit=10)
    assert [r.run_id for r in running] == ["run_mine"]


async def test_bad_leases_and_cursors_are_refused_and_change_nothing(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await session_of(authority)
    far = await elsewhere()
    for bad in (0, -1, math.nan, math.inf, True, "60", 86_401):
        with pytest.raises(InvalidValue, match="lease"):
            await store.terminal_runs.insert(
                dataclasses.replace(new_run(scope, "run_bad", far), lease_s=bad)  # type: ignore[arg-type]
            )
        with pytest.raises(InvalidValue, match="lease"):
            await store.terminal_runs.renew("run_x", host_owner=far.encode(), lease_s=bad)  # type: ignore[arg-type]
    assert await store.terminal_runs.running() == ()
    await store.terminal_runs.insert(new_run(scope, "run_far", far))
    # Only its owner renews it; an unknown cursor starts from the beginning.
    assert not await store.terminal_runs.renew("run_far", host_owner="someone|1|1|x", lease_s=5)
    assert not await store.terminal_runs.renew("run_missing", host_owner=far.encode(), lease_s=5)
    assert [r.run_id for r in await store.terminal_runs.running(after="run_unknown")] == ["run_far"]
    with pytest.raises(InvalidValue):
        await store.terminal_runs.running(after="x" * 1_000)
