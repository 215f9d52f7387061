"""The SQL inbox adapters' own facts: indexes, migration 12, tombstones, bounds, audit.

The behaviour every adapter shares is the ChannelInbox contract suite
(``test_clause_inbox_*``); this module checks what only a SQL adapter can get
wrong: a pruned payload that forgets its dedup key, bad input that writes
anyway, two opens claiming one row. It runs on SQLite and PostgreSQL (the
store matrix, tests/conftest.py); the query plans and migration 12 are the
SQLite file's own (sqlite_only).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, StoreError
from hostkit.store import MIGRATIONS, SCHEMA_VERSION, RowStore, RuntimeStore, SqliteStore
from hostkit.store import _inbox_rows as inbox_rows
from hostkit.store._inbox_rows import DUE_CHANNELS, DUE_ROWS, ENDED_CONVERSATION, NEXT_IN_TURN
from hostkit.types import (
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    McpServerStatus,
    PrincipalScope,
    SourceCheckpoint,
)

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


def envelope(key: str, channel: str = "webhook.main", **extra: Any) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=key,
        conversation_key=extra.pop("conversation_key", f"chat-{key}"),
        principal_key="user-1",
        authenticated_by="hmac",
        received_at=NOW,
        payload=f"hello {key}",
        **extra,
    )


@pytest.fixture
def sql_store(store: RuntimeStore) -> RowStore:
    """The store as a SQL adapter: raw ``read``/``write`` for the columns no method shows."""
    assert isinstance(store, RowStore)
    return store


async def scalar(store: RowStore, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = await store.read(lambda c: c.execute(sql, params).fetchone())
    return None if row is None else row[0]


async def plan(store: RowStore, sql: str, params: tuple[Any, ...]) -> list[str]:
    rows = await store.read(lambda c: c.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())
    return [str(row[3]) for row in rows]


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite's planner and its partial indexes")
async def test_the_claim_and_dedup_queries_search_their_indexes(sql_store: RowStore) -> None:
    # Enough rows, in several states and channels, that a scan would be the planner's
    # choice if the partial index did not fit the query.
    inbox = sql_store.inbox
    for channel in ("a.one", "b.two", "c.three"):
        await inbox.accept([envelope(f"{channel}-{n}", channel) for n in range(40)], None, now=NOW)
    claimed = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=30, max_attempts=5)
    for item in claimed[:20]:
        await inbox.complete(item.inbound_id, item.claim_token, InboundResult("ignored"), now=NOW)
    await sql_store.write(lambda c: c.execute("ANALYZE"))

    channels = await plan(sql_store, DUE_CHANNELS, (NOW,))
    rows = await plan(sql_store, DUE_ROWS, ("a.one", NOW, 5))
    dedup = await plan(
        sql_store,
        "SELECT inbound_id FROM inbox WHERE channel_instance_id = ? AND platform_event_key = ?",
        ("a.one", "a.one-1"),
    )
    assert any("inbox_due" in line for line in channels), channels
    assert [line for line in rows if "inbox_due" in line], rows
    for line in channels + rows:
        assert not line.startswith(("SCAN inbox", "SCAN i ")), (line, channels, rows)
    assert not any("TEMP B-TREE" in line for line in rows), rows  # the index gives the order
    assert len(dedup) == 1, dedup
    assert dedup[0].startswith("SEARCH inbox USING"), dedup
    assert "(channel_instance_id=? AND platform_event_key=?)" in dedup[0]


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite's planner and its partial indexes")
async def test_the_end_of_a_claim_finds_its_conversations_next_message_by_index(
    sql_store: RowStore,
) -> None:
    """Every complete or dead letter also moves its conversation's next message to the back
    of the due order: one probe of the conversation index, never a scan or a sort."""
    inbox = sql_store.inbox
    for chat in ("one", "two"):
        batch = [envelope(f"{chat}-{n}", conversation_key=chat) for n in range(40)]
        await inbox.accept(batch, None, now=NOW)
    await sql_store.write(lambda c: c.execute("ANALYZE"))

    ended = await plan(sql_store, ENDED_CONVERSATION, ("inb_x",))
    assert any("(inbound_id=?)" in line for line in ended), ended
    steps = await plan(sql_store, NEXT_IN_TURN, (NOW, "slack", "one", NOW))
    assert any("inbox_conversation_due" in line for line in steps), steps
    for line in (*ended, *steps):
        assert not line.startswith("SCAN"), (ended, steps)
        assert "TEMP B-TREE" not in line, (ended, steps)


@pytest.mark.sqlite_only("a v11 SQLite file built from a prefix of the SQLite migrations")
async def test_migration_12_upgrades_a_v11_database_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v11.db"
    status = McpServerStatus(agent="assistant", server="files", state="connected", updated_at=5.0)
    async with await RuntimeStore.open(path, migrations=MIGRATIONS[:11]) as old:
        assert old.migration.to_version == 11
        session_id, _ = await old.bind_conversation(
            channel="webhook", conversation_key="c1", principal_id="alice"
        )
        await old.mcp_servers.record_mcp_status(status)
        assert isinstance(old, SqliteStore)
        assert await scalar(old, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'inbox'") == 0

    async with await RuntimeStore.open(path, migrations=MIGRATIONS[:12]) as new:
        assert isinstance(new, SqliteStore)
        assert (new.migration.from_version, new.migration.to_version) == (11, 12)
        assert SCHEMA_VERSION >= 12
        assert await new.mcp_servers.mcp_statuses() == (status,)
        assert await new.owner_facts(session_id) is not None
        tables = await new.read(
            lambda c: {
                row[0]
                for row in c.execute("SELECT name FROM sqlite_master WHERE name LIKE 'inbox%'")
            }
        )
        assert {
            "inbox",
            "inbox_channels",
            "inbox_checkpoints",
            "inbox_due",
            "inbox_prune",
            "inbox_payloads",
            "inbox_dead",
            "inbox_channels_served",
        } <= tables
        (receipt,) = await new.inbox.accept([envelope("e1")], SourceCheckpoint("s", "7"), now=NOW)
        assert receipt.disposition == "accepted"
        assert await new.inbox.checkpoint("s") == "7"


async def test_a_pruned_payload_leaves_the_dedup_tombstone(sql_store: RowStore) -> None:
    inbox = sql_store.inbox
    first = envelope("evt-1", artifacts=("att-1",), metadata={"thread": "t1"})
    (receipt,) = await inbox.accept([first], None, now=NOW)
    (claimed,) = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=1, max_attempts=3)
    await inbox.complete(receipt.inbound_id, claimed.claim_token, InboundResult("ignored"), now=NOW)

    report = await inbox.prune(payload_before=NOW + 1, tombstone_before=NOW - 1, limit=10)
    assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
    raw = await sql_store.read(
        lambda c: c.execute(
            "SELECT payload, payload_ref, artifacts, metadata, platform_event_key FROM inbox"
        ).fetchall()
    )
    assert raw == [(None, None, None, None, "evt-1")]
    record = await inbox.record(receipt.inbound_id)
    assert record is not None
    assert record.payload_pruned
    assert record.state == "completed"
    # The same platform event redelivered inside the horizon is still a duplicate.
    (again,) = await inbox.accept([envelope("evt-1")], None, now=NOW + 2)
    assert (again.inbound_id, again.disposition) == (receipt.inbound_id, "duplicate")
    assert await scalar(sql_store, "SELECT COUNT(*) FROM inbox") == 1
    # A second pass finds nothing more to clear; past the horizon the tombstone goes.
    report = await inbox.prune(payload_before=NOW + 1, tombstone_before=NOW - 1, limit=10)
    assert (report.payloads_cleared, report.tombstones_removed) == (0, 0)
    report = await inbox.prune(payload_before=NOW + 1, tombstone_before=NOW + 1, limit=10)
    assert (report.payloads_cleared, report.tombstones_removed) == (0, 1)
    (later,) = await inbox.accept([envelope("evt-1")], None, now=NOW + 3)
    assert later.disposition == "accepted"
    assert later.inbound_id != receipt.inbound_id


async def test_prune_never_touches_live_or_dead_rows(sql_store: RowStore) -> None:
    inbox = sql_store.inbox
    await inbox.accept([envelope(f"e{n}") for n in range(3)], None, now=NOW)
    first, _ = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=2, max_attempts=3)
    await inbox.fail(
        first.inbound_id,
        first.claim_token,
        InboundFailure("permanent", "unparseable"),
        retry_at=None,
        now=NOW,
    )
    report = await inbox.prune(payload_before=NOW + 10**6, tombstone_before=NOW + 10**6, limit=10)
    assert (report.payloads_cleared, report.tombstones_removed) == (0, 0)
    nulls = await scalar(sql_store, "SELECT COUNT(*) FROM inbox WHERE payload IS NULL")
    assert nulls == 0
    assert {r.state for r in await inbox.records()} == {"ready", "claimed", "dead_lettered"}


async def test_the_state_check_refuses_an_unknown_state(sql_store: RowStore) -> None:
    (receipt,) = await sql_store.inbox.accept([envelope("e1")], None, now=NOW)
    # The engines word it differently: "CHECK constraint failed", "violates check constraint".
    with pytest.raises(StoreError, match=r"(?i)check constraint"):
        await sql_store.write(
            lambda c: c.execute(
                "UPDATE inbox SET state = 'lost' WHERE inbound_id = ?", [receipt.inbound_id]
            )
        )
    with pytest.raises(StoreError, match=r"(?i)unique"):
        await sql_store.write(
            lambda c: c.execute(
                "INSERT INTO inbox (inbound_id, channel_instance_id, platform_event_key, kind, "
                "conversation_key, principal_key, authenticated_by, received_at, state, due_at, "
                "accepted_at, updated_at) SELECT 'inb_x', channel_instance_id, "
                "platform_event_key, kind, conversation_key, principal_key, authenticated_by, "
                "received_at, 'ready', 0, 0, 0 FROM inbox"
            )
        )


async def test_requeue_audits_actor_and_reason_in_its_transaction(
    sql_store: RowStore, operator: PrincipalScope
) -> None:
    inbox = sql_store.inbox
    (receipt,) = await inbox.accept([envelope("e1")], None, now=NOW)
    with pytest.raises(InvalidValue, match="dead-lettered"):
        await inbox.requeue(receipt.inbound_id, reason="try again", actor="ops", now=NOW)
    with pytest.raises(NotFoundOrUnauthorized):
        await inbox.requeue("inb_missing", reason="try again", actor="ops", now=NOW)
    assert await sql_store.read_audit(operator, kind="inbox.requeue") == ()

    (claimed,) = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=1, max_attempts=3)
    await inbox.fail(
        receipt.inbound_id,
        claimed.claim_token,
        InboundFailure("permanent", "bad_payload"),
        retry_at=None,
        now=NOW,
    )
    record = await inbox.requeue(
        receipt.inbound_id, reason="  parser fixed  ", actor="ops", now=NOW + 5
    )
    assert (record.state, record.attempt, record.requeues, record.due_at) == (
        "ready",
        0,
        1,
        NOW + 5,
    )
    (audit,) = await sql_store.read_audit(operator, kind="inbox.requeue")
    assert (audit.principal_id, audit.reason, audit.subject) == (
        "ops",
        "parser fixed",
        f"inbound:{receipt.inbound_id}",
    )
    assert dict(audit.detail) == {"inbound_id": receipt.inbound_id, "actor": "ops"}


BAD_CALLS = [
    ("claim", {"owner": "w", "now": math.nan, "lease_s": 1.0, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": math.inf, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": 0.0, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": 1.0, "limit": 0, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": 1.0, "limit": 65, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": 1.0, "limit": True, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": NOW, "lease_s": 1.0, "limit": 1, "max_attempts": 0}),
    ("claim", {"owner": "", "now": NOW, "lease_s": 1.0, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": "w" * 257, "now": NOW, "lease_s": 1.0, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": 7, "now": NOW, "lease_s": 1.0, "limit": 1, "max_attempts": 3}),
    ("claim", {"owner": "w", "now": "soon", "lease_s": 1.0, "limit": 1, "max_attempts": 3}),
    ("prune", {"payload_before": math.nan, "tombstone_before": 0.0, "limit": 1}),
    ("prune", {"payload_before": 0.0, "tombstone_before": 0.0, "limit": 0}),
    ("records", {"limit": 501}),
    ("records", {"state": "lost"}),
    ("records", {"channel_instance_id": ""}),
    ("checkpoint", {"source_id": "s" * 257}),
    ("record", {"inbound_id": None}),
]


@pytest.mark.parametrize(("method", "kwargs"), BAD_CALLS)
async def test_bad_arguments_raise_invalid_value_and_write_nothing(
    sql_store: RowStore, method: str, kwargs: dict[str, Any]
) -> None:
    (receipt,) = await sql_store.inbox.accept([envelope("e1")], None, now=NOW)
    before = await sql_store.read(lambda c: c.execute("SELECT * FROM inbox").fetchall())
    call = getattr(sql_store.inbox, method)(**kwargs)
    with pytest.raises(InvalidValue):
        await call
    assert await sql_store.read(lambda c: c.execute("SELECT * FROM inbox").fetchall()) == before
    assert (await sql_store.inbox.record(receipt.inbound_id)) is not None


async def test_bad_fenced_calls_change_nothing(sql_store: RowStore) -> None:
    inbox = sql_store.inbox
    await inbox.accept([envelope("e1")], None, now=NOW)
    (claimed,) = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=1, max_attempts=3)
    before = await sql_store.read(lambda c: c.execute("SELECT * FROM inbox").fetchall())
    inbound, token = claimed.inbound_id, claimed.claim_token
    calls = [
        inbox.complete(inbound, token, "done", now=NOW),  # type: ignore[arg-type]
        inbox.complete(inbound, token, InboundResult("ignored"), now=math.inf),
        inbox.complete("x" * 300, token, InboundResult("ignored"), now=NOW),
        inbox.fail(inbound, token, InboundFailure("transient", "x"), retry_at=math.nan, now=NOW),
        inbox.fail(inbound, 42, InboundFailure("transient", "x"), retry_at=None, now=NOW),  # type: ignore[arg-type]
        inbox.extend(inbound, token, now=NOW, lease_s=-1.0),
        inbox.reserve_turn(inbound, "", now=NOW),
        inbox.release(inbound, token, now=-1.0),
        inbox.requeue(inbound, reason="", actor="ops", now=NOW),
        inbox.requeue(inbound, reason="r" * 501, actor="ops", now=NOW),
    ]
    for call in calls:
        with pytest.raises(InvalidValue):
            await call
    assert await sql_store.read(lambda c: c.execute("SELECT * FROM inbox").fetchall()) == before


async def test_a_bad_envelope_in_a_batch_writes_none_of_it(sql_store: RowStore) -> None:
    inbox = sql_store.inbox
    good = envelope("e1")
    for batch, checkpoint in (
        ([good, "e2"], SourceCheckpoint("src", "9")),
        ([], SourceCheckpoint("src", "9")),
        ([good] * 501, None),
        ([good], "9"),
        (good, None),
    ):
        with pytest.raises(InvalidValue):
            await inbox.accept(batch, checkpoint, now=NOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        await inbox.accept([good], None, now=math.nan)
    assert await scalar(sql_store, "SELECT COUNT(*) FROM inbox") == 0
    assert await scalar(sql_store, "SELECT COUNT(*) FROM inbox_checkpoints") == 0
    assert await inbox.checkpoint("src") is None


async def test_two_opens_of_one_file_never_claim_the_same_row(db_path: Path) -> None:
    async with (
        await RuntimeStore.open(db_path) as one,
        await RuntimeStore.open(db_path) as two,
    ):
        await one.inbox.accept([envelope(f"e{n}") for n in range(40)], None, now=NOW)
        seen: list[str] = []
        for _ in range(10):
            for opened in (one, two):
                claimed = await opened.inbox.claim(
                    owner=f"w{id(opened)}", now=NOW, lease_s=600.0, limit=2, max_attempts=3
                )
                seen += [c.inbound_id for c in claimed]
        assert len(seen) == len(set(seen)) == 40
        assert (
            await two.inbox.claim(owner="w", now=NOW, lease_s=600.0, limit=5, max_attempts=3) == ()
        )


async def test_racing_accepts_of_one_conversation_are_claimed_one_at_a_time_in_order(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Hosts accept two messages of one conversation at once, the first one's commit
    slow. On PostgreSQL both transactions are open together and the id is handed out at
    insert: without taking turns, the later message committed first and a claim took it
    before (and then beside) the earlier one. SQLite's one writer orders them anyway."""
    real = inbox_rows.accept_rows
    m1_inserted = threading.Event()

    def slow_first(conn: Any, batch: Any, *rest: Any) -> Any:
        receipts = real(conn, batch, *rest)
        if any(params[2] == "m1" for _, params in batch):
            m1_inserted.set()  # its rows are in, its transaction still open
            time.sleep(1.0)  # still inside the accept's transaction: a slow commit
        return receipts

    monkeypatch.setattr(inbox_rows, "accept_rows", slow_first)
    chat = {"conversation_key": "chat"}
    async with (
        await RuntimeStore.open(db_path) as one,
        await RuntimeStore.open(db_path) as two,
    ):
        for opened, key in ((one, "w1"), (two, "w2")):  # each has seen the channel
            await opened.inbox.accept([envelope(key)], None, now=NOW)

        async def claim(opened: RuntimeStore) -> list[str]:
            claimed = await opened.inbox.claim(
                owner=f"w{id(opened)}", now=NOW, lease_s=600.0, limit=10, max_attempts=3
            )
            return [c.envelope.platform_event_key for c in claimed]

        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(one.inbox.accept, [envelope("m1", **chat)], None, now=NOW)
            )
            # m2 races only once m1 is inside its transaction, however late m1's thread ran.
            assert await anyio.to_thread.run_sync(m1_inserted.wait, 60.0)
            await two.inbox.accept([envelope("m2", **chat)], None, now=NOW)
            first = await claim(two)
        second = await claim(one)
    assert "m2" not in first
    assert [k for k in [*first, *second] if k.startswith("m")] == ["m1"]


