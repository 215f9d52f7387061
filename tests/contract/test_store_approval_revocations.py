"""Approval revocations, written against ``RuntimeStore`` and run on every adapter.

Every end of "approve for session" answers that must reach other Host
processes is a row: an owner's or operator's ``revoke``, a conversation moved
to another session, a core's live revision moved. Readers page through them
by cursor, in commit order, and a reader too far behind is told so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.store import ApprovalRevocation
from hostkit.store._approval_revocations import MAX_REVOCATIONS_READ
from hostkit.types import CoreEvent, GateOutcome, PrincipalScope
from tests.contract._store_adapters import StoreUnderTest, open_adapter
from tests.support import facts

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


async def owner(sut: StoreUnderTest, name: str) -> PrincipalScope:
    return await sut.authority.for_conversation(facts(f"c-{name}", name))


async def unseen(sut: StoreUnderTest, cursor: int) -> tuple[ApprovalRevocation, ...]:
    return (await sut.store.approvals.revocations_after(cursor)).revocations


async def test_a_new_reader_starts_after_the_newest_revocation(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    assert await sut.store.approvals.revocations_after(None) == (
        await sut.store.approvals.revocations_after(0)
    )
    first = await sut.store.approvals.revoke(alice, alice.session_id or "", reason="done")
    start = await sut.store.approvals.revocations_after(None)
    assert (start.cursor, start.revocations, start.overflow) == (first.id, (), False)
    second = await sut.store.approvals.revoke(alice, alice.session_id or "", reason="again")
    assert await unseen(sut, start.cursor) == (second,)
    assert await unseen(sut, second.id) == ()


async def test_an_owner_revokes_only_their_own_answers_and_an_operator_everyones(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    session_id = alice.session_id or ""
    mine = await sut.store.approvals.revoke(alice, session_id, reason="mine")
    assert (mine.session_id, mine.principal_id, mine.core_id) == (
        session_id,
        alice.principal_id,
        None,
    )
    everyone = await sut.store.approvals.revoke(sut.operator, session_id, reason="all")
    assert (everyone.session_id, everyone.principal_id) == (session_id, None)
    assert await unseen(sut, 0) == (mine, everyone)
    audit = await sut.store.read_audit(sut.operator, kind="approval.revoked")
    assert sorted((row.session_id, row.reason) for row in audit) == [
        (session_id, "all"),
        (session_id, "mine"),
    ]


async def test_a_session_that_is_not_yours_cannot_be_revoked_and_nothing_is_recorded(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    bob = await owner(sut, "bob")
    for session_id in (alice.session_id or "", "ses_missing"):
        with pytest.raises(NotFoundOrUnauthorized) as caught:
            await sut.store.approvals.revoke(bob, session_id, reason="not mine")
        assert str(caught.value) == str(NotFoundOrUnauthorized("session"))
    assert await unseen(sut, 0) == ()
    denied = await sut.store.read_audit(sut.operator, kind="principal_scope.owner_lookup_denied")
    assert {row.subject for row in denied} >= {
        f"session:{alice.session_id}",
        "session:ses_missing",
    }


async def test_a_foreign_scope_or_bad_input_is_refused_with_a_bounded_error(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    alice = await owner(sut, "alice")
    session_id = alice.session_id or ""
    (tmp_path / "other").mkdir()
    async with open_adapter(sut.name, tmp_path / "other") as other:
        foreign = await owner(other, "alice")
        with pytest.raises(ScopeError):
            await sut.store.approvals.revoke(foreign, session_id, reason="x")
    for bad in ("", "x" * 10_000, "ses\ud800", 5):
        with pytest.raises(InvalidValue) as caught:
            await sut.store.approvals.revoke(alice, bad, reason="x")  # type: ignore[arg-type]
        assert len(str(caught.value)) <= 500
    # Past 64 bits: SQLite raised a raw OverflowError where PostgreSQL answered.
    for cursor in (-1, True, "1", 1.5, 2**63, 2**64):
        with pytest.raises(InvalidValue) as caught:
            await sut.store.approvals.revocations_after(cursor)  # type: ignore[arg-type]
        assert "cursor" in str(caught.value)
    assert await unseen(sut, 0) == ()
    assert await unseen(sut, 2**63 - 1) == ()
    long = await sut.store.approvals.revoke(alice, session_id, reason="why " * 1_000)
    assert len(long.reason) <= 300
    assert await unseen(sut, 0) == (long,)


async def test_moving_a_conversation_to_another_session_revokes_the_previous_one(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    fresh = await sut.authority.for_conversation(facts("c-alice", "alice"), session="fresh")
    assert fresh.session_id != alice.session_id
    (moved,) = await unseen(sut, 0)
    assert (moved.session_id, moved.principal_id, moved.core_id) == (alice.session_id, None, None)
    # Resolving the same binding again moves nothing and records nothing.
    await sut.authority.for_conversation(facts("c-alice", "alice"))
    back = await sut.authority.for_conversation(
        facts("c-alice", "alice"), session=alice.session_id or ""
    )
    assert back.session_id == alice.session_id
    assert [r.session_id for r in await unseen(sut, 0)] == [alice.session_id, fresh.session_id]


async def test_moving_a_cores_live_revision_revokes_its_answers(sut: StoreUnderTest) -> None:
    def move(revision: str, previous: str | None) -> CoreEvent:
        return CoreEvent(
            core_id="notes",
            action="promote" if previous is None else "rollback",
            revision=revision,
            previous=previous,
            gates=(GateOutcome("tests", True),),
            actor="ops",
            at=1.0,
        )

    await sut.store.cores.move_live(move("a" * 40, None))
    await sut.store.cores.move_live(move("b" * 40, "a" * 40))
    ends = await unseen(sut, 0)
    assert [(r.session_id, r.principal_id, r.core_id, r.actor) for r in ends] == [
        (None, None, "notes", "ops"),
        (None, None, "notes", "ops"),
    ]


async def test_a_reader_more_than_a_page_behind_is_told_to_forget_everything(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    session_id = alice.session_id or ""
    last = None
    for _ in range(MAX_REVOCATIONS_READ):
        last = await sut.store.approvals.revoke(alice, session_id, reason="r")
    assert last is not None
    page = await sut.store.approvals.revocations_after(0)
    assert (len(page.revocations), page.overflow, page.cursor) == (
        MAX_REVOCATIONS_READ,
        False,
        last.id,
    )
    newest = await sut.store.approvals.revoke(alice, session_id, reason="one more")
    behind = await sut.store.approvals.revocations_after(0)
    assert (behind.revocations, behind.overflow, behind.cursor) == ((), True, newest.id)
    assert await unseen(sut, last.id) == (newest,)


async def test_concurrent_revocations_are_read_in_commit_order_and_none_is_skipped(
    sut: StoreUnderTest,
) -> None:
    # A reader that polls while several writers commit must see every row once: an id it
    # passed is never committed later (a sequence's next value would allow that on
    # PostgreSQL, where ids are handed out before commit).
    scopes = [await owner(sut, f"user{i}") for i in range(4)]
    written: list[int] = []
    seen: list[int] = []
    cursor = 0
    done = anyio.Event()

    async def writer(scope: PrincipalScope) -> None:
        for _ in range(15):
            revocation = await sut.store.approvals.revoke(
                scope, scope.session_id or "", reason="race"
            )
            written.append(revocation.id)

    async def reader() -> None:
        nonlocal cursor
        while True:
            finished = done.is_set()
            page = await sut.store.approvals.revocations_after(cursor)
            seen.extend(r.id for r in page.revocations)
            cursor = page.cursor
            if finished:
                return
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as readers:
            readers.start_soon(reader)
            async with anyio.create_task_group() as writers:
                for scope in scopes:
                    writers.start_soon(writer, scope)
            done.set()
    assert sorted(written) == seen
    assert seen == list(range(seen[0], seen[0] + len(seen)))
