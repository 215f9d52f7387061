"""Clause: background terminal runs are durable.

"Background terminal runs are durable: their state, exit code and statistics
are persisted, a completion event is emitted, and after a restart orphaned
runs are marked explicitly." The store group runs on real SQLite; the
terminal tools run real children under a real supervisor with a
``RunJournal``; a "restart" is a fresh registry (and journal) on the same
store, and a dead Host is a real process that has exited. The SIGKILL of a
whole Host process is ``tests/faults/test_terminal_orphans.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    COMPLETED_EVENT,
    UNSANDBOXED,
    ProcessSupervisor,
    RunJournal,
    TerminalRuns,
)
from hostkit.effects import EffectRuntime
from hostkit.errors import InvalidValue, LeaseLost
from hostkit.store import (
    LeaseOwner,
    NewTerminalRun,
    RuntimeStore,
    TerminalRunEnding,
    TerminalStreamStats,
)
from hostkit.turns import TurnEvent
from hostkit.types import EffectResult, PrincipalScope
from tests.contract.test_context_basic import context_for
from tests.contract.test_effects_terminal import KEY, NAMES, PY, Session, Tools, output
from tests.support import facts

pytestmark = pytest.mark.anyio

WAIT_S = 30.0


class Events:
    """An observer that keeps every event and wakes waiters."""

    def __init__(self) -> None:
        self.seen: list[TurnEvent] = []
        self._changed = anyio.Event()

    def notify(self, event: TurnEvent) -> None:
        self.seen.append(event)
        self._changed.set()

    async def wait_for(self, predicate: Callable[[TurnEvent], bool]) -> TurnEvent:
        with anyio.fail_after(WAIT_S):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                self._changed = anyio.Event()
                await self._changed.wait()


async def me(instance: str) -> LeaseOwner:
    return await anyio.to_thread.run_sync(LeaseOwner.current, instance)


async def dead_host() -> LeaseOwner:
    """The identity of a real process that has exited: a Host that died."""
    # It lives until its stdin closes, so its start time can be read before it exits.
    child = await anyio.open_process([PY, "-c", "import sys; sys.stdin.read()"])
    async with child:
        info = await anyio.to_thread.run_sync(psutil.Process, child.pid)
        started = await anyio.to_thread.run_sync(info.create_time)
        assert child.stdin is not None
        await child.stdin.aclose()
        await child.wait()
    owner = await me("host_dead")
    return dataclasses.replace(owner, pid=child.pid, started=started)


async def session_of(authority: AuthorityResolver, conversation: str = "c") -> PrincipalScope:
    return await authority.for_conversation(facts(conversation, "user"))


def new_run(scope: PrincipalScope, run_id: str, owner: LeaseOwner) -> NewTerminalRun:
    return NewTerminalRun(
        run_id=run_id,
        session_id=scope.session_id or "",
        turn_id="turn_1",
        call_id="call_1",
        principal_id=scope.principal_id,
        program="python3",
        argc=3,
        cwd="/ws",
        sandbox="none",
        host_owner=owner.encode(),
    )


ENDING = TerminalRunEnding(
    state="failed",
    exit_code=-9,
    reason="killed by SIGKILL",
    duration_s=1.5,
    stdout=TerminalStreamStats(12_345, True, "spawn_1:stdout"),
    stderr=TerminalStreamStats(7, False, "spawn_1:stderr"),
)


# --- the store group ---------------------------------------------------------------------


async def test_a_run_record_ends_exactly_once_with_its_statistics(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await session_of(authority)
    owner = await me("host_a")
    record = await store.terminal_runs.insert(new_run(scope, "run_1", owner))
    assert (record.state, record.pid, record.ended_at) == ("running", None, None)
    assert await store.terminal_runs.mark_started(
        "run_1", pid=4242, pid_start=1.5, spawn_id="spawn_1"
    )
    assert await store.terminal_runs.finish("run_1", ENDING)
    got = await store.terminal_runs.get(
        "run_1", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert got is not None
    assert (got.state, got.exit_code, got.signal, got.duration_s) == ("failed", -9, 9, 1.5)
    assert (got.pid, got.pid_start, got.spawn_id) == (4242, 1.5, "spawn_1")
    assert (got.stdout, got.stderr) == (ENDING.stdout, ENDING.stderr)
    assert got.ended_at is not None
    # Ended once: neither a second end nor an orphan mark changes it.
    assert not await store.terminal_runs.finish(
        "run_1", dataclasses.replace(ENDING, state="succeeded")
    )
    assert not await store.terminal_runs.mark_orphaned(
        "run_1", host_owner=owner.encode(), reason="late"
    )
    assert not await store.terminal_runs.mark_started("run_1", pid=1, pid_start=None, spawn_id="x")
    again = await store.terminal_runs.get(
        "run_1", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert again == got


async def test_a_turn_a_takeover_ended_records_no_run(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """A turn whose process paused past its lease and was ended (lost) by the Host that took
    its session starts no background run there: the record comes first, and is refused."""
    scope = await session_of(authority)
    owner = await me("host_a")
    session = scope.session_id or ""
    await store.write(
        lambda c: c.execute(
            "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
            "core_revision, generation, status, started_at) "
            "VALUES ('turn_1', 'req_1', ?, ?, 'assistant', 'rev1', 1, 'lost', 'x')",
            [scope.principal_id, session],
        )
    )
    with pytest.raises(LeaseLost):
        await store.terminal_runs.insert(new_run(scope, "run_1", owner))
    assert (
        await store.terminal_runs.get("run_1", principal_id=scope.principal_id, session_id=session)
        is None
    )


async def test_a_run_is_orphaned_only_under_its_recorded_owner_and_only_while_running(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await session_of(authority)
    owner = await me("host_a")
    await store.terminal_runs.insert(new_run(scope, "run_2", owner))
    assert not await store.terminal_runs.mark_orphaned(
        "run_2", host_owner="someone|1|2.000|else", reason="not its owner"
    )
    assert [r.run_id for r in await store.terminal_runs.running()] == ["run_2"]
    assert await store.terminal_runs.mark_orphaned(
        "run_2", host_owner=owner.encode(), reason="its Host is gone"
    )
    assert await store.terminal_runs.running() == ()
    assert not await store.terminal_runs.finish("run_2", ENDING)  # a late end changes nothing
    got = await store.terminal_runs.get(
        "run_2", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert got is not None
    assert (got.state, got.reason, got.exit_code) == ("orphaned", "its Host is gone", None)


async def test_runs_are_read_by_their_owner_and_session_or_an_operator_only(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    mine, other = await session_of(authority, "c"), await session_of(authority, "d")
    owner = await me("host_a")
    await store.terminal_runs.insert(new_run(mine, "run_3", owner))
    assert (
        await store.terminal_runs.get(
            "run_3", principal_id=other.principal_id, session_id=other.session_id or ""
        )
        is None
    )
    assert (
        await store.terminal_runs.get(
            "run_3", principal_id="someone-else", session_id=mine.session_id or ""
        )
        is None
    )
    assert [r.run_id for r in await store.terminal_runs.list(mine)] == ["run_3"]
    assert await store.terminal_runs.list(other) == ()
    assert [r.run_id for r in await store.terminal_runs.list(operator)] == ["run_3"]


async def test_bad_run_records_are_invalid_and_write_nothing(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await session_of(authority)
    owner = await me("host_a")
    with pytest.raises(InvalidValue):
        await store.terminal_runs.insert(
            dataclasses.replace(new_run(scope, "run_4", owner), argc=0)
        )
    with pytest.raises(InvalidValue):
        await store.terminal_runs.insert(
            dataclasses.replace(new_run(scope, "run_4", owner), run_id="x" * 500)
        )
    assert await store.terminal_runs.running() == ()
    await store.terminal_runs.insert(new_run(scope, "run_4", owner))
    with pytest.raises(InvalidValue):
        await store.terminal_runs.insert(new_run(scope, "run_4", owner))  # the id is taken
    with pytest.raises(InvalidValue):
        await store.terminal_runs.finish("run_4", dataclasses.replace(ENDING, state="orphaned"))
    with pytest.raises(InvalidValue):
        await store.terminal_runs.running(limit=0)
    (still,) = await store.terminal_runs.running()
    assert (still.run_id, still.state) == ("run_4", "running")


# --- the terminal effects with a journal ----------------------------------------------------


@dataclasses.dataclass
class HostSide:
    """One Host process's terminal tools: a registry with a journal on the shared store."""

    runs: TerminalRuns
    journal: RunJournal
    events: Events
    runtime: EffectRuntime
    authority: AuthorityResolver

    async def session(self, conversation: str = "c", principal: str = "user") -> Session:
        scope = await self.authority.for_conversation(facts(conversation, principal))
        context = dataclasses.replace(context_for(scope), capability_snapshot={"effects": NAMES})
        return Session(self.runtime, context, await self.runtime.prepare_catalog(context))


