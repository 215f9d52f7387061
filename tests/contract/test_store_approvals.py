"""The store's approvals group, written against ``RuntimeStore`` and run on every adapter.

Owner predicates (another owner's approval is indistinguishable from a missing
one), first answer wins, claim once, typed security facts, and bad input that
is refused with a typed, bounded error while everything accepted stays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import (
    HostkitError,
    InvalidValue,
    LeaseLost,
    NotFoundOrUnauthorized,
    ScopeError,
    StoreError,
)
from hostkit.store import (
    Admitted,
    ApprovalAnswer,
    ApprovalDecision,
    ClaimedApproval,
    ConversationTarget,
    LeaseOwner,
    NewApproval,
    PendingApproval,
    RowStore,
    TurnAdmission,
)
from hostkit.types import PrincipalScope, new_id
from tests.contract._store_adapters import StoreUnderTest, open_adapter
from tests.support import facts

pytestmark = pytest.mark.anyio

MESSAGE_LIMIT = 500


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


async def owner(sut: StoreUnderTest, name: str) -> PrincipalScope:
    return await sut.authority.for_conversation(facts(f"c-{name}", name))


async def new_approval(
    sut: StoreUnderTest,
    scope: PrincipalScope,
    *,
    secret_names: Sequence[str] = (),
    view: dict[str, Any] | None = None,
    **fields: Any,
) -> NewApproval:
    session_id = scope.session_id or ""
    values: dict[str, Any] = {
        "approval_id": new_id("apr"),
        "session_id": session_id,
        "turn_id": await sut.seed_turn(session_id),
        "principal_id": scope.principal_id,
        "core_id": "assistant",
        "core_revision": "rev1",
        "effect": "files.stamp",
        "call_id": new_id("call"),
        "arguments": {"label": "one", "api_key": "sk-live-123456", "nested": {"n": [1, 2]}},
        "view": view if view is not None else {"effect": "files.stamp", "arguments": {"n": 1}},
        "policy_fingerprint": "fp1",
        "rule_key": "files.stamp",
        "secret_names": tuple(secret_names),
    }
    values.update(fields)
    return NewApproval(**values)


async def pending(sut: StoreUnderTest, scope: PrincipalScope, **fields: Any) -> PendingApproval:
    return await sut.store.approvals.insert(await new_approval(sut, scope, **fields))


async def denial_reasons(sut: StoreUnderTest) -> dict[str, str]:
    rows = await sut.store.read_audit(sut.operator, kind="principal_scope.owner_lookup_denied")
    return {row.subject or "": row.reason or "" for row in rows}


def assert_bounded(error: HostkitError) -> None:
    assert len(str(error)) <= MESSAGE_LIMIT
    assert "\n" not in str(error)


# -- recording and reading --------------------------------------------------------------


async def test_an_inserted_approval_reads_back_frozen_and_without_its_arguments(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    new = await new_approval(sut, alice)
    stored = await sut.store.approvals.insert(new)
    assert stored == await sut.store.approvals.get(alice, new.approval_id)
    assert (stored.approval_id, stored.session_id, stored.turn_id) == (
        new.approval_id,
        alice.session_id,
        new.turn_id,
    )
    assert (stored.status, stored.decision, stored.decided_by, stored.decided_at) == (
        "pending",
        None,
        None,
        None,
    )
    assert stored.view == {"effect": "files.stamp", "arguments": {"n": 1}}
    assert "sk-live-123456" not in repr(stored)
    with pytest.raises(TypeError):
        stored.view["arguments"]["n"] = 2  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.status = "approved"  # type: ignore[misc]


async def test_whether_an_approval_binds_a_secret_is_a_typed_fact_not_a_view_key(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    binds = await pending(sut, alice, secret_names=("HK_TOKEN", "HK_OTHER"), view={"x": 1})
    # A view that merely *says* "binds" grants or removes nothing.
    says = await pending(sut, alice, view={"binds": ["secret.bind:HK_TOKEN"]})
    assert (binds.secret_names, binds.binds_secret) == (("HK_TOKEN", "HK_OTHER"), True)
    assert (says.secret_names, says.binds_secret) == ((), False)
    listed = {a.approval_id: a for a in await sut.store.approvals.list(alice)}
    assert listed[binds.approval_id].secret_names == ("HK_TOKEN", "HK_OTHER")
    assert not listed[says.approval_id].binds_secret
    # The fact survives every status change.
    await sut.store.approvals.answer(
        alice, binds.approval_id, decision="approve_session", fingerprint=None
    )
    claimed = await sut.store.approvals.claim(
        binds.approval_id,
        session_id=binds.session_id,
        turn_id=await sut.seed_turn(binds.session_id),
    )
    assert claimed is not None
    assert claimed.approval.binds_secret


async def test_what_the_tools_check_found_is_kept_typed_through_every_status(
    sut: StoreUnderTest,
) -> None:
    """The continuation compares ``target_digest`` with what the check finds again; a
    view that merely holds such a key is display only."""
    alice = await owner(sut, "alice")
    found = await pending(sut, alice, target_digest="sha256:abc123")
    says = await pending(sut, alice, view={"target_digest": "sha256:abc123"})
    assert (found.target_digest, says.target_digest) == ("sha256:abc123", None)
    await sut.store.approvals.answer(
        alice, found.approval_id, decision="approve_once", fingerprint="fp1"
    )
    claimed = await sut.store.approvals.claim(
        found.approval_id,
        session_id=found.session_id,
        turn_id=await sut.seed_turn(found.session_id),
    )
    assert claimed is not None
    assert claimed.approval.target_digest == "sha256:abc123"


async def test_lists_are_newest_first_filtered_by_status_and_bounded(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    ids = [(await pending(sut, alice)).approval_id for _ in range(4)]
    await sut.store.approvals.answer(alice, ids[0], decision="deny", fingerprint=None)
    assert [a.approval_id for a in await sut.store.approvals.list(alice)] == ids[:0:-1]
    everything = await sut.store.approvals.list(alice, status=None)
    assert [a.approval_id for a in everything] == ids[::-1]
    assert [a.approval_id for a in await sut.store.approvals.list(alice, status="denied")] == [
        ids[0]
    ]
    assert len(await sut.store.approvals.list(alice, status=None, limit=2)) == 2
    assert isinstance(everything, tuple)


async def test_open_lists_every_call_that_can_still_run_however_many_newer_ones_closed(
    sut: StoreUnderTest,
) -> None:
    """``status="open"``: pending, or answered and not claimed by a continuation, selected
    in SQL. A denial stays ``denied`` after its continuation ran, so a page read by status
    and filtered afterwards was filled by closed denials and lost the stranded answer."""
    alice = await owner(sut, "alice")
    stranded = await pending(sut, alice)
    await sut.store.approvals.answer(alice, stranded.approval_id, decision="deny", fingerprint=None)
    asked = await pending(sut, alice)
    for _ in range(3):
        closed = await pending(sut, alice)
        await sut.store.approvals.answer(
            alice, closed.approval_id, decision="deny", fingerprint=None
        )
        turn = await sut.seed_turn(closed.session_id)
        assert await sut.store.approvals.claim(
            closed.approval_id, session_id=closed.session_id, turn_id=turn
        )
    for scope in (alice, sut.operator):
        page = await sut.store.approvals.page(scope, status="open", limit=2)
        assert [a.approval_id for a in page.approvals] == [asked.approval_id, stranded.approval_id]
        assert page.truncated is False
    cut = await sut.store.approvals.page(alice, status="open", limit=1)
    assert ([a.approval_id for a in cut.approvals], cut.truncated) == ([asked.approval_id], True)
    assert (await sut.store.approvals.page(alice, status=None, limit=4)).truncated is True
    assert (await sut.store.approvals.page(alice, status=None, limit=5)).truncated is False
    assert await sut.store.approvals.list(alice, status="open") == page.approvals
    bob = await owner(sut, "bob")
    assert (await sut.store.approvals.page(bob, status="open")).approvals == ()


# -- owner predicates -------------------------------------------------------------------


async def test_another_owners_approval_looks_exactly_like_a_missing_one(
    sut: StoreUnderTest,
) -> None:
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    mine = await pending(sut, alice)
    errors = []
    for approval_id in (mine.approval_id, "apr_does_not_exist"):
        with pytest.raises(NotFoundOrUnauthorized) as get:
            await sut.store.approvals.get(bob, approval_id)
        with pytest.raises(NotFoundOrUnauthorized) as answer:
            await sut.store.approvals.answer(
                bob, approval_id, decision="approve_once", fingerprint=None
            )
        errors.append((type(get.value), str(get.value), str(answer.value)))
    assert errors[0] == errors[1]
    assert await sut.store.approvals.list(bob, status=None) == ()
    # Bob's attempt changed nothing, and the real reasons are in the Host-only audit.
    assert (await sut.store.approvals.get(alice, mine.approval_id)).status == "pending"
    reasons = await denial_reasons(sut)
    assert reasons[f"approval:{mine.approval_id}"] == "unauthorized"
    assert reasons["approval:apr_does_not_exist"] == "missing"


async def test_an_operator_sees_every_owned_sessions_approvals(sut: StoreUnderTest) -> None:
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    a, b = await pending(sut, alice), await pending(sut, bob)
    listed = [x.approval_id for x in await sut.store.approvals.list(sut.operator)]
    assert listed == [b.approval_id, a.approval_id]
    assert (await sut.store.approvals.get(sut.operator, a.approval_id)).session_id == (
        alice.session_id
    )
    answered = await sut.store.approvals.answer(
        sut.operator, b.approval_id, decision="approve_once", fingerprint="fp1"
    )
    assert answered.accepted
    assert answered.approval.decided_by == sut.operator.principal_id


async def test_a_scope_this_store_did_not_issue_is_refused(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    approval = await pending(sut, await owner(sut, "alice"))
    (tmp_path / "other").mkdir()
    async with open_adapter(sut.name, tmp_path / "other") as other:
        foreign = await owner(other, "alice")
        with pytest.raises(ScopeError):
            await sut.store.approvals.get(foreign, approval.approval_id)
        with pytest.raises(ScopeError):
            await sut.store.approvals.list(foreign)
        with pytest.raises(ScopeError):
            await sut.store.approvals.answer(
                foreign, approval.approval_id, decision="approve_once", fingerprint=None
            )


# -- answers ----------------------------------------------------------------------------


async def test_of_concurrent_answers_exactly_one_is_accepted(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    decisions: list[ApprovalDecision] = ["approve_once", "deny", "approve_session"] * 4
    answers: list[tuple[ApprovalDecision, ApprovalAnswer]] = []

    async def answer(decision: ApprovalDecision, scope: PrincipalScope) -> None:
        answers.append(
            (
                decision,
                await sut.store.approvals.answer(
                    scope, approval.approval_id, decision=decision, fingerprint="fp1"
                ),
            )
        )

    async with anyio.create_task_group() as group:
        for i, decision in enumerate(decisions):
            group.start_soon(answer, decision, sut.operator if i % 2 else alice)
    accepted = [(d, a) for d, a in answers if a.accepted]
    assert len(answers) == len(decisions)
    assert len(accepted) == 1
    decision, winner = accepted[0]
    final = await sut.store.approvals.get(alice, approval.approval_id)
    assert final == winner.approval
    assert final.decision == decision
    assert final.status == ("denied" if decision == "deny" else "approved")
    # Every loser is told the status that stopped it, which is the winner's.
    assert {a.approval.status for _, a in answers if not a.accepted} == {final.status}


async def test_a_changed_fingerprint_makes_the_answer_stale_and_drops_the_arguments(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    answered = await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint="fp-changed"
    )
    assert not answered.accepted
    assert answered.approval.status == "stale"
    assert answered.approval.decided_at is not None
    assert await sut.raw_arguments(approval.approval_id) == "{}"
    again = await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint="fp1"
    )
    assert (again.accepted, again.approval.status) == (False, "stale")


async def test_an_answer_without_a_fingerprint_check_is_accepted_once(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    first = await sut.store.approvals.answer(
        alice, approval.approval_id, decision="deny", fingerprint=None
    )
    second = await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint=None
    )
    assert (first.accepted, first.approval.status, first.approval.decision) == (
        True,
        "denied",
        "deny",
    )
    assert first.approval.decided_by == alice.principal_id
    assert (second.accepted, second.approval.status) == (False, "denied")


# -- claims -----------------------------------------------------------------------------


async def test_an_approved_call_is_claimed_once_with_its_arguments_which_are_then_dropped(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    session = approval.session_id
    continuation = await sut.seed_turn(session)
    unanswered = await sut.store.approvals.claim(
        approval.approval_id, session_id=session, turn_id=continuation
    )
    assert unanswered is None
    await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint="fp1"
    )
    claims: list[ClaimedApproval | None] = []

    async def claim(turn_id: str) -> None:
        claims.append(
            await sut.store.approvals.claim(
                approval.approval_id, session_id=session, turn_id=turn_id
            )
        )

    turns = [continuation, *[await sut.seed_turn(session) for _ in range(5)]]
    async with anyio.create_task_group() as group:
        for turn_id in turns:
            group.start_soon(claim, turn_id)
    (claimed,) = [c for c in claims if c is not None]
    assert len(claims) == len(turns)
    assert claimed.arguments == {
        "label": "one",
        "api_key": "sk-live-123456",
        "nested": {"n": (1, 2)},
    }
    with pytest.raises(TypeError):
        claimed.arguments["label"] = "two"  # type: ignore[index]
    assert claimed.approval.status == "executed"
    assert claimed.approval.continuation_turn_id in turns
    assert await sut.raw_arguments(approval.approval_id) == "{}"
    # Executed is final: nothing makes it claimable or answerable again.
    assert (
        await sut.store.approvals.claim(approval.approval_id, session_id=session, turn_id=turns[0])
        is None
    )
    late = await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint=None
    )
    assert (late.accepted, late.approval.status) == (False, "executed")


async def _end_turn(sut: StoreUnderTest, turn_id: str) -> None:
    """What recovery does to a turn whose process stalled past its lease."""
    store = sut.store
    assert isinstance(store, RowStore)
    await store.write(
        lambda c: c.execute("UPDATE turns SET status = 'needs_user' WHERE turn_id = ?", [turn_id])
    )


async def test_an_inline_answer_is_taken_only_while_the_asking_turn_runs(
    sut: StoreUnderTest,
) -> None:
    """A turn ended meanwhile (its stalled process recovered elsewhere) would record the
    call executed and never run it: the answer is refused and the approval stays pending
    for the continuation path."""
    alice = await owner(sut, "alice")
    running = await pending(sut, alice)
    taken = await sut.store.approvals.answer_inline(
        running.approval_id, turn_id=running.turn_id, decision="approve_once", decided_by="me"
    )
    assert taken.accepted
    assert taken.approval.status == "executed"
    ended = await pending(sut, alice)
    await _end_turn(sut, ended.turn_id)
    refused = await sut.store.approvals.answer_inline(
        ended.approval_id, turn_id=ended.turn_id, decision="approve_once", decided_by="me"
    )
    assert not refused.accepted
    assert refused.approval.status == "pending"
    assert refused.approval.continuation_turn_id is None


async def test_a_continuation_that_has_ended_claims_nothing(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    session = approval.session_id
    await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint="fp1"
    )
    stalled = await sut.seed_turn(session)
    await _end_turn(sut, stalled)
    claim = sut.store.approvals.claim
    assert await claim(approval.approval_id, session_id=session, turn_id=stalled) is None
    live = await sut.seed_turn(session)
    claimed = await claim(approval.approval_id, session_id=session, turn_id=live)
    assert claimed is not None
    assert claimed.approval.continuation_turn_id == live


async def test_a_denied_call_is_claimed_once_and_stays_denied(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    await sut.store.approvals.answer(alice, approval.approval_id, decision="deny", fingerprint=None)
    turn = await sut.seed_turn(approval.session_id)
    claimed = await sut.store.approvals.claim(
        approval.approval_id, session_id=approval.session_id, turn_id=turn
    )
    assert claimed is not None
    assert (claimed.approval.status, claimed.approval.continuation_turn_id) == ("denied", turn)
    assert (
        await sut.store.approvals.claim(
            approval.approval_id, session_id=approval.session_id, turn_id=turn
        )
        is None
    )


async def test_a_claim_from_another_session_or_a_foreign_turn_finds_nothing(
    sut: StoreUnderTest,
) -> None:
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    approval = await pending(sut, alice)
    await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint=None
    )
    bobs_turn = await sut.seed_turn(bob.session_id or "")
    store = sut.store.approvals
    assert (
        await store.claim(approval.approval_id, session_id=bob.session_id or "", turn_id=bobs_turn)
        is None
    )
    assert (
        await store.claim(approval.approval_id, session_id=approval.session_id, turn_id=bobs_turn)
        is None
    )
    assert (
        await store.claim(approval.approval_id, session_id=approval.session_id, turn_id="turn_none")
        is None
    )
    # None of that used the claim up.
    claimed = await store.claim(
        approval.approval_id,
        session_id=approval.session_id,
        turn_id=await sut.seed_turn(approval.session_id),
    )
    assert claimed is not None
    assert claimed.arguments["label"] == "one"


# -- voiding ----------------------------------------------------------------------------


async def test_a_newer_turn_supersedes_exactly_the_calls_that_have_not_run(
    sut: StoreUnderTest,
) -> None:
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    store = sut.store.approvals
    waiting = await pending(sut, alice)
    answered = await pending(sut, alice)
    ran = await pending(sut, alice)
    elsewhere = await pending(sut, bob)
    for approval in (answered, ran):
        await store.answer(alice, approval.approval_id, decision="approve_once", fingerprint=None)
    session = ran.session_id
    assert await store.claim(
        ran.approval_id, session_id=session, turn_id=await sut.seed_turn(session)
    )
    newer = await sut.seed_turn(session)
    assert await store.supersede(session, turn_id=newer) == 2
    assert await store.supersede(session, turn_id=newer) == 0
    statuses = {a.approval_id: a.status for a in await store.list(sut.operator, status=None)}
    assert statuses == {
        waiting.approval_id: "superseded",
        answered.approval_id: "superseded",
        ran.approval_id: "executed",
        elsewhere.approval_id: "pending",
    }
    for approval in (waiting, answered):
        assert await sut.raw_arguments(approval.approval_id) == "{}"
    assert await sut.raw_arguments(elsewhere.approval_id) != "{}"
    late = await store.answer(alice, waiting.approval_id, decision="approve_once", fingerprint=None)
    assert (late.accepted, late.approval.status) == (False, "superseded")


async def test_a_turn_that_no_longer_runs_supersedes_nothing(sut: StoreUnderTest) -> None:
    """A holder that paused past its lease, its turn ended by the takeover, resumes: its
    supersede is refused, and the approval the turn after it waits on stays pending."""
    alice = await owner(sut, "alice")
    waiting = await pending(sut, alice)
    session = waiting.session_id
    stale = await sut.seed_turn(session)
    await sut.store.write(
        lambda c: c.execute("UPDATE turns SET status = 'lost' WHERE turn_id = ?", [stale])
    )
    with pytest.raises(LeaseLost):
        await sut.store.approvals.supersede(session, turn_id=stale)
    with pytest.raises(InvalidValue):
        await sut.store.approvals.supersede(session, turn_id=new_id("turn"))
    row = await sut.store.approvals.get(sut.operator, waiting.approval_id)
    assert row.status == "pending"
    assert await sut.raw_arguments(waiting.approval_id) != "{}"


@pytest.mark.parametrize("by", ["session", "conversation"])
async def test_admission_says_whether_a_new_turn_has_calls_to_supersede(
    sut: StoreUnderTest, by: str
) -> None:
    """Read in the admission transaction: a turn admitted with none skips its own look.

    By its bound conversation, admission reads the session, its owner, its lease and
    this answer in one statement: the answer is the same either way."""
    alice = await owner(sut, "alice")
    session = alice.session_id or ""
    target: str | ConversationTarget = (
        session if by == "session" else ConversationTarget("webhook", "c-alice")
    )
    holder = LeaseOwner("another-machine", 4242, 1.0, "remote-instance", "other-boot:1")

    async def admitted_open(*, supersede: int | None = None) -> bool:
        admission = TurnAdmission(
            turn_id=new_id("turn"),
            request_id=new_id("req"),
            principal_id=alice.principal_id,
            core_id="assistant",
            core_revision="rev1",
            generation=1,
            session=target,
            trace_id=new_id("trace"),
        )
        admitted = await sut.store.turns.admit(admission, owner=holder, ttl_s=600.0)
        assert isinstance(admitted, Admitted), admitted
        assert admitted.lease.session_id == session
        if supersede is not None:  # what the admitted turn voids, as it runs
            voided = await sut.store.approvals.supersede(session, turn_id=admission.turn_id)
            assert voided == supersede
        await sut.store.turns.abandon(admitted.lease)  # free the session for the next one
        return admitted.open_approvals

    assert await admitted_open() is False
    asked = await pending(sut, alice)
    assert await admitted_open() is True
    await sut.store.approvals.answer(
        alice, asked.approval_id, decision="approve_once", fingerprint=None
    )
    assert await admitted_open() is True  # answered, not yet run: still to supersede
    assert await admitted_open(supersede=1) is True
    assert await admitted_open() is False
    await pending(sut, await owner(sut, "bob"))  # another session's call is not this one's
    assert await admitted_open() is False


async def test_admission_after_recovering_a_dead_holder_reads_its_calls_again(
    sut: StoreUnderTest,
) -> None:
    """A gone holder's turn ended at admission may void the call it was asking (a cancel
    was recorded): the answer reflects that, not what was open before the recovery."""
    alice = await owner(sut, "alice")
    session = alice.session_id or ""
    here = await anyio.to_thread.run_sync(LeaseOwner.current, "approvals-suite")
    dead = LeaseOwner(here.host, here.pid, here.started - 100, "dead-instance")
    live = LeaseOwner("another-machine", 4242, 1.0, "remote-instance", "other-boot:1")

    def admission() -> TurnAdmission:
        return TurnAdmission(
            turn_id=new_id("turn"),
            request_id=new_id("req"),
            principal_id=alice.principal_id,
            core_id="assistant",
            core_revision="rev1",
            generation=1,
            session=ConversationTarget("webhook", "c-alice"),
            trace_id=new_id("trace"),
        )

    first = admission()
    held = await sut.store.turns.admit(first, owner=dead, ttl_s=600.0)
    assert isinstance(held, Admitted)
    # The cancel is recorded before the turn (in another process) asks its approval.
    await sut.store.turns.request_cancel(alice, first.turn_id)
    asked = await pending(sut, alice, turn_id=first.turn_id)
    after = await sut.store.turns.admit(admission(), owner=live, ttl_s=600.0)
    assert isinstance(after, Admitted), after
    assert [turn.turn_id for turn in after.recovered] == [first.turn_id]
    assert (await sut.store.approvals.get(alice, asked.approval_id)).status == "superseded"
    assert after.open_approvals is False
    assert after.lease.session_id == session


async def test_mark_stale_voids_an_open_approval_once(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    assert await sut.store.approvals.mark_stale(approval.approval_id) is True
    assert await sut.store.approvals.mark_stale(approval.approval_id) is False
    assert await sut.store.approvals.mark_stale("apr_missing") is False
    assert (await sut.store.approvals.get(alice, approval.approval_id)).status == "stale"
    assert await sut.raw_arguments(approval.approval_id) == "{}"


async def test_mark_stale_leaves_a_call_another_continuation_claimed_as_it_is(
    sut: StoreUnderTest,
) -> None:
    """A process that read an approval as pending may mark it stale after another one's
    continuation claimed it and ran its call: the record must keep saying it ran. Only the
    claiming turn itself voids what it claimed (it found it stale before running it)."""
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint=None
    )
    continuation = await sut.seed_turn(approval.session_id)
    claimed = await sut.store.approvals.claim(
        approval.approval_id, session_id=approval.session_id, turn_id=continuation
    )
    assert claimed is not None
    assert await sut.store.approvals.mark_stale(approval.approval_id) is False
    other = await sut.seed_turn(approval.session_id)
    assert await sut.store.approvals.mark_stale(approval.approval_id, claimed_by=other) is False
    assert (await sut.store.approvals.get(alice, approval.approval_id)).status == "executed"
    assert (
        await sut.store.approvals.mark_stale(approval.approval_id, claimed_by=continuation) is True
    )
    assert (await sut.store.approvals.get(alice, approval.approval_id)).status == "stale"


async def test_mark_stale_voids_an_answered_call_nobody_claimed(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    await sut.store.approvals.answer(
        alice, approval.approval_id, decision="approve_once", fingerprint=None
    )
    assert await sut.store.approvals.mark_stale(approval.approval_id) is True
    assert (await sut.store.approvals.get(alice, approval.approval_id)).status == "stale"


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"approval_id": ""},
        {"approval_id": "apr_" + "x" * 10_000},
        {"effect": "files.\ud800stamp"},
        {"call_id": 7},
        {"arguments": ["not", "a", "mapping"]},
        {"arguments": {"label": object()}},
        {"view": "not a mapping"},
        {"secret_names": "HK_TOKEN"},
        {"secret_names": ("",)},
        {"secret_names": ("HK_TOKEN", "HK_TOKEN")},
        {"secret_names": tuple(f"S{i}" for i in range(100))},
        {"target_digest": ""},
        {"target_digest": "sha256:" + "f" * 10_000},
        {"target_digest": 7},
    ],
    ids=lambda fields: next(iter(fields)) + ":" + repr(next(iter(fields.values())))[:20],
)
async def test_bad_input_is_refused_typed_and_bounded_and_loses_nothing(
    sut: StoreUnderTest, fields: dict[str, Any]
) -> None:
    alice = await owner(sut, "alice")
    kept = await pending(sut, alice)
    with pytest.raises(InvalidValue) as refused:
        await sut.store.approvals.insert(await new_approval(sut, alice, **fields))
    assert_bounded(refused.value)
    assert [a.approval_id for a in await sut.store.approvals.list(alice, status=None)] == [
        kept.approval_id
    ]
    answered = await sut.store.approvals.answer(
        alice, kept.approval_id, decision="approve_once", fingerprint="fp1"
    )
    assert answered.accepted


async def test_an_approval_must_name_a_turn_of_its_own_session_and_a_fresh_id(
    sut: StoreUnderTest,
) -> None:
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    kept = await pending(sut, alice)
    bobs_turn = await sut.seed_turn(bob.session_id or "")
    for fields in (
        {"turn_id": bobs_turn},
        {"turn_id": "turn_none"},
        {"approval_id": kept.approval_id},
    ):
        with pytest.raises(InvalidValue) as refused:
            await sut.store.approvals.insert(await new_approval(sut, alice, **fields))
        assert_bounded(refused.value)
    assert await sut.store.approvals.list(sut.operator, status=None) == (kept,)


async def test_a_bad_insert_in_a_shared_commit_loses_none_of_the_good_ones(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    good = [await new_approval(sut, alice) for _ in range(6)]
    bad = await new_approval(sut, alice, turn_id="turn_none")
    outcomes: list[str] = []

    async def insert(approval: NewApproval) -> None:
        try:
            await sut.store.approvals.insert(approval)
            outcomes.append("ok")
        except InvalidValue:
            outcomes.append("refused")

    async with anyio.create_task_group() as group:
        for approval in [*good[:3], bad, *good[3:]]:
            group.start_soon(insert, approval)
    assert sorted(outcomes) == ["ok"] * 6 + ["refused"]
    listed = {a.approval_id for a in await sut.store.approvals.list(alice, status=None)}
    assert listed == {a.approval_id for a in good}


@pytest.mark.parametrize(
    ("call", "kwargs"),
    [
        ("answer", {"decision": "approve_forever", "fingerprint": None}),
        ("answer", {"decision": "deny", "fingerprint": ""}),
        ("list", {"status": "everything"}),
        ("list", {"limit": 0}),
        ("list", {"limit": 10_000}),
        ("list", {"limit": True}),
        ("get", {"approval_id": "apr_\ud800"}),
        ("get", {"approval_id": ""}),
    ],
)
async def test_bad_arguments_to_owned_calls_are_typed_errors(
    sut: StoreUnderTest, call: str, kwargs: dict[str, Any]
) -> None:
    alice = await owner(sut, "alice")
    approval = await pending(sut, alice)
    method = getattr(sut.store.approvals, call)
    args: tuple[Any, ...] = (alice,)
    if call == "answer":
        args = (alice, approval.approval_id)
    with pytest.raises(InvalidValue) as refused:
        await method(*args, **kwargs)
    assert_bounded(refused.value)
    assert (await sut.store.approvals.get(alice, approval.approval_id)).status == "pending"


# -- rows as an older hostkit wrote them, and damaged ones (raw SQL on either adapter) ----


async def test_rows_written_before_the_typed_record_keep_their_secret_fact(
    store_adapter: str, tmp_path: Path
) -> None:
    """Approvals recorded by an older hostkit hold the bare view; "binds" there still counts."""
    async with open_adapter(store_adapter, tmp_path) as sut:
        store = sut.store
        assert isinstance(store, RowStore)
        alice = await owner(sut, "alice")
        turn = await sut.seed_turn(alice.session_id or "")
        legacy = {
            "apr_plain": '{"arguments": {"n": 1}, "effect": "files.stamp"}',
            "apr_binds": '{"arguments": {}, "binds": ["secret.bind:HK_TOKEN"], "effect": "x"}',
            "apr_odd": '{"binds": "garbled", "effect": "x"}',
        }
        for approval_id, view in legacy.items():
            await store.write(
                lambda c, approval_id=approval_id, view=view: c.execute(
                    "INSERT INTO approvals (approval_id, session_id, turn_id, principal_id, "
                    "core_id, core_revision, effect, call_id, arguments, view, "
                    "policy_fingerprint, rule_key, status, created_at) VALUES "
                    "(?, ?, ?, ?, 'assistant', 'rev1', 'x', 'c', '{}', ?, 'fp', 'x', "
                    "'pending', 'x')",
                    [approval_id, alice.session_id, turn, alice.principal_id, view],
                )
            )
        read = {a: (await store.approvals.get(alice, a)) for a in legacy}
        assert read["apr_plain"].secret_names == ()
        assert read["apr_plain"].view["arguments"] == {"n": 1}
        assert read["apr_binds"].secret_names == ("HK_TOKEN",)
        assert read["apr_odd"].binds_secret  # unreadable "binds": fail safe


async def test_a_corrupt_view_record_is_a_store_error_not_a_crash(
    store_adapter: str, tmp_path: Path
) -> None:
    async with open_adapter(store_adapter, tmp_path) as sut:
        store = sut.store
        assert isinstance(store, RowStore)
        alice = await owner(sut, "alice")
        approval = await pending(sut, alice)
        await store.write(
            lambda c: c.execute(
                "UPDATE approvals SET view = ? WHERE approval_id = ?",
                ['{"kind": "approval.view.v2", "view": 3}', approval.approval_id],
            )
        )
        with pytest.raises(StoreError) as corrupt:
            await store.approvals.get(alice, approval.approval_id)
        assert_bounded(corrupt.value)


def test_the_interface_is_abstract_and_complete() -> None:
    from hostkit.store import ApprovalStore

    expected = {
        "insert",
        "get",
        "page",
        "answer",
        "answer_inline",
        "peek",
        "open_for_turn",
        "claim",
        "void",
        "mark_stale",
        "supersede",
        "revoke",
        "revocations_after",
    }
    assert ApprovalStore.__abstractmethods__ == expected
    for name in {*expected, "list"}:
        assert getattr(ApprovalStore, name).__doc__
