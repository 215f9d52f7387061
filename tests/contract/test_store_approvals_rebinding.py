"""A conversation moved to another session voids the previous session's open calls.

Nobody can answer an approval of a session its conversation no longer binds
(an answer runs in the bound session), so the rebinding itself makes them
``stale``, in its own transaction and with a reason naming the new session:
lists show the truth before anyone tries to answer. A turn of the previous
session still running elsewhere ends without waiting on such an approval.
Runs on every adapter of the store matrix (SQLite and PostgreSQL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hostkit.store import Admitted, LeaseOwner, PendingApproval, TurnAdmission
from hostkit.types import PrincipalScope, TurnResult, new_id
from tests.contract._store_adapters import StoreUnderTest, open_adapter
from tests.contract.test_store_approvals import new_approval, pending
from tests.support import facts

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


async def bind(sut: StoreUnderTest, session: str = "bound", name: str = "alice") -> PrincipalScope:
    return await sut.authority.for_conversation(facts(f"c-{name}", name), session=session)


async def statuses(sut: StoreUnderTest) -> dict[str, tuple[str, str | None]]:
    rows = await sut.store.approvals.list(sut.operator, status=None)
    return {row.approval_id: (row.status, row.void_reason) for row in rows}


async def test_a_fresh_session_voids_the_previous_sessions_open_calls_at_once(
    sut: StoreUnderTest,
) -> None:
    first = await bind(sut)
    store = sut.store.approvals
    waiting = await pending(sut, first)
    answered = await pending(sut, first)
    await store.answer(first, answered.approval_id, decision="approve_once", fingerprint=None)
    ran = await pending(sut, first)
    await store.answer(first, ran.approval_id, decision="approve_once", fingerprint=None)
    session = first.session_id or ""
    assert await store.claim(
        ran.approval_id, session_id=session, turn_id=await sut.seed_turn(session)
    )
    elsewhere = await pending(sut, await bind(sut, name="bob"))

    second = await bind(sut, "fresh")

    moved = f"the conversation was bound to session {second.session_id} before this call ran"
    assert await statuses(sut) == {
        waiting.approval_id: ("stale", moved),
        answered.approval_id: ("stale", moved),
        ran.approval_id: ("executed", None),
        elsewhere.approval_id: ("pending", None),
    }
    for void in (waiting, answered):
        assert await sut.raw_arguments(void.approval_id) == "{}"
    late = await store.answer(first, waiting.approval_id, decision="approve_once", fingerprint=None)
    assert (late.accepted, late.approval.status) == (False, "stale")
    [rebound] = await sut.store.read_audit(sut.operator, kind="conversation.rebound")
    assert rebound.detail["voided_approvals"] == 2


async def test_resuming_an_earlier_session_voids_the_one_it_leaves(sut: StoreUnderTest) -> None:
    """Every rebinding, not only a fresh session; staying bound voids nothing."""
    first = await bind(sut)
    second = await bind(sut, "fresh")
    waiting = await pending(sut, second)
    assert (await bind(sut)).session_id == second.session_id
    assert (await bind(sut, second.session_id or "")).session_id == second.session_id
    assert (await statuses(sut))[waiting.approval_id] == ("pending", None)

    await bind(sut, first.session_id or "")

    assert (await statuses(sut))[waiting.approval_id] == (
        "stale",
        f"the conversation was bound to session {first.session_id} before this call ran",
    )


async def _running_turn(sut: StoreUnderTest, scope: PrincipalScope) -> Admitted:
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "other-process")
    admitted = await sut.store.turns.admit(
        TurnAdmission(
            turn_id=new_id("turn"),
            request_id=new_id("req"),
            principal_id=scope.principal_id,
            core_id="assistant",
            core_revision="rev1",
            generation=1,
            session=scope.session_id or "",
            trace_id=new_id("trace"),
        ),
        owner=owner,
        ttl_s=600.0,
    )
    assert isinstance(admitted, Admitted), admitted
    return admitted


async def _ask(sut: StoreUnderTest, scope: PrincipalScope, turn_id: str) -> PendingApproval:
    asked = dataclasses.replace(await new_approval(sut, scope), turn_id=turn_id)
    return await sut.store.approvals.insert(asked)


def _paused(admitted: Admitted, approval_id: str) -> TurnResult:
    lease = admitted.lease
    return TurnResult(
        request_id="req",
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        core_id="assistant",
        core_revision="rev1",
        outcome="needs_user",
        text="",
        durable_result_ref=lease.turn_id,
        generation=1,
        pending_approval=approval_id,
    )


@pytest.mark.parametrize("asked", ["before", "after"])
async def test_a_turn_still_running_when_its_conversation_moved_does_not_wait_on_its_call(
    sut: StoreUnderTest, asked: str
) -> None:
    """Its process ends it ``needs_user`` on an approval nobody can answer: it ends
    ``cancelled`` saying why, and one it asked after the rebinding is voided too."""
    first = await bind(sut)
    running = await _running_turn(sut, first)
    if asked == "before":
        approval = await _ask(sut, first, running.lease.turn_id)
    second = await bind(sut, "fresh")
    if asked == "after":
        approval = await _ask(sut, first, running.lease.turn_id)
        assert approval.status == "stale"  # stored void as it is asked: nobody is prompted

    ended = await sut.store.turns.finish(
        running.lease, _paused(running, approval.approval_id), event_seq=2
    )

    moved = f"the conversation was bound to session {second.session_id} before this call ran"
    assert (ended.outcome, ended.pending_approval) == ("cancelled", None)
    assert ended.error == f"approval {approval.approval_id} is stale: {moved}; nobody can answer it"
    assert (await statuses(sut))[approval.approval_id] == ("stale", moved)
    state = await sut.store.turns.state(first, running.lease.turn_id)
    assert state.status == "cancelled"


async def test_a_turn_of_a_session_still_bound_pauses_on_its_call(sut: StoreUnderTest) -> None:
    scope = await bind(sut)
    running = await _running_turn(sut, scope)
    approval = await _ask(sut, scope, running.lease.turn_id)
    ended = await sut.store.turns.finish(
        running.lease, _paused(running, approval.approval_id), event_seq=2
    )
    assert (ended.outcome, ended.pending_approval) == ("needs_user", approval.approval_id)
    assert (await statuses(sut))[approval.approval_id] == ("pending", None)
