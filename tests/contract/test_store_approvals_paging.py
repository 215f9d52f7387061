"""``approvals.page(before=...)``: a backlog of approvals read page by page, on every adapter.

A page is the approvals recorded before the last one the previous page showed
(the row id, unique and in recording order), so the pages list each approval
once, newest first, and approvals recorded while an operator reads them never
shift a later page. A ``before`` no row id can be is refused, typed and bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostkit.errors import InvalidValue
from hostkit.store import ApprovalFilter, RowStore
from hostkit.types import PrincipalScope
from tests.contract._store_adapters import StoreUnderTest, open_adapter
from tests.contract.test_store_approvals import assert_bounded, owner, pending

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


async def _walk(
    sut: StoreUnderTest,
    scope: PrincipalScope,
    status: ApprovalFilter | None,
    size: int,
    *,
    between: list[str] | None = None,
) -> list[str]:
    """Every page's approval ids through ``next_before``; a new approval is recorded
    between pages when ``between`` collects them."""
    shown: list[str] = []
    before: int | None = None
    while True:
        page = await sut.store.approvals.page(scope, status=status, limit=size, before=before)
        assert len(page.approvals) <= size
        assert page.truncated is (page.next_before is not None)
        shown.extend(a.approval_id for a in page.approvals)
        if page.next_before is None:
            return shown
        before = page.next_before
        if between is not None:
            between.append((await pending(sut, scope)).approval_id)


async def test_pages_list_every_approval_once_newest_first(sut: StoreUnderTest) -> None:
    """Open ones among closed ones, and another owner's in between: at every page size the
    pages are the whole list, in its order, with nothing twice."""
    alice, bob = await owner(sut, "alice"), await owner(sut, "bob")
    ids = []
    for n in range(13):
        mine = await pending(sut, alice if n % 4 else bob)
        if n % 3 == 0:
            await sut.store.approvals.answer(
                sut.operator, mine.approval_id, decision="deny", fingerprint=None
            )
            turn = await sut.seed_turn(mine.session_id)
            assert await sut.store.approvals.claim(
                mine.approval_id, session_id=mine.session_id, turn_id=turn
            )
        ids.append(mine.approval_id)
    for scope in (alice, sut.operator):
        for status in (None, "open", "denied"):
            whole = [
                a.approval_id
                for a in await sut.store.approvals.list(scope, status=status, limit=200)
            ]
            assert whole, (scope.authority, status)
            for size in (1, 2, 5, len(whole), len(whole) + 1):
                assert await _walk(sut, scope, status, size) == whole, (status, size)
    assert len(await _walk(sut, sut.operator, None, 1)) == len(ids)


async def test_approvals_recorded_between_pages_never_shift_a_later_page(
    sut: StoreUnderTest,
) -> None:
    alice = await owner(sut, "alice")
    ids = [(await pending(sut, alice)).approval_id for _ in range(9)]
    recorded: list[str] = []
    assert await _walk(sut, alice, "pending", 2, between=recorded) == ids[::-1]
    assert len(recorded) == 4
    # They are the newest: the first page of a new listing.
    first = await sut.store.approvals.page(alice, status="pending", limit=4)
    assert [a.approval_id for a in first.approvals] == recorded[::-1]


async def test_the_last_page_says_there_is_no_next(sut: StoreUnderTest) -> None:
    alice = await owner(sut, "alice")
    ids = [(await pending(sut, alice)).approval_id for _ in range(4)]
    cut = await sut.store.approvals.page(alice, limit=3)
    assert (cut.truncated, cut.next_before is not None) == (True, True)
    rest = await sut.store.approvals.page(alice, limit=3, before=cut.next_before)
    assert ([a.approval_id for a in rest.approvals], rest.truncated, rest.next_before) == (
        [ids[0]],
        False,
        None,
    )
    whole = await sut.store.approvals.page(alice, limit=4)
    assert (whole.truncated, whole.next_before) == (False, None)
    assert (await sut.store.approvals.page(alice, before=0)).approvals == ()


@pytest.mark.parametrize("before", [-1, 2**63, True, "12", 1.5])
async def test_a_before_no_row_id_can_be_is_refused_typed_and_bounded(
    sut: StoreUnderTest, before: object
) -> None:
    alice = await owner(sut, "alice")
    await pending(sut, alice)
    with pytest.raises(InvalidValue) as refused:
        await sut.store.approvals.page(alice, status=None, before=before)  # type: ignore[arg-type]
    assert_bounded(refused.value)
    assert str(refused.value) == "before must be an integer from 0 to 9223372036854775807"


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite's planner")
async def test_a_page_walks_the_approvals_down_from_before_without_sorting(
    sut: StoreUnderTest,
) -> None:
    """An operator's listing (``hostkit approvals list``) walks the primary key newest first
    from ``before`` down and stops at the limit: nothing sorts the approvals table. A
    conversation's scope reads its own session's approvals through their index."""
    assert isinstance(sut.store, RowStore)
    alice = await owner(sut, "alice")
    for _ in range(6):
        await pending(sut, alice)
    seen: list[str] = []
    plans: dict[tuple[str, str | None, int | None], list[str]] = {}
    for scope in (alice, sut.operator):
        for status in (None, "open", "pending"):
            for before in (None, 4):
                await sut.store.read(lambda conn: conn.set_trace_callback(seen.append))
                try:
                    await sut.store.approvals.page(scope, status=status, limit=2, before=before)
                finally:
                    await sut.store.read(lambda conn: conn.set_trace_callback(None))
                (sql,) = [s for s in seen if "FROM approvals a" in s]
                seen.clear()
                plans[scope.authority, status, before] = await sut.store.read(
                    lambda conn, sql=sql: [
                        str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")
                    ]
                )
    walks = {
        (None, None): "SCAN a",
        (None, 4): "SEARCH a USING INTEGER PRIMARY KEY (rowid<?)",
        ("pending", None): "SEARCH a USING INDEX approvals_open (status=?)",
        ("pending", 4): "SEARCH a USING INDEX approvals_open (status=? AND id<?)",
    }
    for (authority, status, before), lines in plans.items():
        if authority == "operator":
            # "open" is a predicate on the rows the primary key walk reads, as None is.
            assert lines[0] == walks["pending" if status == "pending" else None, before], lines
            assert not any("TEMP B-TREE" in line for line in lines), (status, before, lines)
        else:
            assert lines[0] == "SEARCH o USING PRIMARY KEY (session_id=?)", lines
            assert lines[1].startswith("SEARCH a USING INDEX approvals_session (session_id=?"), (
                lines
            )
