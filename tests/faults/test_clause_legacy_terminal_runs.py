"""Clause: a background run recorded before runs had leases still ends once its Host is gone.

A database migrated from before run leases holds ``running`` runs with no
lease expiry, some under an owner written before machines were recorded
(four fields) or in a form this version cannot read. Nobody renews such a
run: a Host that cannot prove its owner alive or dead orphans it, as it
orphans a run whose lease expired, instead of leaving it ``running`` for
ever. A run with a lease still running is left alone, whatever its owner; so
is a lease-less run whose four-field owner names a process that runs on this
machine with that pid and start time: an older Host, upgraded beside, may
still be running it.
"""

from __future__ import annotations

import dataclasses
import socket
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process._terminal_journal import OLDER_RUN_GRACE_S
from hostkit.store import LeaseOwner, RuntimeStore, TerminalRunRecord
from hostkit.types import PrincipalScope
from tests.contract.test_clause_effects_background_runs_durable import (
    completed,
    host_process,
    me,
    new_run,
    session_of,
)

pytestmark = pytest.mark.anyio

FAR = "another-machine.invalid"


def without_lease(db_path: Path, run_id: str) -> None:
    """The row as a database from before run leases holds it."""
    with closing(sqlite3.connect(db_path)) as raw, raw:
        raw.execute("UPDATE terminal_runs SET lease_expires_at = NULL WHERE run_id = ?", [run_id])
    raw.close()


def started_ago(db_path: Path, run_id: str, seconds: float) -> None:
    """The row as a run started ``seconds`` ago left it."""
    with closing(sqlite3.connect(db_path)) as raw, raw:
        raw.execute(
            "UPDATE terminal_runs SET started_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?) "
            "WHERE run_id = ?",
            [f"-{seconds:.0f} seconds", run_id],
        )
    raw.close()


