"""The store's terminal-runs group holds the per-session limit of live background runs.

"At most ``max_background`` live runs per session" holds across every Host
process on one database and every principal of a (group) session only if the
store itself counts: ``insert(..., max_live=N)`` counts the session's
``running`` rows in the insert's own transaction and refuses the row at the
limit (``TerminalRunLimit``), writing nothing. Run on every adapter.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue, PolicyRefusal
from hostkit.store import (
    NewTerminalRun,
    RuntimeStore,
    TerminalRunEnding,
    TerminalRunLimit,
    TerminalStreamStats,
)
from tests.support import facts

pytestmark = pytest.mark.anyio

HOST_A = "hostA|101|1.000|machine"
HOST_B = "hostB|202|2.000|machine"
ENDED = TerminalRunEnding(
    "succeeded", 0, "exited", 0.1, TerminalStreamStats(), TerminalStreamStats()
)


@pytest.fixture
async def sessions(authority: AuthorityResolver) -> tuple[str, str]:
    """A group conversation's session (alice and bob both speak in it) and another one."""
    alice = await authority.for_conversation(facts("group", "alice"))
    bob = await authority.for_conversation(facts("group", "bob"))
    other = await authority.for_conversation(facts("other", "alice"))
    assert alice.session_id is not None
    assert other.session_id is not None
    assert bob.session_id == alice.session_id
    return alice.session_id, other.session_id


def new_run(
    session: str, run_id: str, *, principal: str = "alice", host: str = HOST_A
) -> NewTerminalRun:
    return NewTerminalRun(
        run_id=run_id,
        session_id=session,
        turn_id=f"turn_{principal}",
        call_id="call_1",
        principal_id=principal,
        program="sleep",
        argc=2,
        cwd="/ws",
        sandbox="bubblewrap",
        host_owner=host,
    )


async def live(store: RuntimeStore, session: str) -> list[str]:
    return sorted(r.run_id for r in await store.terminal_runs.running() if r.session_id == session)


async def test_the_limit_counts_every_principal_and_host_of_the_session(
    store: RuntimeStore, sessions: tuple[str, str]
) -> None:
    group, other = sessions
    runs = store.terminal_runs
    await runs.insert(new_run(group, "run_a1"), max_live=3)
    await runs.insert(new_run(group, "run_b1", principal="bob"), max_live=3)
    await runs.insert(new_run(group, "run_a2", host=HOST_B), max_live=3)
    for refused in (
        new_run(group, "run_a3"),
        new_run(group, "run_b2", principal="bob", host=HOST_B),
    ):
        with pytest.raises(TerminalRunLimit) as caught:
            await runs.insert(refused, max_live=3)
        assert caught.value.message == "at most 3 background runs per session"
        assert (caught.value.session_id, caught.value.limit) == (group, 3)
        # A refusal of the effect (denied), not a store failure.
        assert isinstance(caught.value, PolicyRefusal)
    assert await live(store, group) == ["run_a1", "run_a2", "run_b1"]
    assert await runs.get("run_a3", principal_id="alice", session_id=group) is None
    # Another session has a limit of its own.
    await runs.insert(new_run(other, "run_other"), max_live=3)


async def test_only_running_rows_count_and_an_orphan_mark_frees_its_place(
    store: RuntimeStore, sessions: tuple[str, str]
) -> None:
    group, _ = sessions
    runs = store.terminal_runs
    await runs.insert(new_run(group, "run_1"), max_live=2)
    await runs.insert(new_run(group, "run_2", host=HOST_B), max_live=2)
    with pytest.raises(TerminalRunLimit):
        await runs.insert(new_run(group, "run_3"), max_live=2)
    assert await runs.finish("run_1", ENDED)
    await runs.insert(new_run(group, "run_3"), max_live=2)
    with pytest.raises(TerminalRunLimit):
        await runs.insert(new_run(group, "run_4"), max_live=2)
    # A dead Host's run frees its place once marked orphaned (or its lease lapses: below).
    assert await runs.mark_orphaned("run_2", host_owner=HOST_B, reason="its Host is gone")
    await runs.insert(new_run(group, "run_4"), max_live=2)
    assert await live(store, group) == ["run_3", "run_4"]
    # Without max_live nothing is counted (the Host's own bookkeeping, tests).
    await runs.insert(new_run(group, "run_5"))


async def test_a_run_whose_lease_lapsed_holds_no_place(
    store: RuntimeStore, sessions: tuple[str, str]
) -> None:
    """A Host that died stops renewing its runs' leases: a long-lived Host beside it gets
    the session's places back when they lapse, not only after a restart's recovery."""
    group, _ = sessions
    runs = store.terminal_runs
    await runs.insert(dataclasses.replace(new_run(group, "run_dead"), lease_s=0.2), max_live=1)
    with pytest.raises(TerminalRunLimit):
        await runs.insert(new_run(group, "run_live", host=HOST_B), max_live=1)
    await anyio.sleep(0.3)
    await runs.insert(new_run(group, "run_live", host=HOST_B), max_live=1)
    with pytest.raises(TerminalRunLimit):
        await runs.insert(new_run(group, "run_more", host=HOST_B), max_live=1)


async def test_concurrent_inserts_never_pass_the_limit_together(
    store: RuntimeStore, sessions: tuple[str, str]
) -> None:
    group, _ = sessions
    refused: list[str] = []

    async def insert(index: int) -> None:
        host = HOST_A if index % 2 else HOST_B
        principal = "alice" if index % 3 else "bob"
        try:
            await store.terminal_runs.insert(
                new_run(group, f"run_{index}", principal=principal, host=host), max_live=4
            )
        except TerminalRunLimit:
            refused.append(f"run_{index}")

    async with anyio.create_task_group() as tasks:
        for index in range(12):
            tasks.start_soon(insert, index)
    assert len(await live(store, group)) == 4
    assert len(refused) == 8


async def test_a_bad_max_live_is_invalid_and_writes_nothing(
    store: RuntimeStore, sessions: tuple[str, str]
) -> None:
    group, _ = sessions
    for bad in (0, -1, True, 2.5, "8"):
        with pytest.raises(InvalidValue):
            await store.terminal_runs.insert(new_run(group, "run_bad"), max_live=bad)  # type: ignore[arg-type]
    assert await live(store, group) == []
