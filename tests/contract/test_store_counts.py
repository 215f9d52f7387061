"""The counts operators and the notebook's monitor read: exact, and never the history.

``inbox.counts`` and ``delivery.counts`` count the live rows from their partial
indexes and read the finished rows' tallies (SQLite v28, PostgreSQL v15), which
triggers keep in the transaction of every change as delta rows, folded into the
tallies every ``TALLY_FOLD`` deltas. Random histories, and concurrent claimers,
check them against the full recount the statements before the tallies made, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import anyio
import pytest

from hostkit.store import RowStore, RuntimeStore, _pg
from hostkit.store._schema import TALLY_FOLD, TALLY_UNANSWERED
from hostkit.types import UNANSWERED_OUTCOMES, InboundEnvelope, InboundFailure, InboundResult
from tests.contract._delivery_adapters import ROUTE
from tests.contract._tally_history import (
    NOW,
    RandomHistory,
    counted,
    insert_finished,
    recount,
)

pytestmark = pytest.mark.anyio

_STATES = ("ready", "claimed", "completed", "dead_lettered", "unanswered")
_STATUSES = ("pending", "sending", "delivered", "dead_lettered")


async def scalar(store: RowStore, sql: str) -> Any:
    return await store.read(lambda c: c.execute(sql).fetchone()[0])


@pytest.mark.sqlite_only("constants of the SQLite migration; no store is opened")
def test_the_tallies_count_todays_unanswered_outcomes() -> None:
    """The triggers spell the outcomes out (a migration is never edited): a new one
    needs a migration of its own."""
    assert tuple(UNANSWERED_OUTCOMES) == TALLY_UNANSWERED


@pytest.mark.parametrize("seed", [1, 2])
async def test_counts_equal_a_full_recount_after_any_history(
    store: RuntimeStore, seed: int
) -> None:
    assert isinstance(store, RowStore)
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    history = RandomHistory(store, session_id, random.Random(seed))
    await history.insert_finished(TALLY_FOLD)
    assert await counted(store) == await recount(store)
    await history.claim()  # PostgreSQL's claims fold (SQLite's trigger did already)
    await history.claim_intents()
    # A fold of each table's deltas (only a fold writes a new database's tallies).
    for table in ("inbox", "outbox"):
        assert await scalar(store, f"SELECT COUNT(*) FROM {table}_tallies") > 0
    seen: set[str] = set()
    for n in range(150):
        step = await history.step()
        inbox, outbox = await counted(store)
        assert (inbox, outbox) == await recount(store), (n, step)
        seen.update(f"inbox {s}" for c in inbox for s in _STATES if getattr(c, s))
        seen.update(f"outbox {s}" for s in _STATUSES if getattr(outbox, s))
    assert seen == {f"inbox {s}" for s in _STATES} | {f"outbox {s}" for s in _STATUSES}
    # After a claim, fewer than a fold's worth of deltas wait: what a count reads besides
    # the tallies.
    await history.claim()
    await history.claim_intents()
    for table in ("inbox", "outbox"):
        assert await scalar(store, f"SELECT COUNT(*) FROM {table}_tally_deltas") < TALLY_FOLD


async def test_retention_alone_folds_the_deltas_of_what_it_removed(store: RuntimeStore) -> None:
    """A database that only retention changes (no claim folds on PostgreSQL: a Host that
    serves no channel, an operator's prune) still folds: what a count reads besides the
    tallies stays under a fold's worth, and the counts stay exact."""
    assert isinstance(store, RowStore)
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    await insert_finished(store, TALLY_FOLD, session_id=session_id)
    for table in (store.inbox, store.delivery):
        report = await table.prune(
            payload_before=NOW + 1, tombstone_before=NOW + 1, limit=2 * TALLY_FOLD
        )
        assert report.tombstones_removed == TALLY_FOLD
    assert await counted(store) == await recount(store)
    for table in ("inbox", "outbox"):
        assert await scalar(store, f"SELECT COUNT(*) FROM {table}_tally_deltas") < TALLY_FOLD


async def test_a_fold_that_fails_after_retention_leaves_its_report_standing(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold after a pass is best effort: the rows are deleted by then, so a fold that
    fails (the next claim or pass folds) does not turn a pass that worked into an error,
    and the counts stay exact."""
    assert isinstance(store, RowStore)

    def failing(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(_pg, "fold_alone", failing)  # SQLite does not fold apart
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    await insert_finished(store, 10, session_id=session_id)
    for table in (store.inbox, store.delivery):
        report = await table.prune(payload_before=NOW + 1, tombstone_before=NOW + 1, limit=100)
        assert report.tombstones_removed == 10
    assert await counted(store) == await recount(store)


@pytest.mark.sqlite_only("SQLite's trigger folds as it counts; PostgreSQL folds apart")
async def test_a_retention_pass_on_sqlite_is_one_write_transaction(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is left to fold after the deletion, so no second transaction is opened
    for it: one would wait for another process's write lock, for nothing."""
    assert isinstance(store, RowStore)
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    await insert_finished(store, 10, session_id=session_id)
    write, writes = store.write, []

    async def counted_write(fn: Any) -> Any:
        writes.append(fn)
        return await write(fn)

    monkeypatch.setattr(store, "write", counted_write)
    for table in (store.inbox, store.delivery):
        writes.clear()
        report = await table.prune(payload_before=NOW + 1, tombstone_before=NOW + 1, limit=100)
        assert report.tombstones_removed == 10
        assert len(writes) == 1
    assert await counted(store) == await recount(store)


async def test_concurrent_claimers_leave_the_counts_exact(store: RuntimeStore) -> None:
    """Workers completing, dead-lettering and delivering at once (on PostgreSQL, each in
    its own transaction on the pool) lose no delta and count none twice, across a fold."""
    assert isinstance(store, RowStore)
    # Most of a fold's worth of deltas first, so that the workers' own changes cross one.
    bulk, total = TALLY_FOLD - 100, 240
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    await insert_finished(store, bulk, session_id=session_id)
    envelopes = [
        InboundEnvelope(
            channel_instance_id=f"chan.{n % 3}",
            platform_event_key=f"key-{n}",
            conversation_key=f"chat-{n}",
            principal_key="user-1",
            authenticated_by="hmac",
            received_at=NOW,
            payload="hello",
        )
        for n in range(total)
    ]
    await store.inbox.accept(envelopes, None, now=NOW)
    for n in range(total):
        await store.delivery.reply(
            inbound_id=f"inb-{n}", session_id=f"session-{n % 40}", route=ROUTE, text="hi"
        )

    async def inbound_worker(owner: str) -> None:
        while claimed := await store.inbox.claim(
            owner=owner, now=NOW, lease_s=600.0, limit=5, max_attempts=3
        ):
            for n, item in enumerate(claimed):
                if n % 4:
                    result = InboundResult("ignored")
                    await store.inbox.complete(item.inbound_id, item.claim_token, result, now=NOW)
                else:
                    failure = InboundFailure("permanent", "bad", "no")
                    await store.inbox.fail(
                        item.inbound_id, item.claim_token, failure, retry_at=None, now=NOW
                    )

    async def delivery_worker(owner: str) -> None:
        while claimed := await store.delivery.claim(
            owner=owner, limit=5, lease_s=600.0, max_attempts=3, now=NOW
        ):
            for held in claimed:
                await store.delivery.delivered(held, now=NOW)

    async with anyio.create_task_group() as workers:
        for n in range(4):
            workers.start_soon(inbound_worker, f"inbox-{n}")
            workers.start_soon(delivery_worker, f"delivery-{n}")
    inbox, outbox = await counted(store)
    assert (inbox, outbox) == await recount(store)
    assert sum(c.completed + c.dead_lettered for c in inbox) == bulk + total
    assert (outbox.delivered, outbox.pending, outbox.sending) == (bulk + total, 0, 0)
    for table in ("inbox", "outbox"):
        assert await scalar(store, f"SELECT COUNT(*) FROM {table}_tallies") > 0