async def test_rows_are_read_back_from_columns_not_a_blob(sql_store: RowStore) -> None:
    checkpoint = SourceCheckpoint("imap.inbox", "uid:42")
    sent = envelope(
        "e1",
        payload_ref="blob:1",
        artifacts=("att-1", "att-2"),
        metadata={"thread": {"id": "t1", "n": 2}, "api_key": "sk-live"},
        source_checkpoint=checkpoint,
    )
    await sql_store.inbox.accept([sent], checkpoint, now=NOW)
    (claimed,) = await sql_store.inbox.claim(
        owner="w", now=NOW, lease_s=60.0, limit=1, max_attempts=3
    )
    assert claimed.envelope == sent
    assert claimed.envelope.metadata["api_key"] == "[redacted]"
    stored = await scalar(sql_store, "SELECT metadata FROM inbox")
    assert "sk-live" not in stored
    row = await sql_store.read(
        lambda c: c.execute(
            "SELECT state, due_at, attempt, claim_token, owner FROM inbox"
        ).fetchone()
    )
    assert tuple(row) == ("claimed", NOW + 60.0, 1, claimed.claim_token, "w")


async def test_a_claim_pages_past_exhausted_rows_to_the_next_due_one(sql_store: RowStore) -> None:
    # Two instances, limit 2: one due row per instance is fetched at a time, so the
    # claim must page through channel "a"'s three poison rows to reach its live one.
    inbox = sql_store.inbox
    await inbox.accept([envelope(f"poison-{n}", "a") for n in range(3)], None, now=NOW)
    await inbox.claim(owner="w", now=NOW, lease_s=5.0, limit=3, max_attempts=1)
    await inbox.accept([envelope("live-a", "a"), envelope("live-b", "b")], None, now=NOW + 6)
    claimed = await inbox.claim(owner="w", now=NOW + 10, lease_s=5.0, limit=2, max_attempts=1)
    # "b" was never served, so it goes first; "a" gives its oldest due row that is not spent.
    assert [c.envelope.platform_event_key for c in claimed] == ["live-b", "live-a"]
    dead = await inbox.records(state="dead_lettered")
    assert sorted(r.platform_event_key for r in dead) == ["poison-0", "poison-1", "poison-2"]
    assert {(r.failure_code, r.due_at) for r in dead} == {("attempts_exhausted", None)}
    tokens = await scalar(
        sql_store, "SELECT COUNT(claim_token) FROM inbox WHERE state = 'dead_lettered'"
    )
    assert tokens == 0


