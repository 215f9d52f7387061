"""Clause: under a bounded load, ``hostkit serve`` loses nothing and duplicates nothing.

"A load test on loopback, bounded in count and time: N concurrent signed
webhooks per second for a fixed duration against ``hostkit serve``; nothing
lost, nothing duplicated."

10 signed generic webhooks per second for 3 seconds, each event sent twice
(the second a platform's redelivery, sent while the first may still be in
flight), against a real ``hostkit serve`` subprocess whose webhook channel
delivers to a signed WebhookReceiver on loopback. Every event must end as
exactly one inbox row, one turn and one delivered intent, received once.
bench/serve_bench.py measures the same path with latency figures.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import anyio
import httpx
import pytest

from tests.faults._serve_proc import (
    HOOK,
    HOOK_SECRET,
    eventually,
    hook_channel,
    hook_event,
    post_hook,
    query,
    serving,
    write_config,
)
from tests.platforms import WebhookReceiver

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RATE = 10
DURATION_S = 3


async def test_serve_under_load_answers_each_event_exactly_once(tmp_path: Path) -> None:
    count = RATE * DURATION_S
    database = tmp_path / "hostkit.db"
    statuses: list[tuple[int, int, str]] = []  # (event, HTTP status, disposition)
    async with (
        WebhookReceiver.running(secret=HOOK_SECRET) as receiver,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=64)) as client,
    ):
        config = write_config(
            tmp_path,
            # One model step per turn: a second turn for any event would run out the script.
            script=[{"reply": "ok"}] * count,
            channels={HOOK: hook_channel(receiver.deliver_url)},
            serve={"inbox_concurrency": 8, "drain_timeout_s": 10.0},
        )
        async with serving(config) as served:

            async def send(event: int) -> None:
                body = hook_event(f"ev-{event}", f"question {event}", conversation=f"c{event}")
                for _ in range(2):  # the event, then its redelivery
                    response = await post_hook(client, served.url, body)
                    statuses.append((event, response.status_code, response.json().get("status")))

            start = time.monotonic()
            async with anyio.create_task_group() as senders:
                for event in range(count):
                    await anyio.sleep(max(0.0, start + event / RATE - time.monotonic()))
                    senders.start_soon(send, event)

            async def all_delivered() -> bool:
                rows = await query(database, "SELECT status FROM outbox")
                return len(rows) >= count and all(s == "delivered" for (s,) in rows)

            await eventually(all_delivered, what="every answer to be delivered", timeout_s=30)
            served.signal(signal.SIGTERM)
            assert await served.exit_code(20) == 0, served.output()[-2000:]

    assert len(statuses) == 2 * count
    assert all(code == 200 for _, code, _ in statuses), statuses
    dispositions = Counter(status for _, _, status in statuses)
    assert dispositions == {"accepted": count, "duplicate": count}
    assert Counter(event for event, _, status in statuses if status == "accepted") == Counter(
        range(count)
    )
    inbox = await query(database, "SELECT platform_event_key, state, result_kind FROM inbox")
    assert sorted(key for key, _, _ in inbox) == sorted(f"ev-{n}" for n in range(count))
    assert {(state, kind) for _, state, kind in inbox} == {("completed", "turn")}
    turns = await query(database, "SELECT request_id, status FROM turns")
    assert len(turns) == count
    assert len({request for request, _ in turns}) == count
    assert {status for _, status in turns} == {"completed"}
    # Delivered once each: one key per intent, one body per key, one per conversation.
    assert len(receiver.deliveries) == count
    assert all(len(bodies) == 1 for bodies in receiver.deliveries.values())
    conversations = Counter(body["conversation"] for body in receiver.bodies())
    assert conversations == Counter(f"c{n}:s1" for n in range(count))