@asynccontextmanager
async def host_process(
    store: RuntimeStore,
    authority: AuthorityResolver,
    tmp_path: Path,
    instance: str,
    journal_type: type[RunJournal] = RunJournal,
    *,
    max_background: int = 8,
) -> AsyncIterator[HostSide]:
    workspace = tmp_path / "ws"
    await anyio.Path(workspace).mkdir(exist_ok=True)
    events = Events()
    journal = journal_type(store=store, host_owner=await me(instance), observer=events)
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
            grace_s=0.2,
            confirm_s=3.0,
            journal=journal,
            max_background=max_background,
        ) as runs,
    ):
        runtime = EffectRuntime(toolsets=Tools(runs.tools(sandbox=UNSANDBOXED), workspace))
        yield HostSide(runs, journal, events, runtime, authority)


async def start(session: Session, code: str) -> str:
    started = await session.call("terminal.run", argv=[PY, "-c", code], background=True)
    assert started.status == "succeeded", started.error
    run_id: str = output(started)["run_id"]
    return run_id


def completed(run_id: str) -> Callable[[TurnEvent], bool]:
    return lambda event: event.kind == COMPLETED_EVENT and event.data["run_id"] == run_id


async def test_a_run_is_recorded_before_it_ends_and_its_end_before_the_event(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    code = "import sys, time; print('x' * 4999); sys.stdout.flush(); time.sleep(0.3); sys.exit(3)"
    async with host_process(store, authority, tmp_path, "host_a") as host:
        session = await host.session()
        run_id = await start(session, code)
        key = {"principal_id": session.context.principal.principal_id}
        key["session_id"] = session.context.session_id
        running = await store.terminal_runs.get(run_id, **key)
        assert running is not None
        assert (running.state, running.program, running.argc) == ("running", Path(PY).name, 3)
        assert running.call_id == "c1"
        assert running.turn_id == session.context.turn_id
        assert running.host_owner == host.journal.owner_text
        event = await host.events.wait_for(completed(run_id))
        # The record is final by the time anyone hears of the end.
        record = await store.terminal_runs.get(run_id, **key)
    assert record is not None
    assert (record.state, record.exit_code, record.signal) == ("failed", 3, None)
    assert record.pid is not None
    assert record.pid_start is not None
    assert record.stdout == TerminalStreamStats(5000, False, f"{record.spawn_id}:stdout")
    assert record.stderr.total_bytes == 0
    assert dict(event.data) == {
        "run_id": run_id,
        "state": "failed",
        "exit_code": 3,
        "duration_s": round(record.duration_s or 0.0, 3),
        "stdout_bytes": 5000,
        "stderr_bytes": 0,
        "stdout_truncated": False,
        "stderr_truncated": False,
    }
    assert (event.session_id, event.turn_id) == (session.context.session_id, "turn_now")


async def test_status_after_a_restart_answers_from_the_durable_record(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    async with host_process(store, authority, tmp_path, "host_a") as first:
        session = await first.session()
        run_id = await start(session, "print('done')")
        await first.events.wait_for(completed(run_id))
    # A new registry and journal (the Host restarted) knows the run only from the store.
    async with host_process(store, authority, tmp_path, "host_b") as second:
        again = await second.session()
        status = await again.call("terminal.status", run_id=run_id)
        stranger = await (await second.session("someone-else")).call(
            "terminal.status", run_id=run_id
        )
    assert status.status == "succeeded", status.error
    out = output(status)
    assert (out["run_id"], out["status"], out["exit_code"]) == (run_id, "succeeded", 0)
    assert out["stdout"]["total_bytes"] == len("done\n")
    assert stranger.status == "not_found"


async def test_a_live_hosts_run_reads_running_elsewhere_and_is_not_stopped_there(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    async with host_process(store, authority, tmp_path, "host_a") as first:
        session = await first.session()
        run_id = await start(session, "import time; time.sleep(60)")
        async with host_process(store, authority, tmp_path, "host_b") as second:
            elsewhere = await second.session()
            status = await elsewhere.call("terminal.status", run_id=run_id)
            stop = await elsewhere.call("terminal.stop", run_id=run_id)
            recovered = await second.journal.recover()
        assert (status.status, output(status)["status"]) == ("succeeded", "running")
        assert stop.status == "denied"
        assert recovered == 0  # its Host is alive: not an orphan
        stopped = await session.call("terminal.stop", run_id=run_id)
        assert output(stopped)["status"] == "cancelled"
        record = await store.terminal_runs.get(
            run_id,
            principal_id=session.context.principal.principal_id,
            session_id=session.context.session_id,
        )
    assert record is not None
    assert record.state == "cancelled"


@pytest.mark.parametrize("holder", ["died", "closed here"])
async def test_a_gone_hosts_run_is_marked_orphaned_and_its_tree_ended(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, holder: str
) -> None:
    """What a SIGKILLed Host could leave, or a Host a notebook closed before its run's end
    could be written: a record still running and, against the odds, its process (in its
    own session, as the lifecycle spawns it) still alive. The reason says which: a Host
    closed in this process is no process gone."""
    scope = await session_of(authority)
    owner = await dead_host() if holder == "died" else await me("host_closed")
    leftover = await anyio.open_process(
        [PY, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    async with leftover:
        started = await anyio.to_thread.run_sync(lambda: psutil.Process(leftover.pid).create_time())
        await store.terminal_runs.insert(new_run(scope, "run_gone", owner))
        await store.terminal_runs.mark_started(
            "run_gone", pid=leftover.pid, pid_start=started, spawn_id="spawn_gone"
        )
        owner.retire()
        async with host_process(store, authority, tmp_path, "host_new") as host:
            assert await host.journal.recover() == 1
            event = await host.events.wait_for(completed("run_gone"))
            with anyio.fail_after(WAIT_S):
                await leftover.wait()
            assert await host.journal.recover() == 0
    record = await store.terminal_runs.get(
        "run_gone", principal_id=scope.principal_id, session_id=scope.session_id or ""
    )
    assert record is not None
    assert record.state == "orphaned"
    assert record.reason is not None
    if holder == "died":
        assert f"Host process {owner.pid} that owned the run is gone" in record.reason
    else:
        assert "the Host that owned the run, in this process, closed" in record.reason
        assert "gone" not in record.reason
    assert "were killed" in record.reason
    assert leftover.returncode == -9
    assert dict(event.data) == {"run_id": "run_gone", "state": "orphaned"}


async def test_status_of_a_dead_hosts_run_reports_it_orphaned(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    dead = await dead_host()
    async with host_process(store, authority, tmp_path, "host_new") as host:
        session = await host.session()
        scope = session.context.principal
        await store.terminal_runs.insert(new_run(scope, "run_lost", dead))
        result: EffectResult = await session.call("terminal.status", run_id="run_lost")
    assert result.status == "indeterminate"
    out: dict[str, Any] = output(result)
    assert (out["run_id"], out["status"]) == ("run_lost", "orphaned")
    assert "gone" in (result.error or "")
    assert json.dumps(out)  # a plain, serialisable view


async def test_a_run_that_cannot_be_recorded_never_starts(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    class Colliding(RunJournal):
        """Records every run under one id: from the second run on, the real insert fails."""

        async def begin(self, run: NewTerminalRun, *, max_live: int | None = None) -> None:
            await super().begin(dataclasses.replace(run, run_id="run_x"), max_live=max_live)

    marker = tmp_path / "ws" / "ran"
    async with host_process(store, authority, tmp_path, "host_a", Colliding) as host:
        session = await host.session()
        scope = session.context.principal
        await store.terminal_runs.insert(new_run(scope, "run_x", host.journal.host_owner))
        result = await session.call(
            "terminal.run", argv=[PY, "-c", f"open({str(marker)!r}, 'w')"], background=True
        )
    assert (result.status, result.started) == ("failed", True)
    assert "could not be recorded" in (result.error or "")
    assert not await anyio.Path(marker).exists()


async def test_the_session_limit_holds_across_host_processes_and_principals(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    """Two Hosts on one database, each with its own registry: the runs either started in a
    group session count against its one limit, whoever started them, and a refused run
    starts nothing."""
    marker = tmp_path / "ws" / "ran"
    sneaky = f"open({str(marker)!r}, 'w')"
    async with (
        host_process(store, authority, tmp_path, "host_a", max_background=2) as first,
        host_process(store, authority, tmp_path, "host_b", max_background=2) as second,
    ):
        alice = await first.session("group", "alice")
        alices = await start(alice, "import time; time.sleep(60)")
        await start(await first.session("group", "bob"), "import time; time.sleep(60)")
        for who in ("alice", "bob"):
            # The other Host's registry holds none of these runs: only the store can tell.
            elsewhere = await second.session("group", who)
            assert elsewhere.context.session_id == alice.context.session_id
            refused = await elsewhere.call("terminal.run", argv=[PY, "-c", sneaky], background=True)
            assert (refused.status, refused.error) == (
                "denied",
                "at most 2 background runs per session",
            )
        assert not await anyio.Path(marker).exists()
        running = await store.terminal_runs.running()
        assert len(running) == len({r.principal_id for r in running}) == 2  # alice's, bob's
        # An ended run frees its place for any Host.
        assert (await alice.call("terminal.stop", run_id=alices)).status == "cancelled"
        await start(await second.session("group", "alice"), "import time; time.sleep(60)")
        assert len(await store.terminal_runs.running()) == 2