async def test_bring_forward_makes_only_the_named_waiting_rows_due(sql_store: RowStore) -> None:
    # A worker wakes the inbounds it deferred for a provider outage: those still ready and
    # due later move to the given time, in one call; claimed, ended, sooner and unnamed
    # rows stay; unknown ids are skipped.
    inbox = sql_store.inbox
    keys = ("late-1", "late-2", "soon", "held", "done", "other")
    receipts = await inbox.accept([envelope(key) for key in keys], None, now=NOW)
    ids = dict(zip(keys, (r.inbound_id for r in receipts), strict=True))
    claimed = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=6, max_attempts=3)
    tokens = {c.envelope.platform_event_key: c.claim_token for c in claimed}
    for key, due in (("late-1", 300.0), ("late-2", 300.0), ("soon", 5.0), ("other", 300.0)):
        assert await inbox.release(ids[key], tokens[key], now=NOW, due_at=NOW + due)
    await inbox.complete(ids["done"], tokens["done"], InboundResult("ignored"), now=NOW)
    named = [ids[k] for k in ("late-1", "late-2", "soon", "held", "done")] + ["inb_unknown"]
    assert await inbox.bring_forward(named, due_at=NOW + 10, now=NOW + 1) == 2
    due = {key: (await inbox.record(ids[key])) for key in keys}
    assert {key: (r.state, r.due_at) for key, r in due.items() if r is not None} == {
        "late-1": ("ready", NOW + 10),
        "late-2": ("ready", NOW + 10),
        "soon": ("ready", NOW + 5),
        "held": ("claimed", NOW + 60),
        "done": ("completed", None),
        "other": ("ready", NOW + 300),
    }
    assert await inbox.bring_forward([ids["late-1"]], due_at=NOW + 10, now=NOW + 2) == 0
    for bad in ([], "inb_x", [""], ["inb_x"] * 501):
        with pytest.raises(InvalidValue):
            await inbox.bring_forward(bad, due_at=NOW, now=NOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        await inbox.bring_forward([ids["other"]], due_at=math.nan, now=NOW)


async def listed_plan(store: RowStore, state: str) -> list[str]:
    """The plan of the statement ``inbox.records(state=...)`` runs, as its store runs it."""

    def run(conn: Any) -> list[str]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            inbox_rows.list_records(conn, state, None, 50)
        finally:
            conn.set_trace_callback(None)
        return [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {seen[-1]}")]

    return await store.read(run)


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite's planner and its partial indexes")
async def test_listing_the_ready_or_claimed_rows_reads_the_live_index_not_the_history(
    sql_store: RowStore,
) -> None:
    """An operator's ``inbox list --state ready`` on a week of completed rows walked the id
    order back through every one of them (and its payload) when fewer than the limit were
    live: 0.2-0.4 s at 200,000 rows. It reads the live rows' partial index instead."""
    inbox = sql_store.inbox
    await inbox.accept([envelope(f"k-{n}") for n in range(30)], None, now=NOW)
    claimed = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=20, max_attempts=5)
    for item in claimed[:10]:
        await inbox.complete(item.inbound_id, item.claim_token, InboundResult("ignored"), now=NOW)
    everything = await inbox.records(limit=100)  # newest first, every state
    for state in ("ready", "claimed"):
        steps = await listed_plan(sql_store, state)
        # One of the live rows' partial indexes (inbox_due, inbox_conversation_due), never
        # the table in id order.
        assert "USING INDEX inbox_" in steps[0], (state, steps)
        assert "inbox_dead" not in steps[0], (state, steps)
        # The same rows, in the same newest-first order, as the unfiltered list gives.
        expected = [r.inbound_id for r in everything if r.state == state]
        assert len(expected) == 10
        assert [r.inbound_id for r in await inbox.records(state=state, limit=50)] == expected
        assert [r.inbound_id for r in await inbox.records(state=state, limit=3)] == expected[:3]
    dead = await listed_plan(sql_store, "dead_lettered")
    assert dead == ["SCAN inbox USING INDEX inbox_dead"], dead


@pytest.mark.sqlite_only("EXPLAIN QUERY PLAN: SQLite's planner and its partial indexes")
async def test_counts_read_the_live_index_and_the_tallies_never_the_history(
    sql_store: RowStore,
) -> None:
    """``inbox counts`` (and the notebook's monitor, every 2 s) grouped every row of the
    inbox with its turn: 0.36 s at 200,000 rows, growing with the history. It counts the
    live rows from their partial index and reads the finished ones' tallies (v28)."""
    inbox = sql_store.inbox
    await inbox.accept([envelope(f"k-{n}") for n in range(6)], None, now=NOW)
    claimed = await inbox.claim(owner="w", now=NOW, lease_s=60.0, limit=3, max_attempts=5)
    for item in claimed[:2]:
        await inbox.complete(item.inbound_id, item.claim_token, InboundResult("ignored"), now=NOW)

    def run(conn: Any) -> list[str]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            inbox_rows.channel_counts(conn)
        finally:
            conn.set_trace_callback(None)
        return [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {seen[-1]}")]

    steps = await sql_store.read(run)
    reads = [step for step in steps if step.startswith(("SCAN", "SEARCH"))]
    assert reads == [
        "SCAN inbox USING INDEX inbox_due",
        "SCAN inbox_tallies",
        "SCAN inbox_tally_deltas",
        "SCAN q",
    ], steps
    (counts,) = await inbox.counts()
    assert (counts.ready, counts.claimed, counts.completed) == (3, 1, 2)
