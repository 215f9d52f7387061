"""Clause: on PostgreSQL no Host's own wall clock decides a lease, a claim or a due time.

Hosts on several machines share the store; a machine's wall clock can step at any moment
after the store checked it at open (NTP after a boot with a wrong RTC, a resumed VM,
``date -s``). The store's clock is the server's (``RuntimeStore.now``), so a Host
process whose clock stepped (``host_clock_worker.py``: its ``time.time`` is wrong for
everything in it that reads the wall clock):

- takes no send over from a live Host still renewing its claim (the intent is sent once);
- does not, by looking once at a dead Host's session, keep it from everybody for as long
  as its clock ran ahead (the lapse it notices is on the server's clock);
- sends an answer at once that the server made due, however far behind its clock is.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.delivery import DeliveryPolicy, DeliveryRuntime
from hostkit.store import Admitted, LeaseOwner, RuntimeStore, SessionBusy
from tests.contract._delivery_adapters import finish_routed_turns
from tests.contract.test_store_turns import REMOTE, admission, conversation
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("host_clock_worker.py")
# A bound for a hang, not an expected duration (a Python process importing hostkit on a
# loaded two-core machine takes seconds).
WORKER_TIMEOUT_S = 90.0
TTL_S = 2.0


async def stepped_host(**options: Any) -> dict[str, Any]:
    """Run ``host_clock_worker.py`` with ``options``; what it printed."""
    with anyio.fail_after(WORKER_TIMEOUT_S):
        done = await anyio.run_process(
            [sys.executable, str(WORKER), json.dumps(options)],
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    found: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return found


class _Held:
    """A channel whose sends wait until the test lets them through."""

    def __init__(self) -> None:
        self.sent = 0
        self.sending = anyio.Event()
        self.through = anyio.Event()

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        self.sending.set()
        await self.through.wait()
        self.sent += 1


async def test_a_host_whose_clock_stepped_ahead_takes_no_send_over_from_a_live_holder(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    async with RuntimeStore.open_postgres(url) as store:
        (intent_id,) = await finish_routed_turns(store, 1)
        channel = _Held()
        runtime = DeliveryRuntime(
            store.delivery,
            lambda alias: channel,
            policy=DeliveryPolicy(lease_s=60.0, jitter=0.0),
            idle_poll_s=0.05,
            grace_s=0.1,
        )
        async with runtime:
            with anyio.fail_after(30):
                await channel.sending.wait()
            # A peer whose clock stepped 90 s ahead: past this live claim's lease, by it.
            assert await stepped_host(url=url, role="drain", step_s=90.0) == {
                "settled": 0,
                "sent": 0,
            }
            channel.through.set()
            with anyio.fail_after(30):
                while not runtime.delivered:  # noqa: ASYNC110 (the send under way settles)
                    await anyio.sleep(0.01)
            runtime.stop()
        row = await store.delivery.intent(intent_id)
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 1)
    assert channel.sent == 1


async def test_one_look_from_a_clock_ahead_does_not_keep_a_dead_hosts_session(
    postgres_cluster: PostgresCluster,
) -> None:
    """A Host on another machine holds the session and vanishes; a peer whose clock is
    600 s ahead looks once (noticing the lapse); a Host with a true clock then takes the
    session over a ttl after that notice, not 600 s later."""
    url = await postgres_cluster.create_database()
    async with (
        RuntimeStore.open_postgres(url) as store,
        AuthorityResolver.bind(store) as resolver,
    ):
        scope = await conversation(resolver, "c-vanished")
        first = await store.turns.admit(admission(scope), owner=REMOTE, ttl_s=TTL_S)
        assert isinstance(first, Admitted)
        await anyio.sleep(first.lease.expires_at - time.time() + 0.2)  # its lease lapses
        peek = await stepped_host(url=url, role="admit", conversation="c-vanished", step_s=600.0)
        assert peek == {"outcome": "SessionBusy"}
        owner = await anyio.to_thread.run_sync(LeaseOwner.current, "true-clock-host")
        with anyio.fail_after(TTL_S * 5):  # a ttl after the notice, not 600 s
            outcome = await store.turns.admit(admission(scope), owner=owner, ttl_s=TTL_S)
            while isinstance(outcome, SessionBusy):
                await anyio.sleep(0.1)
                outcome = await store.turns.admit(admission(scope), owner=owner, ttl_s=TTL_S)
    assert isinstance(outcome, Admitted)


async def test_an_answer_the_server_made_due_is_sent_at_once_by_a_host_whose_clock_is_behind(
    postgres_cluster: PostgresCluster,
) -> None:
    url = await postgres_cluster.create_database()
    found = await stepped_host(url=url, role="drain", step_s=-20.0, reply="inb_clock_behind")
    assert found == {"settled": 1, "sent": 1}
