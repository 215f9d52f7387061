"""DeliveryStore clause: delivery workers in separate processes on one database never hold the
same outbox intent at once.

Two worker processes (``delivery_claim_worker.py``), each with its own store open on the file,
start together and drain 200 intents committed by real finished turns, in batches of different
sizes. The leases outlive the test, so any intent claimed twice would be a double hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.store import RuntimeStore
from hostkit.types import DeliveryCounts
from tests.contract._delivery_adapters import finish_routed_turns

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("delivery_claim_worker.py")
STARTUP_S = 60.0
INTENTS = 200


async def run_together(tmp_path: Path, workers: list[dict[str, Any]]) -> None:
    """Start every worker, let them all open the store, then release them at once."""
    go = tmp_path / "go"
    for index, options in enumerate(workers):
        options.update(ready=str(tmp_path / f"ready-{index}"), go=str(go))
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def run(options: dict[str, Any]) -> None:
        with anyio.fail_after(STARTUP_S * 2):
            argv = [sys.executable, str(WORKER), json.dumps(options)]
            finished.append(await anyio.run_process(argv, check=False))

    async with anyio.create_task_group() as group:
        for options in workers:
            group.start_soon(run, options)
        with anyio.fail_after(STARTUP_S):
            for options in workers:
                # The workers are other processes: poll for their ready files.
                while not await anyio.Path(options["ready"]).exists():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        await anyio.Path(go).write_text("go")
    assert len(finished) == len(workers)
    for done in finished:
        assert done.returncode == 0, done.stderr.decode()[-2000:]


async def test_two_processes_never_claim_the_same_intent(tmp_path: Path) -> None:
    db, out = tmp_path / "hostkit.db", tmp_path / "claims.jsonl"
    async with RuntimeStore.open(db, synchronous="NORMAL") as store:
        ids = await finish_routed_turns(store, INTENTS, concurrent=True)
    assert len(set(ids)) == INTENTS
    await run_together(
        tmp_path,
        [{"db": str(db), "out": str(out), "batch": batch, "lease_s": 600.0} for batch in (3, 7)],
    )
    claims = [json.loads(line) for line in (await anyio.Path(out).read_text()).splitlines()]
    per_intent = Counter(c["intent_id"] for c in claims)
    assert set(per_intent) == set(ids)
    assert set(per_intent.values()) == {1}
    assert {c["attempt"] for c in claims} == {1}
    assert len({c["token"] for c in claims}) == INTENTS
    assert len({c["pid"] for c in claims}) == 2, "one process took everything: no race happened"
    async with RuntimeStore.open(db) as store:
        assert await store.delivery.counts() == DeliveryCounts(delivered=INTENTS)
        assert await store.delivery.next_due() is None
