"""A renewal that stalls to its limit leaves a margin: the retry never starts at the expiry.

A busy store can stall one renewal for as long as it is allowed to take. The
retry must then come at once, with a safe part of the lease still left, so no
other Host (recovery, admission) or inbox worker (claim) takes over in
between. Every keeper is tested over the real SQLite store, with its renewal
wrapped to stall once: the session lease's heartbeat, the inbox claim's and
the delivery claim's (a slow send while a rival runtime keeps claiming).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest

from hostkit.delivery import DeliveryPolicy
from hostkit.effects import ToolContext, tool
from hostkit.host import Host
from hostkit.inbox import ChannelInbox, InboxWorker, RetryPolicy
from hostkit.store import RuntimeStore, SessionLease
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ClaimedDelivery, TurnRequest, TurnResult
from tests.contract._delivery_hosts import SLACK_TOKEN, channel_host, channel_tables, routed_turn
from tests.contract._inbox_adapters import envelope
from tests.hosts import config, request
from tests.platforms import FakeSlack

pytestmark = pytest.mark.anyio

# The first try starts with 2/3 of the lease left and stalls a third of that, so the retry
# starts with 4/9 of it: TTL/9 above the margin is what scheduling delay may take from it
# before the check below fails (two thirds of a second at 6 s; a loaded two-core machine).
TTL = 6.0
# What every renewal try must start with: a third of the lease.
MARGIN = TTL / 3
# Outlives the lease by 2 s: three tries at least (at 3/9, 5/9 and 8/9 of the lease).
WORK_S = TTL + 2.0
STALL_S = 30.0  # far past any renewal's limit: the try is cut off at its bound


async def test_a_stalled_session_renewal_is_retried_with_a_margin_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hostkit.turns")

    @tool("slow.work")
    async def slow_work(ctx: ToolContext) -> str:
        """Outlives the session lease."""
        await anyio.sleep(WORK_S)
        return "worked"

    cfg = config(tmp_path)
    cfg = cfg.model_copy(update={"host": cfg.host.model_copy(update={"session_lease_ttl_s": TTL})})
    model = ScriptedModel([CallTools(("slow_work", {})), Reply("done")])
    async with (
        Host.open(cfg, capabilities=capabilities(model, tools=[slow_work])) as host,
        Host.open(cfg, capabilities=capabilities(ScriptedModel([]))) as other,
    ):
        real = host.store.turns.renew
        left_at_try: list[float] = []

        async def stalls_once(lease: SessionLease) -> bool:
            current = await host.store.turns.session_lease(lease.session_id)
            left_at_try.append(-1.0 if current is None else current.expires_at - time.time())
            if len(left_at_try) == 1:
                await anyio.sleep(STALL_S)  # a busy store: cancelled at the try's limit
            return await real(lease)

        host.store.turns.renew = stalls_once  # type: ignore[method-assign]
        results: list[TurnResult] = []
        recovered: list[object] = []

        async def run() -> None:
            results.append(await host.turns.run(request("work please")))

        with anyio.fail_after(WORK_S + 10):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                # Another Host's recovery, as any admission elsewhere would run it.
                while not results:
                    recovered.extend(await other.store.turns.recover())
                    await anyio.sleep(0.01)
                group.cancel_scope.cancel()

    assert all(left >= MARGIN for left in left_at_try), left_at_try
    assert len(left_at_try) >= 3, left_at_try
    assert recovered == []
    assert results[0].outcome == "completed", results[0].error
    assert results[0].text == "done"
    # The stalled try is said once, with its reason (a timeout has no text of its own),
    # and so is the renewal that worked again.
    said = [r.getMessage() for r in caplog.records if "lease renew" in r.getMessage()]
    turn_id = results[0].turn_id
    assert said == [
        f"turn {turn_id}: lease renewal failed (1 in a row): the store did not answer in time",
        f"turn {turn_id}: lease renewed again after 1 failed tries",
    ]


async def test_a_stalled_claim_renewal_is_retried_with_a_margin_left(tmp_path: Path) -> None:
    policy = RetryPolicy(max_attempts=2, lease_s=TTL)
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        inbox = ChannelInbox.on_store(store, policy=policy, owner="worker.a")
        rival = ChannelInbox.on_store(store, policy=policy, owner="worker.b")
        await inbox.accept(envelope("evt-1", received_at=time.time()))
        real = store.inbox.extend
        left_at_try: list[float] = []

        async def stalls_once(inbound_id: str, claim_token: str, **options: float) -> float | None:
            record = await inbox.record(inbound_id)
            left_at_try.append(-1.0 if record is None else record.due_at - time.time())
            if len(left_at_try) == 1:
                await anyio.sleep(STALL_S)  # a busy store: cancelled at the try's limit
            return await real(inbound_id, claim_token, **options)

        store.inbox.extend = stalls_once  # type: ignore[method-assign]
        taken: list[object] = []
        running, finished = anyio.Event(), anyio.Event()

        async def run_turn(turn: TurnRequest) -> TurnResult:
            running.set()
            await anyio.sleep(WORK_S)
            return TurnResult(
                request_id=turn.request_id,
                turn_id="turn_1",
                session_id="sess_1",
                core_id=turn.core_id,
                core_revision="r1",
                outcome="completed",
                text="ok",
                durable_result_ref="turn_1",
            )

        async def rival_claims() -> None:
            await running.wait()  # the worker holds the claim: another may take it only if lost
            while not finished.is_set():
                claimed = await rival.claim()
                if claimed is not None:
                    taken.append(claimed)
                await anyio.sleep(0.01)

        worker = InboxWorker(inbox, run_turn, idle_poll_s=0.05)
        with anyio.fail_after(WORK_S + 10):
            async with anyio.create_task_group() as group:
                group.start_soon(rival_claims)
                handled = await worker.drain()
                finished.set()
    assert all(left >= MARGIN for left in left_at_try), left_at_try
    assert len(left_at_try) >= 3, left_at_try
    assert taken == []
    assert handled == 1


async def test_a_stalled_delivery_renewal_is_retried_with_a_margin_left(tmp_path: Path) -> None:
    policy = DeliveryPolicy(lease_s=TTL, jitter=0.0)
    async with FakeSlack.running(token=SLACK_TOKEN) as slack:
        slack.slow_next(1, delay_s=WORK_S)  # the send outlives the lease
        async with channel_host(tmp_path, channel_tables(slack=slack.api_base)) as host:
            (intent_id,) = (await routed_turn(host, "slack-acme", {"channel": "C1"})).deliveries
            real = host.store.delivery.extend
            left_at_try: list[float] = []

            async def stalls_once(claimed: ClaimedDelivery, **options: float) -> ClaimedDelivery:
                row = await host.store.delivery.intent(claimed.intent.intent_id)
                left = -1.0 if row is None or row.next_attempt_at is None else row.next_attempt_at
                left_at_try.append(left - time.time())
                if len(left_at_try) == 1:
                    await anyio.sleep(STALL_S)  # a busy store: cancelled at the try's limit
                return await real(claimed, **options)

            host.store.delivery.extend = stalls_once  # type: ignore[method-assign]
            holder = host.delivery_runtime(policy=policy)
            rival = host.delivery_runtime(policy=policy)
            finished = anyio.Event()
            rival_sent = 0

            async def rival_drains() -> None:
                nonlocal rival_sent
                await slack.wait_for_requests(1)  # held: the rival may take it only if lost
                while not finished.is_set():
                    rival_sent += await rival.drain()
                    await anyio.sleep(0.01)

            with anyio.fail_after(WORK_S + 10):
                async with anyio.create_task_group() as group:
                    group.start_soon(rival_drains)
                    sent = await holder.drain()
                    finished.set()
            row = await host.store.delivery.intent(intent_id)
    assert all(left >= MARGIN for left in left_at_try), left_at_try
    assert len(left_at_try) >= 3, left_at_try
    assert (sent, rival_sent) == (1, 0)
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 1)
    assert len(slack.requests) == 1
