"""ChannelInbox clause: a batch accept and its source checkpoint commit in one transaction.

A polling transport advances its cursor only after every event of the batch
is durable; a batch that cannot be stored whole stores nothing and leaves the
checkpoint where it was, so the transport reads the same events again (and
the dedup key absorbs the replay).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidValue
from hostkit.types import MAX_BATCH, SourceCheckpoint
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

SOURCE = "imap.support"


async def test_batch_checkpoint_advances_with_the_batch(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        assert await sut.inbox.checkpoint(SOURCE) is None
        receipts = await sut.inbox.accept_batch(
            [envelope("uid-1"), envelope("uid-2")], SourceCheckpoint(SOURCE, "uid:2")
        )
        assert [r.disposition for r in receipts] == ["accepted", "accepted"]
        assert await sut.inbox.checkpoint(SOURCE) == "uid:2"
        # A replay of the same events after a restart: duplicates, and the cursor still moves.
        replay = await sut.inbox.accept_batch(
            [envelope("uid-2"), envelope("uid-3")], SourceCheckpoint(SOURCE, "uid:3")
        )
        assert [r.disposition for r in replay] == ["duplicate", "accepted"]
        assert replay[0].inbound_id == receipts[1].inbound_id
        assert await sut.inbox.checkpoint(SOURCE) == "uid:3"
        assert await sut.inbox.checkpoint("imap.other") is None


async def test_batch_checkpoint_of_a_single_accept_is_its_envelopes(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        await sut.inbox.accept(envelope("upd-41", checkpoint=SourceCheckpoint(SOURCE, "41")))
        assert await sut.inbox.checkpoint(SOURCE) == "41"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: "not an envelope", id="not-an-envelope"),
        pytest.param(lambda: envelope("uid-9", "operator"), id="reserved-channel"),
    ],
)
async def test_batch_checkpoint_with_one_invalid_envelope_stores_nothing(
    adapter: str, tmp_path: Path, bad: Any
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        await sut.inbox.accept_batch([envelope("uid-1")], SourceCheckpoint(SOURCE, "uid:1"))
        with pytest.raises(InvalidValue):
            await sut.inbox.accept_batch(
                [envelope("uid-2"), bad(), envelope("uid-3")], SourceCheckpoint(SOURCE, "uid:3")
            )
        assert await sut.inbox.checkpoint(SOURCE) == "uid:1"
        assert [r.platform_event_key for r in await sut.inbox.records()] == ["uid-1"]
        # The same events, fixed, are accepted as new: nothing of the failed batch was kept.
        receipts = await sut.inbox.accept_batch(
            [envelope("uid-2"), envelope("uid-3")], SourceCheckpoint(SOURCE, "uid:3")
        )
        assert [r.disposition for r in receipts] == ["accepted", "accepted"]


async def test_batch_checkpoint_refused_at_the_adapter_stores_nothing(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        now = sut.clock.now
        with pytest.raises(InvalidValue):
            await sut.store.accept(
                [envelope("uid-1"), "not an envelope"],  # type: ignore[list-item]
                SourceCheckpoint(SOURCE, "uid:2"),
                now=now,
            )
        with pytest.raises(InvalidValue):
            await sut.store.accept(
                [envelope("uid-1")],
                "uid:2",  # type: ignore[arg-type]
                now=now,
            )
        with pytest.raises(InvalidValue):
            await sut.store.accept(
                [envelope(f"uid-{i}") for i in range(MAX_BATCH + 1)],
                SourceCheckpoint(SOURCE, "uid:many"),
                now=now,
            )
        assert await sut.store.checkpoint(SOURCE) is None
        assert await sut.store.records() == ()
        assert await sut.store.counts() == ()


async def test_batch_checkpoint_bounds_the_batch(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        with pytest.raises(InvalidValue):
            await sut.inbox.accept_batch([])
        with pytest.raises(InvalidValue):
            await sut.inbox.accept_batch([envelope(f"e-{i}") for i in range(MAX_BATCH + 1)])
        assert await sut.inbox.counts() == ()
        full = await sut.inbox.accept_batch(
            [envelope(f"e-{i}") for i in range(MAX_BATCH)], SourceCheckpoint(SOURCE, "full")
        )
        assert len(full) == MAX_BATCH
        assert {r.disposition for r in full} == {"accepted"}
        (counts,) = await sut.inbox.counts()
        assert counts.ready == MAX_BATCH
