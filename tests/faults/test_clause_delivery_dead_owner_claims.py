"""Clause: a SIGKILLed Host's delivery claim is taken over at once, not when its lease ends.

A real process (``_delivery_runtime_proc.py``) claims the outbox intent of a
finished turn under a 60-second lease and is SIGKILLed mid-send. A runtime
that starts serving afterwards (a restarted daemon), or one that already
served beside it (a peer on the same database), finds the claim's owner
provably dead and delivers the intent within seconds: well before the lease
would expire, under the intent's one idempotency key.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.delivery import DeliveryRuntime
from hostkit.delivery import _runtime as runtime_module
from hostkit.store import RuntimeStore
from hostkit.types import DeliveryIntent
from tests.contract._delivery_adapters import finish_routed_turns
from tests.support import child_process, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROC = Path(__file__).with_name("_delivery_runtime_proc.py")
LEASE_S = 60.0
# Far below the lease: a runtime that waited for the lease would miss it.
SETTLE_WITHIN_S = 20.0


def command(db: Path, marker: anyio.Path) -> list[str]:
    options = {"db": str(db), "marker": str(marker), "lease_s": LEASE_S}
    return [sys.executable, str(PROC), json.dumps(options)]


class Accepting:
    """The platform once it answers: records each send's idempotency key."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        self.keys.append(idempotency_key)


async def seeded(db: Path) -> str:
    async with RuntimeStore.open(db) as store:
        (intent_id,) = await finish_routed_turns(store, 1)
    return intent_id


async def intent(store: RuntimeStore, intent_id: str) -> DeliveryIntent:
    row = await store.delivery.intent(intent_id)
    assert row is not None
    return row


async def test_a_restarted_runtime_delivers_a_killed_runtimes_claim_before_its_lease_ends(
    tmp_path: Path,
) -> None:
    db = tmp_path / "hostkit.db"
    intent_id = await seeded(db)
    marker = anyio.Path(tmp_path / "sending")
    await sigkill_when(command(db, marker), marker.exists, what="the send started")
    killed_at = time.time()
    platform = Accepting()
    async with RuntimeStore.open(db) as store:
        held = await intent(store, intent_id)
        assert (held.status, held.attempts) == ("sending", 1)
        assert held.next_attempt_at is not None
        assert held.next_attempt_at - killed_at > LEASE_S - SETTLE_WITHIN_S, "the lease holds"
        runtime = DeliveryRuntime(store.delivery, lambda alias: platform)
        with anyio.fail_after(SETTLE_WITHIN_S):
            assert await runtime.drain() == 1
        done = await intent(store, intent_id)
    assert (done.status, done.attempts) == ("delivered", 2)
    assert done.delivered_at is not None
    assert done.delivered_at < held.next_attempt_at, "delivered before the dead lease ended"
    # The same key as the killed send's: a platform that got that one drops this repeat.
    assert platform.keys == [await marker.read_text()]


async def test_a_serving_runtime_delivers_a_peer_killed_while_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several daemons on one database: a peer SIGKILLed while this runtime already serves
    (its start-up sweep found the peer alive) is found dead by the next sweep."""
    monkeypatch.setattr(runtime_module, "DEAD_CLAIMS_EVERY_S", 0.5)
    db = tmp_path / "hostkit.db"
    intent_id = await seeded(db)
    marker = anyio.Path(tmp_path / "sending")
    platform = Accepting()
    async with (
        child_process(command(db, marker)) as peer,
        RuntimeStore.open(db) as store,
    ):
        with anyio.fail_after(60):
            while not await marker.exists():
                assert peer.returncode is None, "the peer exited before it sent"
                await anyio.sleep(0.02)
        async with DeliveryRuntime(store.delivery, lambda alias: platform, idle_poll_s=0.1):
            await anyio.sleep(0.8)  # serving and sweeping, the peer alive: its claim stays
            assert (await intent(store, intent_id)).status == "sending"
            assert platform.keys == []
            peer.send_signal(signal.SIGKILL)
            await peer.wait()
            with anyio.fail_after(SETTLE_WITHIN_S):
                # The runtime delivers in its own task: polled, as an operator looks.
                while (await intent(store, intent_id)).status != "delivered":  # noqa: ASYNC110
                    await anyio.sleep(0.1)
        done = await intent(store, intent_id)
    assert done.attempts == 2
    assert platform.keys == [await marker.read_text()]
