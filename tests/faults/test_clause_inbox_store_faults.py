"""The SQLite inbox under real faults: racing processes, a full disk, a refused write.

Each worker (``inbox_store_worker.py``) is a separate Python process with its
own store open on one database file; they start their work together (a "go"
file) and log what they got. The disk-full case uses SQLite's own
``SQLITE_FULL`` (``PRAGMA max_page_count`` shrunk on the writer connection);
the I/O error is the kernel refusing a write past ``RLIMIT_FSIZE`` (real
``EFBIG``, so SQLite reports ``SQLITE_IOERR_WRITE``; it holds under root,
unlike a read-only directory).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import StoreError, TurnRejected
from hostkit.inbox import ChannelInbox
from hostkit.inbox._outcomes import failure_of
from hostkit.store import RuntimeStore, SqliteStore
from hostkit.types import InboundEnvelope, InboundResult, SourceCheckpoint

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("inbox_store_worker.py")
STARTUP_S = 60.0
NOW = 1_800_000_000.0
PER_CHANNEL = 40


def envelope(
    key: str, channel: str = "webhook.main", payload: str = "hello", conversation: str = ""
) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=key,
        conversation_key=conversation or f"chat-{key}",
        principal_key="user-1",
        authenticated_by="hmac",
        received_at=NOW,
        payload=payload,
    )


async def lines(path: Path) -> list[dict[str, Any]]:
    text = await anyio.Path(path).read_text()
    return [json.loads(line) for line in text.splitlines()]


async def run_together(tmp_path: Path, workers: list[dict[str, Any]]) -> None:
    """Start every worker, let them all open the store, then release them at once."""
    go = tmp_path / "go"
    for index, options in enumerate(workers):
        options.update(ready=str(tmp_path / f"ready-{index}"), go=str(go))
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def run(options: dict[str, Any]) -> None:
        with anyio.fail_after(STARTUP_S * 2):
            argv = [sys.executable, str(WORKER), json.dumps(options)]
            finished.append(await anyio.run_process(argv, check=False))

    async with anyio.create_task_group() as group:
        for options in workers:
            group.start_soon(run, options)
        with anyio.fail_after(STARTUP_S):
            for options in workers:
                # The workers are other processes: poll for their ready files.
                while not await anyio.Path(options["ready"]).exists():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        await anyio.Path(go).write_text("go")
    for done in finished:
        assert done.returncode == 0, done.stderr.decode()[-2000:]


async def test_one_platform_event_accepted_concurrently_by_processes_is_one_row(
    tmp_path: Path,
) -> None:
    db, out = tmp_path / "hostkit.db", tmp_path / "receipts.jsonl"
    async with RuntimeStore.open(db):
        pass  # the schema exists before the racing processes open the file
    processes, tasks = 3, 5
    await run_together(
        tmp_path,
        [
            {"db": str(db), "out": str(out), "mode": "accept", "key": "evt-1", "tasks": tasks}
            for _ in range(processes)
        ],
    )
    receipts = await lines(out)
    assert len(receipts) == processes * tasks
    assert len({r["pid"] for r in receipts}) == processes
    assert len({r["inbound_id"] for r in receipts}) == 1
    assert Counter(r["disposition"] for r in receipts) == {
        "accepted": 1,
        "duplicate": processes * tasks - 1,
    }
    # After a restart (a new open of the file) the event is still a duplicate.
    async with RuntimeStore.open(db) as store:
        inbox = ChannelInbox.on_store(store)
        again = await inbox.accept(envelope("evt-1"))
        assert (again.inbound_id, again.disposition) == (receipts[0]["inbound_id"], "duplicate")
        (counts,) = await inbox.counts()
        assert (counts.channel_instance_id, counts.ready) == ("webhook.main", 1)
        claimed = await inbox.claim_batch(5)
        assert [c.inbound_id for c in claimed] == [again.inbound_id]


async def test_worker_processes_never_hold_the_same_inbound(tmp_path: Path) -> None:
    db, out = tmp_path / "hostkit.db", tmp_path / "claims.jsonl"
    channels = ("chat.a", "chat.b", "chat.c")
    async with RuntimeStore.open(db) as store:
        inbox = ChannelInbox.on_store(store)  # the workers' clock: due now
        for channel in channels:
            await inbox.accept_batch(
                [envelope(f"{channel}-{n}", channel) for n in range(PER_CHANNEL)]
            )
    processes = 3
    await run_together(
        tmp_path,
        [
            {
                "db": str(db),
                "out": str(out),
                "mode": "claim",
                "batch": batch,
                "lease_s": 600.0,
                # Without it one process could claim all 120 before the others woke.
                "hold_s": 0.005,
            }
            for batch in (1, 3, 4)[:processes]
        ],
    )
    claims = await lines(out)
    per_inbound = Counter(c["inbound_id"] for c in claims)
    # Leases outlive the test: any second claim of an inbound would be a double hold.
    assert len(per_inbound) == 3 * PER_CHANNEL
    assert set(per_inbound.values()) == {1}
    assert {c["attempt"] for c in claims} == {1}
    assert len({c["token"] for c in claims}) == len(claims)
    assert len({c["pid"] for c in claims}) > 1, "one process took everything: no race happened"
    async with RuntimeStore.open(db) as store:
        counts = await store.inbox.counts()
        assert [(c.channel_instance_id, c.completed) for c in counts] == [
            (channel, PER_CHANNEL) for channel in channels
        ]
        assert all(c.ready == c.claimed == c.dead_lettered == 0 for c in counts)


async def test_worker_processes_claim_a_conversations_messages_one_at_a_time_in_order(
    tmp_path: Path,
) -> None:
    """Three processes, one channel, four conversations accepted interleaved: each
    conversation's messages are claimed in accept order, each only after the one before
    it began completing, while different conversations are held at the same time."""
    db, out, done = tmp_path / "hostkit.db", tmp_path / "claims.jsonl", tmp_path / "done.jsonl"
    conversations, per_conversation = 4, 8
    accepted: dict[str, list[str]] = {f"conv-{c}": [] for c in range(conversations)}
    async with RuntimeStore.open(db) as store:
        inbox = ChannelInbox.on_store(store)
        for n in range(per_conversation):
            for conversation in accepted:
                receipt = await inbox.accept(
                    envelope(f"{conversation}-{n}", conversation=conversation)
                )
                accepted[conversation].append(receipt.inbound_id)
    await run_together(
        tmp_path,
        [
            {
                "db": str(db),
                "out": str(out),
                "done_out": str(done),
                "mode": "claim",
                # Two at a time, fewer than the four conversations: one process cannot
                # hold every conversation, so the others claim too.
                "batch": 2,
                "lease_s": 600.0,
                "hold_s": 0.01,
            }
            for _ in range(3)
        ],
    )
    claims = await lines(out)
    claimed_at = {c["inbound_id"]: c["at"] for c in claims}
    completing_at = {d["inbound_id"]: d["at"] for d in await lines(done)}
    assert len(claims) == conversations * per_conversation
    assert len({c["pid"] for c in claims}) > 1, "one process took everything: no race happened"
    for ids in accepted.values():
        assert sorted(ids, key=claimed_at.__getitem__) == ids
        for earlier, later in itertools.pairwise(ids):
            assert claimed_at[later] > completing_at[earlier]
    # Conversations still ran side by side: some claims overlapped in time.
    spans = sorted((claimed_at[i], completing_at[i]) for i in claimed_at)
    assert any(start < end for (_, end), (start, _) in itertools.pairwise(spans))


async def test_a_full_disk_at_accept_stores_nothing_and_then_recovers(db_path: Path) -> None:
    async with RuntimeStore.open(db_path) as store:
        assert isinstance(store, SqliteStore)
        inbox = ChannelInbox.on_store(store)
        await inbox.accept_batch([envelope("first")], SourceCheckpoint("poller", "c1"))
        pages = await store.write(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        # The writer connection may grow the file no further: the next insert is SQLITE_FULL.
        await store.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages}").fetchone())
        batch = [envelope(f"big-{n}", payload="x" * 60_000) for n in range(4)]
        with pytest.raises(StoreError, match="SQLITE_FULL") as full:
            await inbox.accept_batch(batch, SourceCheckpoint("poller", "c2"))
        # A full disk clears (as PostgreSQL's insufficient-resources class): worth a retry.
        assert full.value.retryable
        # Concurrent accepts sharing the failed commit all fail too; none is acknowledged.
        failures: list[BaseException] = []

        async def accept_one(key: str) -> None:
            try:
                await inbox.accept(envelope(key, payload="y" * 60_000))
            except StoreError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as group:
            for n in range(4):
                group.start_soon(accept_one, f"concurrent-{n}")
        assert len(failures) == 4
        assert await inbox.checkpoint("poller") == "c1"
        assert [r.platform_event_key for r in await inbox.records()] == ["first"]

        await store.write(lambda c: c.execute("PRAGMA max_page_count = 1073741823").fetchone())
        receipts = await inbox.accept_batch(batch, SourceCheckpoint("poller", "c2"))
        assert [r.disposition for r in receipts] == ["accepted"] * 4
        assert await inbox.checkpoint("poller") == "c2"
        assert len(await inbox.records()) == 5
        for claimed in await inbox.claim_batch(5):
            decision = await inbox.complete(claimed, InboundResult("ignored"))
            assert decision.disposition == "completed"


async def test_a_refused_write_at_accept_is_an_io_error_and_then_recovers(
    tmp_path: Path,
) -> None:
    db, out = tmp_path / "hostkit.db", tmp_path / "ioerror.jsonl"
    async with RuntimeStore.open(db) as store:
        inbox = ChannelInbox.on_store(store)
        await inbox.accept_batch([envelope("first")], SourceCheckpoint("poller", "c1"))
    await run_together(
        tmp_path, [{"db": str(db), "out": str(out), "mode": "ioerror", "batch": 4, "fsize": 32_768}]
    )
    (report,) = await lines(out)
    assert "SQLITE_IOERR" in report["error"]
    assert report["cursor_after_error"] == "c1"
    assert report["retried"] == ["accepted"] * 4
    assert report["cursor"] == "c2"
    async with RuntimeStore.open(db) as store:
        keys = [r.platform_event_key for r in await store.inbox.records()]
        assert sorted(keys) == ["big-0", "big-1", "big-2", "big-3", "first"]


@pytest.mark.parametrize("retryable", [True, False])
def test_a_turn_the_store_could_not_admit_is_a_transient_store_failure(retryable: bool) -> None:
    """An accepted message whose admission failed in the store (a full disk, a corrupt
    page) is retried after backoff, never dead-lettered as permanent on the first try:
    the failure is not about the message."""
    cause = StoreError("commit failed: SQLITE_FULL: database or disk is full")
    cause.retryable = retryable
    try:
        raise TurnRejected("the store could not admit the turn: commit failed") from cause
    except TurnRejected as exc:
        failure = failure_of(exc)
    assert (failure.kind, failure.code) == ("transient", "store")
    refused = TurnRejected("unknown agent")
    assert failure_of(refused).kind == "permanent"
