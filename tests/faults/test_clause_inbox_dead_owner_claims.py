"""Clause: a SIGKILLed Host's inbox claim is taken over at once, not when its lease runs out.

A real worker process (``_inbox_worker_proc.py``) claims the inbound under a
60-second lease and is SIGKILLed before its turn starts. The restarted
worker process finds the claim's owner provably dead when it starts serving
and settles the inbound within seconds: well before the lease would expire.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.host import Host
from hostkit.inbox import _worker as worker_module
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import InboundEnvelope, InboundRecord
from tests.hosts import config
from tests.support import child_process, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROC = Path(__file__).with_name("_inbox_worker_proc.py")
LEASE_S = 60.0
# Far below the lease: a restarted worker that waited for the lease would miss it.
SETTLE_WITHIN_S = 20.0


def command(**options: Any) -> list[str]:
    return [sys.executable, str(PROC), json.dumps({"lease_s": LEASE_S, **options})]


async def host_call(root: Path, text: str | None = None, inbound_id: str = "") -> Any:
    async with Host.open(config(root), capabilities=capabilities(ScriptedModel([]))) as host:
        if text is None:
            return await host.inbox.record(inbound_id)
        receipt = await host.inbox.accept(
            InboundEnvelope(
                channel_instance_id="telegram.support",
                platform_event_key="update-1",
                conversation_key="chat-1",
                principal_key="alice",
                authenticated_by="bot_token",
                received_at=time.time(),
                payload=text,
            )
        )
        return receipt.inbound_id


async def test_a_restarted_worker_settles_a_killed_workers_claim_before_its_lease_ends(
    tmp_path: Path,
) -> None:
    inbound_id = await host_call(tmp_path, "hello after a SIGKILL")
    marker = anyio.Path(tmp_path / "stalled")
    await sigkill_when(
        command(root=str(tmp_path), mode="stall", marker=str(marker)),
        marker.exists,
        what="the claim was taken and its turn id reserved",
    )
    killed_at = time.time()
    claimed: InboundRecord = await host_call(tmp_path, inbound_id=inbound_id)
    assert claimed.state == "claimed"
    assert claimed.due_at is not None
    assert claimed.due_at - killed_at > LEASE_S - SETTLE_WITHIN_S, "the lease still holds"

    results = tmp_path / "results.json"
    with anyio.fail_after(SETTLE_WITHIN_S):
        done = await anyio.run_process(
            command(root=str(tmp_path), mode="serve", until=inbound_id, results=str(results)),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    record: InboundRecord = await host_call(tmp_path, inbound_id=inbound_id)
    assert (record.state, record.result_kind, record.attempt) == ("completed", "turn", 2)
    assert record.updated_at < claimed.due_at, "settled before the dead claim's lease ended"
    assert json.loads(results.read_text()) == {"calls": 1}


async def test_a_serving_worker_settles_a_peer_killed_while_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several daemons on one database: a peer SIGKILLed while this worker already serves
    (its start-up sweep found the peer alive) is found dead by the next sweep."""
    monkeypatch.setattr(worker_module, "DEAD_CLAIMS_EVERY_S", 0.5)
    inbound_id = await host_call(tmp_path, "hello from a peer that dies")
    marker = anyio.Path(tmp_path / "stalled")
    model = ScriptedModel([Reply("answered by the survivor")], repeat_last=True)
    async with child_process(command(root=str(tmp_path), mode="stall", marker=str(marker))) as peer:
        with anyio.fail_after(60):
            while not await marker.exists():
                assert peer.returncode is None, "the peer exited before it claimed"
                await anyio.sleep(0.02)
        async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
            async with host.inbox_worker(idle_poll_s=0.1):
                await anyio.sleep(0.3)  # serving, the peer alive: its claim stays
                assert (await host.inbox.record(inbound_id)).state == "claimed"
                peer.send_signal(signal.SIGKILL)
                await peer.wait()
                with anyio.fail_after(SETTLE_WITHIN_S):
                    # The worker settles it in its own task: polled, as an operator looks.
                    while (await host.inbox.record(inbound_id)).state != "completed":  # noqa: ASYNC110
                        await anyio.sleep(0.1)
            record = await host.inbox.record(inbound_id)
    assert (record.result_kind, record.attempt) == ("turn", 2)
    assert model.requests, "the survivor ran the turn"
