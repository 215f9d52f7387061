"""Random inbox and outbox histories, and the counts a full recount gives, for the
tallies ``inbox.counts`` and ``delivery.counts`` read (SQLite v28, PostgreSQL v15).

A history runs the store's own writers (accept, claim, complete, fail, release,
requeue, prune; reply, claim, delivered, failed, retry, prune), ends turns after
their inbounds completed, and also writes rows in bulk in SQL both engines accept,
as no writer of the store would: finished rows inserted and deleted hundreds at a
time, so the deltas are folded into the tallies several times over.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from typing import Any

from hostkit.errors import NotFoundOrUnauthorized, StaleClaim
from hostkit.store import RowStore, RuntimeStore
from hostkit.types import (
    ChannelCounts,
    ClaimedInbound,
    DeliveryCounts,
    DeliveryFailure,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
)
from tests.contract._delivery_adapters import ROUTE

__all__ = [
    "EVERY_INBOX_ROW",
    "EVERY_OUTBOX_ROW",
    "RandomHistory",
    "assert_tallies_seeded",
    "recount",
    "seed_before_tallies",
]

# The statements counts ran before the tallies: every row read, the turns joined.
EVERY_INBOX_ROW = (
    "SELECT i.channel_instance_id, i.state, COUNT(*) AS n, "
    "COALESCE(SUM(CASE WHEN i.state = 'completed' AND i.result_kind = 'turn' "
    "AND t.status IN ('lost', 'failed', 'cancelled', 'indeterminate') THEN 1 ELSE 0 END), 0) "
    "FROM inbox i LEFT JOIN turns t ON t.turn_id = i.turn_id "
    "GROUP BY i.channel_instance_id, i.state ORDER BY i.channel_instance_id"
)
EVERY_OUTBOX_ROW = "SELECT status, COUNT(*) FROM outbox GROUP BY status"

NOW = 1_800_000_000.0
_CHANNELS = ("alpha.main", "beta.main", "gamma.main")
_TURN_ENDS = ("completed", "needs_user", "failed", "cancelled", "lost", "indeterminate")
_CREATED = "2026-01-01T00:00:00.000Z"


def _recounted(conn: sqlite3.Connection) -> tuple[tuple[ChannelCounts, ...], DeliveryCounts]:
    counts: dict[str, dict[str, int]] = {}
    for channel, state, n, unanswered in conn.execute(EVERY_INBOX_ROW).fetchall():
        counts.setdefault(channel, {})[state] = int(n)
        if unanswered:
            counts[channel]["unanswered"] = int(unanswered)
    inbox = tuple(ChannelCounts(channel, **states) for channel, states in counts.items())
    outbox = DeliveryCounts(**{s: int(n) for s, n in conn.execute(EVERY_OUTBOX_ROW).fetchall()})
    return inbox, outbox


async def recount(store: RowStore) -> tuple[tuple[ChannelCounts, ...], DeliveryCounts]:
    """The counts as the statements before the tallies gave them: every row read."""
    return await store.read(_recounted)


async def counted(store: RuntimeStore) -> tuple[tuple[ChannelCounts, ...], DeliveryCounts]:
    return await store.inbox.counts(), await store.delivery.counts()


def _turn(conn: sqlite3.Connection, turn_id: str, session_id: str, status: str) -> None:
    conn.execute(
        "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
        "core_revision, generation, status, started_at) "
        "VALUES (?, ?, 'suite', ?, 'assistant', 'rev', 1, ?, ?)",
        [turn_id, f"req-{turn_id}", session_id, status, _CREATED],
    )


class RandomHistory:
    """One seeded history of a store's inbox and outbox, a step at a time."""

    def __init__(self, store: RowStore, session_id: str, rng: random.Random) -> None:
        self.store = store
        self.session_id = session_id
        self.rng = rng
        self.now = NOW
        self.serial = 0
        self.tag = f"{rng.getrandbits(32):08x}"  # two histories of one store never meet
        self.inbound: list[Any] = []
        self.outbound: list[Any] = []
        self.running: list[str] = []
        self.turns: list[str] = []

    def _next(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.tag}-{self.serial}"

    async def step(self) -> str:
        """One random step; its name (for a failing assertion's message)."""
        steps = (
            self.accept,
            self.claim,
            self.end_inbound,
            self.end_inbound,
            self.requeue,
            self.prune,
            self.end_turn,
            self.end_turn,
            self.reply,
            self.claim_intents,
            self.end_intent,
            self.retry_intent,
            self.bulk,
        )
        step = self.rng.choice(steps)
        self.now += self.rng.choice((0.0, 1.0, 20.0, 45.0))
        await step()
        return step.__name__

    async def turn(self, status: str) -> str:
        turn_id = self._next("turn")
        await self.store.write(lambda c: _turn(c, turn_id, self.session_id, status))
        self.turns.append(turn_id)
        if status == "running":
            self.running.append(turn_id)
        return turn_id

    async def accept(self) -> None:
        envelopes = [
            InboundEnvelope(
                channel_instance_id=self.rng.choice(_CHANNELS),
                platform_event_key=self._next("key"),
                conversation_key=f"chat-{self.rng.randrange(6)}",
                principal_key="user-1",
                authenticated_by="hmac",
                received_at=NOW,
                payload="hello",
            )
            for _ in range(self.rng.randint(1, 6))
        ]
        await self.store.inbox.accept(envelopes, None, now=self.now)

    async def claim(self) -> None:
        claimed = await self.store.inbox.claim(
            owner="w", now=self.now, lease_s=30.0, limit=self.rng.randint(1, 5), max_attempts=2
        )
        self.inbound.extend(claimed)

    async def end_inbound(self) -> None:
        if not self.inbound:
            return
        held = self.inbound.pop(self.rng.randrange(len(self.inbound)))
        # Its lease lapsed, another claim ended it and retention deleted it: not found.
        with contextlib.suppress(NotFoundOrUnauthorized):
            await self._end(held)

    async def _end(self, held: ClaimedInbound) -> None:
        inbox, rng = self.store.inbox, self.rng
        ending = rng.choice(("turn", "ignored", "retry", "dead", "release"))
        if ending == "turn":
            status = rng.choice(("running", "running", *_TURN_ENDS))
            turn_id = await self.turn(status)
            result = InboundResult("turn", turn_id, status)
            await inbox.complete(held.inbound_id, held.claim_token, result, now=self.now)
        elif ending == "ignored":
            result = InboundResult("ignored")
            await inbox.complete(held.inbound_id, held.claim_token, result, now=self.now)
        elif ending == "release":
            await inbox.release(held.inbound_id, held.claim_token, now=self.now)
        else:
            failure = InboundFailure("transient", "boom", "it broke")
            retry = self.now + 5.0 if ending == "retry" else None
            await inbox.fail(
                held.inbound_id, held.claim_token, failure, retry_at=retry, now=self.now
            )

    async def requeue(self) -> None:
        dead = await self.store.inbox.records(state="dead_lettered", limit=5)
        if dead:
            inbound_id = self.rng.choice(dead).inbound_id
            await self.store.inbox.requeue(inbound_id, reason="again", actor="ops", now=self.now)

    async def prune(self) -> None:
        before = self.now - self.rng.choice((0.0, 30.0, 120.0))
        limit = self.rng.randint(1, 40)
        await self.store.inbox.prune(payload_before=before, tombstone_before=before, limit=limit)
        await self.store.delivery.prune(payload_before=before, tombstone_before=before, limit=limit)

    async def end_turn(self) -> None:
        """A turn that ends after its inbound completed (the tally follows the turn)."""
        if not self.running:
            return
        turn_id = self.running.pop(self.rng.randrange(len(self.running)))
        status = self.rng.choice(_TURN_ENDS)
        await self.store.write(
            lambda c: c.execute(
                "UPDATE turns SET status = ? WHERE turn_id = ? AND status = 'running'",
                [status, turn_id],
            )
        )

    async def reply(self) -> None:
        for _ in range(self.rng.randint(1, 3)):
            await self.store.delivery.reply(
                inbound_id=self._next("inb"), session_id=self.session_id, route=ROUTE, text="hi"
            )

    async def claim_intents(self) -> None:
        claimed = await self.store.delivery.claim(
            owner="d", limit=self.rng.randint(1, 4), lease_s=30.0, max_attempts=2, now=self.now
        )
        self.outbound.extend(claimed)

    async def end_intent(self) -> None:
        if not self.outbound:
            return
        held = self.outbound.pop(self.rng.randrange(len(self.outbound)))
        delivery, ending = self.store.delivery, self.rng.choice(("sent", "retry", "dead", "back"))
        # Its lease lapsed and another claim took it: refused as stale.
        with contextlib.suppress(StaleClaim):
            if ending == "sent":
                await delivery.delivered(held, now=self.now)
            elif ending == "back":
                await delivery.release(held, now=self.now)
            else:
                retry = self.now + 5.0 if ending == "retry" else None
                failure = DeliveryFailure("transient", "down")
                await delivery.failed(held, failure, retry_at=retry, now=self.now)

    async def retry_intent(self) -> None:
        listed = await self.store.delivery.intents(status="dead_lettered", limit=10)
        dead = [intent for intent in listed if not intent.payload_pruned]
        if dead:
            intent_id = self.rng.choice(dead).intent_id
            await self.store.delivery.retry(intent_id, reason="again", actor="ops", now=self.now)

    async def bulk(self) -> None:
        """Hundreds of finished rows inserted, or deleted, in one transaction."""
        n = self.rng.randint(100, 600)
        if self.rng.random() < 0.3:
            await self.store.write(lambda c: _delete_finished(c, n))
        else:
            await self.insert_finished(n)

    async def insert_finished(self, n: int) -> None:
        """``n`` finished inbounds and ``n`` finished intents, in one transaction."""
        # A turn of each bulk, maybe still running: rows that completed before it ended.
        turns = [*self.turns[-20:], await self.turn(self.rng.choice(("running", *_TURN_ENDS)))]
        inbound = []
        for _ in range(n):
            key = self._next("bulk")
            state = self.rng.choice(("completed", "completed", "dead_lettered"))
            turn_id = self.rng.choice(turns) if state == "completed" else None
            kind = "turn" if turn_id is not None and self.rng.random() < 0.8 else None
            channel = self.rng.choice(_CHANNELS)
            inbound.append((key, channel, key, state, kind, turn_id, self.now))
        outbound = [
            (self._next("out"), self._next("inb"), self.session_id, status, self.now)
            for status in self.rng.choices(("delivered", "dead_lettered"), k=n)
        ]
        await self.store.write(lambda c: _insert_finished(c, inbound, outbound))