async def recorded(store: RuntimeStore, scope: PrincipalScope, run_id: str) -> TerminalRunRecord:
    """The run's stored record, which must exist."""
    record = await store.terminal_runs.get(
        run_id, principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert record is not None
    return record


@pytest.mark.parametrize(
    "owner",
    ["four fields", "five fields", "unreadable"],
)
async def test_a_run_without_a_lease_whose_host_cannot_be_seen_is_orphaned(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, db_path: Path, owner: str
) -> None:
    scope = await session_of(authority)
    far = dataclasses.replace(await me("host_far"), host=FAR)
    text = {
        "four fields": far.encode().rsplit("|", 1)[0],
        "five fields": far.encode(),
        "unreadable": "a Host of another version",
    }[owner]
    run = dataclasses.replace(new_run(scope, "run_old", far), host_owner=text)
    await store.terminal_runs.insert(run)
    await anyio.to_thread.run_sync(without_lease, db_path, "run_old")

    async with host_process(store, authority, tmp_path, "host_near") as host:
        assert await host.journal.recover() == 1
        event = await host.events.wait_for(completed("run_old"))
        assert await host.journal.recover() == 0  # ended once

    record = await recorded(store, scope, "run_old")
    assert record.state == "orphaned"
    assert "recorded no lease" in (record.reason or "")
    assert dict(event.data) == {"run_id": "run_old", "state": "orphaned"}


async def test_an_unreadable_owner_whose_lease_still_runs_is_left_alone(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await session_of(authority)
    far = await me("host_far")
    run = dataclasses.replace(
        new_run(scope, "run_new", far), host_owner="a Host of a later version", lease_s=60
    )
    await store.terminal_runs.insert(run)

    async with host_process(store, authority, tmp_path, "host_near") as host:
        assert await host.journal.recover() == 0

    record = await recorded(store, scope, "run_new")
    assert record.state == "running"


async def older_hosts_run(
    store: RuntimeStore, scope: PrincipalScope, db_path: Path, pid: int
) -> None:
    """``run_old``, as an older Host (process ``pid`` here) recorded it: four-field owner,
    no machine, no lease."""
    info = await anyio.to_thread.run_sync(psutil.Process, pid)
    started = await anyio.to_thread.run_sync(info.create_time)
    owner = LeaseOwner(socket.gethostname(), pid, started, "host_old", machine="")
    text = owner.encode().rsplit("|", 1)[0]
    run = dataclasses.replace(new_run(scope, "run_old", owner), host_owner=text)
    await store.terminal_runs.insert(run)
    await anyio.to_thread.run_sync(without_lease, db_path, "run_old")


async def test_a_run_without_a_lease_of_an_older_host_still_running_here_is_left_alone(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, db_path: Path
) -> None:
    """The older Host is a real process on this machine, named as that version named it
    (four fields, no machine); its run is orphaned only once that process is gone."""
    scope = await session_of(authority)
    older = await anyio.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"])
    async with older:
        await older_hosts_run(store, scope, db_path, older.pid)

        async with host_process(store, authority, tmp_path, "host_near") as host:
            assert await host.journal.recover() == 0
            record = await recorded(store, scope, "run_old")
            assert record.state == "running"

            assert older.stdin is not None
            await older.stdin.aclose()
            await older.wait()
            assert await host.journal.recover() == 1
            await host.events.wait_for(completed("run_old"))

    record = await recorded(store, scope, "run_old")
    assert (record.state, "recorded no lease" in (record.reason or "")) == ("orphaned", True)


async def test_a_lease_less_run_older_than_any_run_can_last_is_orphaned_while_its_host_runs(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, db_path: Path
) -> None:
    """The grace for an older Host still running here lasts as long as one of its runs
    can (its deadline limit and the end, ``OLDER_RUN_GRACE_S``): a run recorded an hour
    ago ended long since, whoever holds that pid now, and is orphaned."""
    scope = await session_of(authority)
    older = await anyio.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"])
    async with older:
        await older_hosts_run(store, scope, db_path, older.pid)
        await anyio.to_thread.run_sync(started_ago, db_path, "run_old", OLDER_RUN_GRACE_S + 60)
        async with host_process(store, authority, tmp_path, "host_near") as host:
            assert await host.journal.recover() == 1
        assert older.stdin is not None
        await older.stdin.aclose()
    record = await recorded(store, scope, "run_old")
    assert (record.state, "recorded no lease" in (record.reason or "")) == ("orphaned", True)


async def test_a_run_of_an_older_host_that_exited_unreaped_is_orphaned(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, db_path: Path
) -> None:
    """A zombie keeps its pid and start time until its parent reaps it, which a parent
    that never waits (a shell that execs on) never does: it runs nothing."""
    scope = await session_of(authority)
    older = "import os, time; print(os.getpid(), flush=True); time.sleep(0.2)"
    parent = await anyio.open_process(
        ["sh", "-c", f"{sys.executable} -c '{older}' & exec sleep 30"]
    )
    async with parent:
        assert parent.stdout is not None
        pid = int((await parent.stdout.receive()).decode().split()[0])
        info = await anyio.to_thread.run_sync(psutil.Process, pid)
        started = await anyio.to_thread.run_sync(info.create_time)
        with anyio.fail_after(20):
            # Polling another process's state, which no event reports.
            while await anyio.to_thread.run_sync(info.status) != psutil.STATUS_ZOMBIE:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        owner = LeaseOwner(socket.gethostname(), pid, started, "host_old", machine="")
        run = dataclasses.replace(
            new_run(scope, "run_old", owner), host_owner=owner.encode().rsplit("|", 1)[0]
        )
        await store.terminal_runs.insert(run)
        await anyio.to_thread.run_sync(without_lease, db_path, "run_old")

        async with host_process(store, authority, tmp_path, "host_near") as host:
            assert await host.journal.recover() == 1
        parent.kill()

    assert (await recorded(store, scope, "run_old")).state == "orphaned"


def test_an_older_owner_that_names_this_very_process_is_never_taken_for_running() -> None:
    """In another PID namespace with the same host name, an older Host's pid (1, say)
    names the checking Host itself, with a start time that may match to the tick."""
    ours = LeaseOwner.current("host-here")
    older = dataclasses.replace(ours, instance="host_old", machine="")
    assert not older.runs_here_maybe()
