"""ChannelInbox clause: unique (channel_instance_id, platform_event_key) dedup key.

The key is unique across deliveries, within one batch, and after retention
cleared the payload (the row stays as the dedup tombstone for the replay
horizon), so no platform redelivery ever becomes a second inbound.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.inbox import RetentionPolicy
from hostkit.types import InboundResult
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def test_dedup_key_is_unique_across_deliveries(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        receipts = [await sut.inbox.accept(envelope("evt-1")) for _ in range(5)]
        assert [r.disposition for r in receipts] == ["accepted"] + ["duplicate"] * 4
        assert len({r.inbound_id for r in receipts}) == 1
        (counts,) = await sut.inbox.counts()
        assert counts.ready == 1


async def test_dedup_key_is_unique_under_concurrent_accepts(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        receipts = []

        async def deliver() -> None:
            receipts.append(await sut.inbox.accept(envelope("evt-1")))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(deliver)
        assert sorted(r.disposition for r in receipts) == ["accepted"] + ["duplicate"] * 7
        assert len({r.inbound_id for r in receipts}) == 1
        assert len(await sut.inbox.records()) == 1


async def test_dedup_key_is_unique_within_one_batch(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        receipts = await sut.inbox.accept_batch(
            [
                envelope("evt-1"),
                envelope("evt-2"),
                envelope("evt-1"),
                envelope("evt-1", "slack.team"),
            ]
        )
        assert [r.disposition for r in receipts] == [
            "accepted",
            "accepted",
            "duplicate",
            "accepted",
        ]
        assert receipts[2].inbound_id == receipts[0].inbound_id
        assert len({r.inbound_id for r in receipts}) == 3
        assert len(await sut.inbox.records()) == 3


async def test_dedup_key_holds_after_the_payload_was_pruned(adapter: str, tmp_path: Path) -> None:
    retention = RetentionPolicy(payload_s=60.0, dedup_horizon_s=3_600.0)
    async with open_inbox(adapter, tmp_path, retention=retention) as sut:
        first = await sut.inbox.accept(envelope("evt-1", payload="secret body"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.complete(claimed, InboundResult("ignored"))
        sut.clock.advance(61)
        report = await sut.inbox.prune()
        assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
        record = await sut.inbox.record(first.inbound_id)
        assert record is not None
        assert record.payload_pruned
        again = await sut.inbox.accept(envelope("evt-1", payload="secret body"))
        assert again == type(again)(first.inbound_id, "duplicate")
        assert await sut.inbox.claim() is None
