"""ChannelInbox clause: back-pressure. Past its limits the inbox refuses a new inbound.

A flood must wait at its sender instead of filling the disk: ``accept``
raises ``InboxFull`` (retryable, with ``retry_after``, nothing stored) once the
queued backlog (ready + claimed) reaches ``InboxLimits.max_queued``, or when
the SQLite database's disk is down to ``reserve_bytes``. Dedup comes first: a
duplicate of an inbound already stored is answered as before, whatever the
limits. Nothing accepted is lost, and room made by the workers is used again.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from hostkit.errors import InboxFull, InvalidValue, RuntimeFailure
from hostkit.host import parse_config
from hostkit.inbox import _admission as admission_module
from hostkit.inbox._admission import IDLE_RECHECK_S, RECHECK_S
from hostkit.store import COMMAND_ALLOWANCE, InboxLimits, InboxRoom
from hostkit.types import InboundResult, SourceCheckpoint
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox
from tests.support import SteppedMonotonic

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

SOURCE = "imap.support"


async def test_backpressure_refuses_a_new_inbound_at_the_backlog_limit(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(3)) as sut:
        first = [await sut.inbox.accept(envelope(f"k{n}")) for n in range(3)]
        assert [r.disposition for r in first] == ["accepted"] * 3
        with pytest.raises(InboxFull) as refused:
            await sut.inbox.accept(envelope("k3"))
        assert isinstance(refused.value, RuntimeFailure)
        assert refused.value.reason == "backlog"
        assert refused.value.retryable
        assert refused.value.retry_after > 0
        assert "inbox_max_queued" in refused.value.message
        # Nothing of the refused one was stored; everything accepted before it was.
        records = await sut.inbox.records()
        assert sorted(r.platform_event_key for r in records) == ["k0", "k1", "k2"]
        assert {r.inbound_id for r in records} == {r.inbound_id for r in first}


async def test_backpressure_still_answers_a_duplicate_at_the_limit(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        a = await sut.inbox.accept(envelope("a"))
        await sut.inbox.accept(envelope("b"))
        again = await sut.inbox.accept(envelope("a"))
        assert (again.inbound_id, again.disposition) == (a.inbound_id, "duplicate")
        batch = await sut.inbox.accept_batch(
            [envelope("b"), envelope("a")], SourceCheckpoint(SOURCE, "2")
        )
        assert [r.disposition for r in batch] == ["duplicate", "duplicate"]
        assert await sut.inbox.checkpoint(SOURCE) == "2"


async def test_backpressure_refuses_a_batch_whole_and_keeps_its_checkpoint(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(3)) as sut:
        await sut.inbox.accept_batch([envelope("a"), envelope("b")], SourceCheckpoint(SOURCE, "2"))
        with pytest.raises(InboxFull):
            await sut.inbox.accept_batch(
                [envelope("b"), envelope("c"), envelope("d")], SourceCheckpoint(SOURCE, "4")
            )
        assert await sut.inbox.checkpoint(SOURCE) == "2"
        assert sorted(r.platform_event_key for r in await sut.inbox.records()) == ["a", "b"]
        # One new key fits: the duplicate beside it needs no room.
        receipts = await sut.inbox.accept_batch(
            [envelope("b"), envelope("c")], SourceCheckpoint(SOURCE, "3")
        )
        assert [r.disposition for r in receipts] == ["duplicate", "accepted"]
        assert await sut.inbox.checkpoint(SOURCE) == "3"


async def test_backpressure_counts_claimed_inbounds_until_they_end(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        await sut.inbox.accept(envelope("a"))
        await sut.inbox.accept(envelope("b"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("c"))
        await sut.inbox.complete(claimed, InboundResult("ignored"))
        accepted = await sut.inbox.accept(envelope("c"))
        assert accepted.disposition == "accepted"
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("d"))


async def test_backpressure_keeps_the_disk_reserve_of_a_local_database(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        stored = await sut.inbox.accept(envelope("a"))
        reserved = sut.another(owner="worker.b", limits=InboxLimits(100, 1 << 40))
        again = await reserved.accept(envelope("a"))
        assert (again.inbound_id, again.disposition) == (stored.inbound_id, "duplicate")
        if adapter != "sqlite":
            # PostgreSQL's disk is the server's, and the in-memory inbox has none.
            assert (await reserved.accept(envelope("b"))).disposition == "accepted"
            return
        with pytest.raises(InboxFull) as refused:
            await reserved.accept(envelope("b"))
        assert refused.value.reason == "disk"
        assert [r.platform_event_key for r in await sut.inbox.records()] == ["a"]


async def test_backpressure_lets_a_command_through_within_its_allowance(
    adapter: str, tmp_path: Path
) -> None:
    # An approval's answer must reach a full inbox: it ends work (often a turn waiting in
    # that backlog) instead of adding it. Commands pass within COMMAND_ALLOWANCE more.
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        for key in ("a", "b"):
            await sut.inbox.accept(envelope(key))
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("c"))
        answer = await sut.inbox.accept(envelope("cmd", kind="command", payload="approve K7QX2M"))
        assert answer.disposition == "accepted"
        # A batch with one ordinary inbound is still refused whole.
        with pytest.raises(InboxFull):
            await sut.inbox.accept_batch(
                [envelope("cmd2", kind="command", payload="deny K7QX2M"), envelope("d")],
                SourceCheckpoint(SOURCE, "9"),
            )
        keys = sorted(r.platform_event_key for r in await sut.inbox.records())
        assert keys == ["a", "b", "cmd"]
        if adapter == "sqlite":  # the only adapter that keeps a disk reserve
            # Short of the reserve but above half of it: an answer passes, a message not.
            stats = os.statvfs(tmp_path)
            free = stats.f_bavail * stats.f_frsize
            short = sut.another(owner="worker.b", limits=InboxLimits(100, free * 3 // 2))
            with pytest.raises(InboxFull):
                await short.accept(envelope("e"))
            answer = await short.accept(envelope("cmd3", kind="command", payload="deny K7QX2M"))
            assert answer.disposition == "accepted"
            # Below half of it: an answer is refused too (each still writes rows).
            below = sut.another(owner="worker.c", limits=InboxLimits(100, free * 4))
            with pytest.raises(InboxFull) as refused:
                await below.accept(envelope("cmd4", kind="command", payload="deny K7QX2M"))
            assert refused.value.reason == "disk"
    (tmp_path / "allowance").mkdir()
    async with open_inbox(adapter, tmp_path / "allowance", limits=InboxLimits(1)) as sut:
        await sut.inbox.accept(envelope("a"))
        for n in range(COMMAND_ALLOWANCE):
            await sut.inbox.accept(envelope(f"c{n}", kind="command", payload="deny K7QX2M"))
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("one-more", kind="command", payload="deny K7QX2M"))


async def test_a_host_keeps_32_mib_free_on_the_database_disk_unless_told_otherwise(
    adapter: str, tmp_path: Path
) -> None:
    # Not [host] artifact_reserve_mb (256 MiB, sized for terminal output): a database on a
    # small volume must still take messages.
    assert parse_config({}, base_dir=tmp_path).serve.inbox_disk_reserve_mb == 32
    told = parse_config({"serve": {"inbox_disk_reserve_mb": 0}}, base_dir=tmp_path)
    assert told.serve.inbox_disk_reserve_mb == 0


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param(lambda: InboxLimits(0), id="no-room"),
        pytest.param(lambda: InboxLimits(True), id="bool"),  # type: ignore[arg-type]
        pytest.param(lambda: InboxLimits(10, -1), id="negative-reserve"),
    ],
)
async def test_backpressure_limits_are_checked_when_made(
    adapter: str, tmp_path: Path, limits: object
) -> None:
    with pytest.raises(InvalidValue):
        limits()  # type: ignore[operator]


def counted_looks(sut: InboxUnderTest, monkeypatch: pytest.MonkeyPatch) -> list[InboxLimits]:
    """Every look readiness takes at the inbox's room from now on (``InboxStore.room``)."""
    looks: list[InboxLimits] = []
    room = sut.store.room

    async def counted(limits: InboxLimits) -> InboxRoom:
        looks.append(limits)
        return await room(limits)

    monkeypatch.setattr(sut.store, "room", counted)
    return looks


