"""ChannelInbox clause: retention prunes payloads apart from dedup tombstones.

Completed inbounds lose their payload after ``payload_s``; their rows stay
as dedup tombstones until ``dedup_horizon_s`` (seven days by default, the
longest transport replay window), so a redelivery inside the horizon is
still a duplicate. Ready, claimed and dead-lettered rows are never pruned,
except dead letters the channel accepted without their text (``unprocessable``:
nothing a requeue could answer), which go after the horizon as tombstones do.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.errors import InvalidValue, StoreError
from hostkit.inbox import (
    DEDUP_HORIZON_S,
    ChannelInbox,
    RetentionPolicy,
    RetentionSweeper,
    RetryPolicy,
)
from hostkit.types import UNPROCESSABLE, InboundFailure, InboundResult, PruneReport
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

RETENTION = RetentionPolicy(payload_s=100.0, dedup_horizon_s=1_000.0)
POLICY = RetryPolicy(max_attempts=1, lease_s=50.0)


async def completed(sut: InboxUnderTest, key: str) -> str:
    receipt = await sut.inbox.accept(envelope(key, payload=f"body of {key}"))
    claimed = await sut.inbox.claim()
    assert claimed is not None
    assert claimed.inbound_id == receipt.inbound_id
    await sut.inbox.complete(claimed, InboundResult("ignored"))
    return receipt.inbound_id


async def test_retention_default_horizon_is_seven_days(adapter: str, tmp_path: Path) -> None:
    assert DEDUP_HORIZON_S == 7 * 24 * 3600
    async with open_inbox(adapter, tmp_path) as sut:
        assert sut.inbox.retention.dedup_horizon_s == DEDUP_HORIZON_S
        assert sut.inbox.retention.payload_s <= DEDUP_HORIZON_S
        inbound_id = await completed(sut, "evt-1")
        sut.clock.advance(DEDUP_HORIZON_S - 1)
        await sut.inbox.prune()
        assert (await sut.inbox.accept(envelope("evt-1"))).inbound_id == inbound_id
        sut.clock.advance(2)
        assert (await sut.inbox.prune()).tombstones_removed == 1


async def test_retention_prunes_completed_payloads_after_payload_s(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        inbound_id = await completed(sut, "evt-1")
        sut.clock.advance(99)
        assert await sut.inbox.prune() == type(await sut.inbox.prune())(0, 0)
        sut.clock.advance(2)
        report = await sut.inbox.prune()
        assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
        record = await sut.inbox.record(inbound_id)
        assert record is not None
        assert record.payload_pruned
        assert (record.state, record.result_kind) == ("completed", "ignored")
        again = await sut.inbox.prune()
        assert (again.payloads_cleared, again.tombstones_removed) == (0, 0)


async def test_retention_duplicate_inside_the_horizon_after_the_payload_was_pruned(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        inbound_id = await completed(sut, "evt-1")
        sut.clock.advance(999)
        report = await sut.inbox.prune()
        assert (report.payloads_cleared, report.tombstones_removed) == (1, 0)
        again = await sut.inbox.accept(envelope("evt-1"))
        assert (again.inbound_id, again.disposition) == (inbound_id, "duplicate")
        assert await sut.inbox.claim() is None


async def test_retention_tombstone_removed_after_the_horizon_then_accepted_again(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        inbound_id = await completed(sut, "evt-1")
        sut.clock.advance(1_001)
        report = await sut.inbox.prune()
        assert report.tombstones_removed == 1
        assert await sut.inbox.record(inbound_id) is None
        assert await sut.inbox.counts() == ()
        again = await sut.inbox.accept(envelope("evt-1"))
        assert again.disposition == "accepted"
        assert again.inbound_id != inbound_id


async def test_retention_never_prunes_active_or_dead_lettered_rows(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        dead = (await sut.inbox.accept(envelope("dead"))).inbound_id
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.fail(claimed, InboundFailure("transient", "boom"))
        held = (await sut.inbox.accept(envelope("held"))).inbound_id
        assert await sut.inbox.claim() is not None
        ready = (await sut.inbox.accept(envelope("ready", "slack.team"))).inbound_id
        sut.clock.advance(100_000)
        report = await sut.inbox.prune()
        assert (report.payloads_cleared, report.tombstones_removed) == (0, 0)
        for inbound_id, state in ((dead, "dead_lettered"), (held, "claimed"), (ready, "ready")):
            record = await sut.inbox.record(inbound_id)
            assert record is not None
            assert (record.state, record.payload_pruned) == (state, False)
        claimed_ready = await sut.inbox.claim_batch(3)
        # The expired claim is dead-lettered (its only attempt is spent); the ready one is served
        # with its payload intact.
        assert [c.envelope.payload for c in claimed_ready] == ["hello"]


async def test_retention_removes_unprocessable_dead_letters_after_the_horizon(
    adapter: str, tmp_path: Path
) -> None:
    """A sender whose events cannot be kept (too long, a NUL) leaves a dead letter each:
    without this they would fill the table for ever."""
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        dead: dict[str, str] = {}
        # A message that still holds its text stays, whatever its failure's code says.
        for key, kind, code in (
            ("too-long", UNPROCESSABLE, UNPROCESSABLE),
            ("poison", "message", "boom"),
            ("held-text", "message", UNPROCESSABLE),
        ):
            payload = "" if kind == UNPROCESSABLE else "text"
            dead[key] = (
                await sut.inbox.accept(envelope(key, kind=kind, payload=payload))
            ).inbound_id
            claimed = await sut.inbox.claim()
            assert claimed is not None
            await sut.inbox.fail(claimed, InboundFailure("permanent", code, "why"))
        sut.clock.advance(999)
        assert (await sut.inbox.prune()).tombstones_removed == 0
        sut.clock.advance(2)
        assert (await sut.inbox.prune()).tombstones_removed == 1
        assert await sut.inbox.record(dead["too-long"]) is None
        for key in ("poison", "held-text"):
            kept = await sut.inbox.record(dead[key])
            assert kept is not None
            assert kept.state == "dead_lettered"  # evidence an operator can still requeue
        again = await sut.inbox.accept(envelope("too-long", kind=UNPROCESSABLE, payload=""))
        assert (again.disposition, again.inbound_id != dead["too-long"]) == ("accepted", True)


async def test_an_unprocessable_dead_letter_requeued_counts_from_its_new_end(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        unkept = envelope("too-long", kind=UNPROCESSABLE, payload="")
        inbound_id = (await sut.inbox.accept(unkept)).inbound_id
        failure = InboundFailure("permanent", UNPROCESSABLE, "why")
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.fail(claimed, failure)
        sut.clock.advance(600)
        # ChannelInbox refuses this requeue now; a row requeued in the store directly (or
        # before it refused) must still count from its new end.
        await sut.store.requeue(
            inbound_id, reason="try it once more", actor="operator:ops", now=sut.clock.now
        )
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.fail(claimed, failure)
        sut.clock.advance(600)  # past the horizon from the first end, not from the second
        assert (await sut.inbox.prune()).tombstones_removed == 0
        sut.clock.advance(401)
        assert (await sut.inbox.prune()).tombstones_removed == 1
        assert await sut.inbox.record(inbound_id) is None


async def test_a_pass_stopped_by_its_limit_leaves_older_rows_whole_for_the_next(
    adapter: str, tmp_path: Path
) -> None:
    """Rows old enough to be deleted are not worth clearing first: the next pass deletes
    them whole."""
    retention = RetentionPolicy(payload_s=100.0, dedup_horizon_s=1_000.0, batch=2)
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=retention) as sut:
        ids = [await completed(sut, f"evt-{i}") for i in range(3)]
        sut.clock.advance(1_001)
        first = await sut.inbox.prune()
        assert (first.payloads_cleared, first.tombstones_removed) == (0, 2)
        left = await sut.inbox.record(ids[2])
        assert left is not None
        assert not left.payload_pruned
        second = await sut.inbox.prune()
        assert (second.payloads_cleared, second.tombstones_removed) == (0, 1)
        assert await sut.inbox.records() == ()


async def test_retention_is_bounded_per_pass(adapter: str, tmp_path: Path) -> None:
    retention = RetentionPolicy(payload_s=100.0, dedup_horizon_s=1_000.0, batch=2)
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=retention) as sut:
        for i in range(5):
            await completed(sut, f"evt-{i}")
        sut.clock.advance(500)
        reports = [await sut.inbox.prune() for _ in range(4)]
        assert [r.payloads_cleared for r in reports] == [2, 2, 1, 0]
        sut.clock.advance(600)
        reports = [await sut.inbox.prune() for _ in range(4)]
        assert [r.tombstones_removed for r in reports] == [2, 2, 1, 0]
        assert await sut.inbox.records() == ()


async def test_the_sweeper_prunes_a_backlog_in_bounded_passes_each_round(
    adapter: str, tmp_path: Path
) -> None:
    """What `hostkit serve` runs (the "retention" daemon): passes until one removes less
    than a batch, so a backlog larger than a batch is pruned in one round."""
    retention = RetentionPolicy(payload_s=100.0, dedup_horizon_s=1_000.0, batch=2)
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=retention) as sut:
        ids = [await completed(sut, f"evt-{n}") for n in range(5)]
        sweeper = RetentionSweeper(sut.inbox, interval_s=3_600)
        assert await sweeper.sweep() == (0, 0)
        sut.clock.advance(101)
        assert await sweeper.sweep() == (5, 0)
        for inbound_id in ids:
            record = await sut.inbox.record(inbound_id)
            assert record is not None
            assert record.payload_pruned
        sut.clock.advance(1_000)
        assert await sweeper.sweep() == (0, 5)
        assert sweeper.rounds == 3


async def test_the_sweeper_runs_at_once_then_every_interval_and_stops_promptly(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        inbound_id = await completed(sut, "evt-1")
        sut.clock.advance(101)
        sweeper = RetentionSweeper(sut.inbox, interval_s=0.05)
        prune, passes, third = sut.inbox.prune, [], anyio.Event()

        async def counted() -> PruneReport:
            passes.append(1)
            if len(passes) == 3:
                third.set()
                await anyio.sleep_forever()  # until the stop cuts this round
            return await prune()

        monkeypatch.setattr(sut.inbox, "prune", counted)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                await group.start(sweeper.run)
                await third.wait()
                sweeper.stop()
        # One pass per round here (nothing fills a batch), the first at once; the stop cut
        # the third.
        assert (sweeper.rounds, len(passes)) == (2, 3)
        record = await sut.inbox.record(inbound_id)
        assert record is not None
        assert record.payload_pruned


async def test_a_failed_round_is_logged_and_the_next_one_prunes(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        await completed(sut, "evt-1")
        sut.clock.advance(101)
        sweeper = RetentionSweeper(sut.inbox, interval_s=3_600)
        prune = sut.inbox.prune

        async def failing() -> PruneReport:
            raise StoreError("database is locked", retryable=True)

        monkeypatch.setattr(sut.inbox, "prune", failing)
        assert await sweeper.sweep() == (0, 0)
        assert "pruning failed, retrying next round: database is locked" in caplog.text
        monkeypatch.setattr(sut.inbox, "prune", prune)
        assert await sweeper.sweep() == (1, 0)


def test_the_interval_is_a_positive_number_of_seconds(adapter: str) -> None:
    for bad in (0, -1.0, float("nan"), "600", True):
        with pytest.raises(InvalidValue, match="interval_s"):
            RetentionSweeper(ChannelInbox.in_memory(), interval_s=bad)  # type: ignore[arg-type]


async def test_a_stop_cuts_the_round_in_progress(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown's drain deadline is for the turns in flight: a slow pass ends at once."""
    async with open_inbox(adapter, tmp_path, policy=POLICY, retention=RETENTION) as sut:
        entered = anyio.Event()

        async def slow() -> PruneReport:
            entered.set()
            await anyio.sleep(30)
            raise AssertionError("the pass was not cut")

        monkeypatch.setattr(sut.inbox, "prune", slow)
        sweeper = RetentionSweeper(sut.inbox, interval_s=3_600)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                await group.start(sweeper.run)
                await entered.wait()
                sweeper.stop()
        assert sweeper.rounds == 0
