"""ChannelInbox clause: accept gives a receipt: a durable inbound id, accepted | duplicate.

A duplicate returns the same durable identity as the first delivery, so a
transport can acknowledge a redelivery exactly like the original. Events on
the Host's reserved channel instances are refused at accept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.authority import RESERVED_CHANNELS
from hostkit.errors import InvalidValue
from hostkit.types import InboundEnvelope
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def test_receipt_is_a_durable_inbound_id_accepted(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        assert receipt.disposition == "accepted"
        assert receipt.inbound_id.startswith("inb_")
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.channel_instance_id, record.platform_event_key) == (
            "telegram.support",
            "evt-1",
        )
        assert (record.state, record.attempt, record.requeues) == ("ready", 0, 0)
        assert record.accepted_at == sut.clock.now
        assert record.due_at == sut.clock.now


async def test_receipt_duplicate_returns_the_same_identity(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        first = await sut.inbox.accept(envelope("evt-1", payload="first"))
        sut.clock.advance(30)
        again = await sut.inbox.accept(envelope("evt-1", payload="first"))
        reused = await sut.inbox.accept(envelope("evt-1", payload="something else"))
        assert again.disposition == reused.disposition == "duplicate"
        assert again.inbound_id == reused.inbound_id == first.inbound_id
        rows = await sut.inbox.records()
        assert [row.inbound_id for row in rows] == [first.inbound_id]
        # The first delivery is what is stored and worked on.
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert claimed.envelope.payload == "first"
        assert await sut.inbox.claim() is None


async def test_receipt_same_event_key_on_another_channel_is_another_event(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        one = await sut.inbox.accept(envelope("evt-1", "telegram.support"))
        two = await sut.inbox.accept(envelope("evt-1", "slack.team"))
        assert one.disposition == two.disposition == "accepted"
        assert one.inbound_id != two.inbound_id
        counts = await sut.inbox.counts()
        assert [(c.channel_instance_id, c.ready) for c in counts] == [
            ("slack.team", 1),
            ("telegram.support", 1),
        ]


@pytest.mark.parametrize("reserved", sorted(RESERVED_CHANNELS))
async def test_receipt_refuses_the_reserved_channel_instances(
    adapter: str, tmp_path: Path, reserved: str
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        with pytest.raises(InvalidValue, match="reserved"):
            await sut.inbox.accept(envelope("evt-1", reserved))
        with pytest.raises(InvalidValue, match="reserved"):
            await sut.inbox.accept_batch([envelope("evt-2"), envelope("evt-3", reserved)])
        assert await sut.inbox.counts() == ()
        assert await sut.inbox.records() == ()


async def test_receipt_values_are_frozen(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        receipt = await sut.inbox.accept(envelope("evt-1"))
        with pytest.raises(AttributeError):
            receipt.inbound_id = "inb_other"  # type: ignore[misc]
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert isinstance(claimed.envelope, InboundEnvelope)
        with pytest.raises(AttributeError):
            claimed.attempt = 0  # type: ignore[misc]
        with pytest.raises(TypeError):
            claimed.envelope.metadata["x"] = 1  # type: ignore[index]