async def test_refusing_says_why_a_full_inbox_refuses_until_room_is_made(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readiness asks ``refusing`` at every probe: nothing is read while inbounds are
    stored, the backlog is looked at (up to its limit) at most every ``RECHECK_S`` while
    they are refused, and room made by the workers or a stored inbound ends it."""
    clock = SteppedMonotonic()
    monkeypatch.setattr(admission_module, "time", clock)
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        looks = counted_looks(sut, monkeypatch)
        for key in ("a", "b"):
            await sut.inbox.accept(envelope(key))
        assert await sut.inbox.refusing() is None
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("c"))
        assert await sut.inbox.refusing() == "inbox full: 2 queued (max 2)"
        # An answer passes within its allowance: the inbox still refuses messages.
        await sut.inbox.accept(envelope("cmd", kind="command", payload="approve K7QX2M"))
        assert await sut.inbox.refusing() == "inbox full: 2 queued (max 2)"
        assert len(looks) == 1
        for claimed in [await sut.inbox.claim() for _ in range(2)]:
            assert claimed is not None
            await sut.inbox.complete(claimed, InboundResult("ignored"))
        assert await sut.inbox.refusing() is not None  # the last look answers for a second
        clock.advance(RECHECK_S)
        assert await sut.inbox.refusing() is None  # one command left queued: room for one
        assert len(looks) == 2
        await sut.inbox.accept(envelope("c"))
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("d"))
        # A message stored shows room at once, with no look.
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.complete(claimed, InboundResult("ignored"))
        await sut.inbox.accept(envelope("d"))
        assert await sut.inbox.refusing() is None
        assert len(looks) == 2
        assert (await sut.store.room(InboxLimits(2))).refusal == "backlog"


async def test_a_refusal_while_a_look_is_under_way_keeps_the_inbox_refusing(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that found room is stale once an accept is refused after it began (another
    producer took the room meanwhile): it must not turn readiness back to ready."""
    clock = SteppedMonotonic()
    monkeypatch.setattr(admission_module, "time", clock)
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        other = sut.another(owner="worker.b", limits=InboxLimits(2))  # a poller, say
        for key in ("a", "b"):
            await sut.inbox.accept(envelope(key))
        with pytest.raises(InboxFull):
            await sut.inbox.accept(envelope("c"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.complete(claimed, InboundResult("ignored"))  # room for one
        clock.advance(RECHECK_S)
        found, go_on = anyio.Event(), anyio.Event()
        room = sut.store.room

        async def held(limits: InboxLimits) -> InboxRoom:
            seen = await room(limits)  # one queued: fits
            found.set()
            await go_on.wait()
            return seen

        monkeypatch.setattr(sut.store, "room", held)
        answers: list[str | None] = []

        async def probe() -> None:
            answers.append(await sut.inbox.refusing())

        async with anyio.create_task_group() as group:
            group.start_soon(probe)
            await found.wait()
            await other.accept(envelope("x"))  # the other producer fills the last place
            with pytest.raises(InboxFull):
                await sut.inbox.accept(envelope("y"))
            go_on.set()
        assert answers == ["inbox full (max 2 queued)"]
        assert await sut.inbox.refusing() is not None


async def test_an_inbox_opened_over_a_full_backlog_refuses_before_any_accept(
    adapter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Host restarted with a full backlog (or sharing an inbox others filled) must not
    answer ready until its first refusal: with no accept to tell, the first probe looks,
    and later ones look again at most every ``IDLE_RECHECK_S``."""
    clock = SteppedMonotonic()
    monkeypatch.setattr(admission_module, "time", clock)
    async with open_inbox(adapter, tmp_path, limits=InboxLimits(2)) as sut:
        filler = sut.another(owner="worker.b", limits=InboxLimits(2))
        for key in ("a", "b"):
            await filler.accept(envelope(key))
        assert await sut.inbox.refusing() == "inbox full: 2 queued (max 2)"
        for claimed in [await sut.inbox.claim() for _ in range(2)]:
            assert claimed is not None
            await sut.inbox.complete(claimed, InboundResult("ignored"))
        clock.advance(RECHECK_S)
        assert await sut.inbox.refusing() is None
        looks = counted_looks(sut, monkeypatch)
        for key in ("c", "d"):
            await filler.accept(envelope(key))  # another producer fills it again
        clock.advance(IDLE_RECHECK_S / 2)
        assert await sut.inbox.refusing() is None  # the last look answers a while
        assert looks == []
        clock.advance(IDLE_RECHECK_S / 2)
        assert await sut.inbox.refusing() == "inbox full: 2 queued (max 2)"
        assert len(looks) == 1
        # This inbox's own stored inbound proves room as a look would.
        claimed = await sut.inbox.claim()
        assert claimed is not None
        await sut.inbox.complete(claimed, InboundResult("ignored"))
        clock.advance(RECHECK_S)
        await sut.inbox.accept(envelope("e"))
        clock.advance(IDLE_RECHECK_S / 2)
        assert await sut.inbox.refusing() is None
        assert len(looks) == 1  # no look: the stored inbound was one


async def test_refusing_names_the_disk_reserve_of_a_local_database(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        reserved = sut.another(owner="worker.b", limits=InboxLimits(100, 1 << 40))
        if adapter != "sqlite":
            # PostgreSQL's disk is the server's, and the in-memory inbox has none.
            assert (await sut.store.room(InboxLimits(100, 1 << 40))).free_bytes is None
            return
        with pytest.raises(InboxFull):
            await reserved.accept(envelope("a"))
        why = await reserved.refusing()
        assert why is not None
        assert why.startswith("disk reserve: ")
        assert why.endswith(" MiB free (keeps 1048576 MiB)")
        assert await sut.inbox.refusing() is None  # another inbox, without that reserve
