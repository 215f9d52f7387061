"""ChannelInbox clause: the claims of a provably dead owner are taken over at once.

A Host killed mid-claim leaves its claims ``claimed`` until their leases run
out. ``recover_dead_claims`` applies the turn-lease rule ("free when expired
OR its owner is provably dead") to inbox claims: a dead owner's claims are
due now, a live, remote or unparseable owner's are not. The claim token stays
(the dead token is refused once the row is reclaimed) and the attempt stays
spent (a message that kills its Host every time still reaches its dead
letter). ``InboxWorker`` recovers when it starts serving. The clock never
moves in these tests: nothing here waits for a lease to expire.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.errors import InvalidValue
from hostkit.inbox import InboxWorker, RetryPolicy
from hostkit.store import ATTEMPTS_EXHAUSTED, MAX_CLAIM_OWNERS, LeaseOwner
from hostkit.types import (
    ClaimedInbound,
    InboundFailure,
    InboundResult,
    TurnRequest,
    TurnResult,
)
from tests.contract._inbox_adapters import ADAPTERS, InboxUnderTest, envelope, open_inbox
from tests.support import dead_owner, this_process

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]

POLICY = RetryPolicy(max_attempts=2, lease_s=60.0)
# On another machine: only its lease expiry may end its claims.
REMOTE = LeaseOwner("another-machine", 4242, 1.0, "remote-instance").encode()


async def claim_as(sut: InboxUnderTest, owner: str) -> ClaimedInbound:
    claimed = await sut.another(owner=owner, policy=POLICY).claim()
    assert claimed is not None
    return claimed


@pytest.mark.parametrize("how", ["reused_pid", "exited_pid"])
async def test_a_dead_owners_claim_is_reclaimable_at_once_a_live_ones_is_not(
    adapter: str, how: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        dead = await dead_owner("host-dead", how)
        live = (await this_process("host-live")).encode()
        held: dict[str, ClaimedInbound] = {}
        for n, owner in enumerate((dead, live, REMOTE, "worker.plain")):
            await sut.inbox.accept(envelope(f"evt-{n}", channel=f"telegram.c{n}"))
            held[owner] = await claim_as(sut, owner)
        assert await sut.store.claimed_owners() == tuple(sorted(held))
        successor = sut.another(owner="worker.successor", policy=POLICY)
        assert await successor.claim() is None, "every lease still holds"

        assert await successor.recover_dead_claims() == 1
        record = await sut.inbox.record(held[dead].inbound_id)
        assert record is not None
        assert (record.state, record.attempt, record.due_at) == ("claimed", 1, sut.clock.now)
        for owner in (live, REMOTE, "worker.plain"):
            kept = await sut.inbox.record(held[owner].inbound_id)
            assert kept is not None
            assert (kept.state, kept.due_at) == ("claimed", held[owner].lease_expires_at)

        taken = await successor.claim_batch(4)
        assert [item.inbound_id for item in taken] == [held[dead].inbound_id]
        assert (taken[0].attempt, taken[0].claim_token != held[dead].claim_token) == (2, True)
        assert await successor.recover_dead_claims() == 0, "the dead owner holds nothing now"
        assert dead not in await sut.store.claimed_owners()


async def test_the_dead_owners_attempt_stays_spent_and_exhaustion_dead_letters(
    adapter: str, tmp_path: Path
) -> None:
    """A message that kills every Host that claims it ends as a dead letter, not a loop."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        inbound_id = (await sut.inbox.accept(envelope("poison"))).inbound_id
        for crash in (1, 2):
            claimed = await claim_as(sut, await dead_owner(f"host-{crash}"))
            assert claimed.attempt == crash
            assert await sut.inbox.recover_dead_claims() == 1
        assert await sut.inbox.claim() is None
        record = await sut.inbox.record(inbound_id)
        assert record is not None
        assert (record.state, record.attempt, record.failure_code) == (
            "dead_lettered",
            2,
            ATTEMPTS_EXHAUSTED,
        )
        assert await sut.store.claimed_owners() == ()