async def insert_finished(store: RowStore, n: int, *, session_id: str) -> None:
    """``n`` completed inbounds (no turn) and ``n`` delivered intents of ``session_id``,
    in one transaction: a fold's worth of deltas without a claim each."""
    inbound = [
        (f"bulk-{i}", "chan.bulk", f"bulk-{i}", "completed", None, None, NOW) for i in range(n)
    ]
    outbound = [(f"out-{i}", f"bulk-inb-{i}", session_id, "delivered", NOW) for i in range(n)]
    await store.write(lambda c: _insert_finished(c, inbound, outbound))


def _insert_finished(
    conn: sqlite3.Connection, inbound: list[tuple[Any, ...]], outbound: list[tuple[Any, ...]]
) -> None:
    conn.executemany(
        "INSERT INTO inbox (inbound_id, channel_instance_id, platform_event_key, kind, "
        "conversation_key, principal_key, authenticated_by, received_at, payload, state, "
        "result_kind, turn_id, accepted_at, updated_at) "
        "VALUES (?, ?, ?, 'message', 'bulk', 'user-1', 'hmac', 1.0, 'x', ?, ?, ?, 1.0, ?)",
        inbound,
    )
    conn.executemany(
        "INSERT INTO outbox (intent_id, inbound_id, session_id, route, payload, status, "
        "attempts, created_at, delivered_at, updated_at) "
        f"VALUES (?, ?, ?, '{{}}', '{{}}', ?, 1, '{_CREATED}', 1.0, ?)",
        outbound,
    )