async def test_a_late_end_by_the_dead_token_is_refused(adapter: str, tmp_path: Path) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        stale = await claim_as(sut, await dead_owner("host-dead"))
        assert await sut.inbox.recover_dead_claims() == 1
        fresh = await sut.inbox.claim()
        assert fresh is not None
        assert fresh.inbound_id == stale.inbound_id
        late = sut.another(owner="worker.late", policy=POLICY)
        done = await late.complete(stale, InboundResult("ignored", detail="late"))
        failed = await late.fail(stale, InboundFailure("transient", "late"))
        assert (done.disposition, failed.disposition) == ("stale_claim", "stale_claim")
        assert (await sut.inbox.complete(fresh, InboundResult("ignored"))).disposition == (
            "completed"
        )
        after = await late.complete(stale, InboundResult("ignored", detail="late"))
        assert after.disposition == "already_terminal"
        record = await sut.inbox.record(stale.inbound_id)
        assert record is not None
        assert (record.state, record.result_kind, record.attempt) == ("completed", "ignored", 2)


async def test_recovery_pages_through_every_owner(adapter: str, tmp_path: Path) -> None:
    """More owners than one page: the dead one on the second page is still found."""
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        live = [f"!live-{n:03}" for n in range(MAX_CLAIM_OWNERS)]  # "!" sorts before hosts
        dead = await dead_owner("host-dead")
        keys = [envelope(f"evt-{n}") for n in range(len(live) + 1)]
        await sut.inbox.accept_batch(keys[:50])
        await sut.inbox.accept_batch(keys[50:])
        for owner in [*live, dead]:
            await claim_as(sut, owner)
        first = await sut.store.claimed_owners(limit=MAX_CLAIM_OWNERS)
        assert first == tuple(live)
        assert await sut.store.claimed_owners(after=first[-1]) == (dead,)
        assert await sut.inbox.recover_dead_claims() == 1
        again = await sut.inbox.claim()
        assert again is not None
        assert (again.envelope.platform_event_key, again.attempt) == (f"evt-{len(live)}", 2)


async def test_bad_owner_arguments_are_refused_and_change_nothing(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1"))
        dead = await dead_owner("host-dead")
        claimed = await claim_as(sut, dead)
        now = sut.clock.now
        bad_calls = [
            sut.store.expire_claims([], now=now),
            sut.store.expire_claims(dead, now=now),  # a str, not a sequence of owners
            sut.store.expire_claims([dead, ""], now=now),
            sut.store.expire_claims([f"o{n}" for n in range(MAX_CLAIM_OWNERS + 1)], now=now),
            sut.store.expire_claims([dead], now=float("nan")),
            sut.store.claimed_owners(limit=0),
            sut.store.claimed_owners(limit=MAX_CLAIM_OWNERS + 1),
            sut.store.claimed_owners(after=""),
        ]
        for call in bad_calls:
            with pytest.raises(InvalidValue):
                await call
        record = await sut.inbox.record(claimed.inbound_id)
        assert record is not None
        assert (record.state, record.due_at) == ("claimed", claimed.lease_expires_at)


async def test_a_worker_starting_to_serve_takes_a_dead_owners_claim_over(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path, policy=POLICY) as sut:
        await sut.inbox.accept(envelope("evt-1", kind="command", payload="approve ABC"))
        claimed = await claim_as(sut, await dead_owner("host-dead"))
        answered: list[int] = []

        async def run_command(item: ClaimedInbound) -> InboundResult:
            answered.append(item.attempt)
            return InboundResult("command", detail="answered")

        async def run_turn(request: TurnRequest) -> TurnResult:
            raise AssertionError("a command runs no turn")

        worker = InboxWorker(
            sut.inbox, run_turn, run_command=run_command, idle_poll_s=0.05, clock=sut.clock
        )
        with anyio.fail_after(10):
            assert await worker.drain() == 1
        assert answered == [2]
        record = await sut.inbox.record(claimed.inbound_id)
        assert record is not None
        assert (record.state, record.result_kind) == ("completed", "command")