def _delete_finished(conn: sqlite3.Connection, n: int) -> None:
    conn.execute(
        "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox "
        "WHERE state IN ('completed', 'dead_lettered') ORDER BY id LIMIT ?)",
        [n],
    )
    conn.execute(
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox "
        "WHERE status IN ('delivered', 'dead_lettered') ORDER BY id LIMIT ?)",
        [n],
    )


async def seed_before_tallies(
    store: RowStore, seed: int = 28
) -> tuple[tuple[ChannelCounts, ...], DeliveryCounts]:
    """Rows written before the tallies, and the counts a full recount gives of them.

    No claim: this release's claims fold PostgreSQL's deltas, which an older
    schema has not got.
    """
    session_id = await store.create_session(owner_kind="system", principal_id="suite")
    history = RandomHistory(store, session_id, random.Random(seed))
    for status in ("running", *_TURN_ENDS):
        await history.turn(status)
    for _ in range(4):
        await history.accept()
        await history.reply()
    await history.insert_finished(300)
    return await recount(store)


async def assert_tallies_seeded(
    store: RuntimeStore, before: tuple[tuple[ChannelCounts, ...], DeliveryCounts]
) -> None:
    """The upgrade's tallies give the counts the old statements gave, and stay exact for
    the history that follows."""
    assert isinstance(store, RowStore)
    assert await counted(store) == before
    inbox, outbox = before
    assert any(c.completed and c.dead_lettered and c.unanswered for c in inbox), inbox
    assert min(outbox.delivered, outbox.dead_lettered) > 0, outbox
    history = RandomHistory(
        store,
        await store.create_session(owner_kind="system", principal_id="suite"),
        random.Random(29),
    )
    for _ in range(40):
        await history.step()
    assert await counted(store) == await recount(store)
