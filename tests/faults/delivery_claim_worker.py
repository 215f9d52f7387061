"""A delivery worker process on a shared outbox, for the cross-process claim test (a script).

``python delivery_claim_worker.py '<json>'`` opens the store at ``db``, writes
``ready`` once open, waits for the file ``go`` (so the processes start
together), then claims batches of ``batch`` (lease ``lease_s``) until nothing
is due, marking each claim delivered after a short pause (the send). Each
claim is one JSON line ``{"pid", "intent_id", "token", "attempt"}`` in
``out``, written before its outcome.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio

from hostkit.store import RuntimeStore

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])


def append_line(record: dict[str, Any]) -> None:
    # One write of an O_APPEND file: lines of several processes never interleave.
    fd = os.open(OPTIONS["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


async def main() -> None:
    async with RuntimeStore.open(OPTIONS["db"]) as store:
        await anyio.Path(OPTIONS["ready"]).write_text(str(os.getpid()))
        with anyio.fail_after(60.0):
            # Another process creates the file: there is no event to wait on across processes.
            while not await anyio.Path(OPTIONS["go"]).exists():  # noqa: ASYNC110
                await anyio.sleep(0.005)
        while True:
            claimed = await store.delivery.claim(
                owner="suite",
                limit=OPTIONS["batch"],
                lease_s=OPTIONS["lease_s"],
                max_attempts=3,
                now=time.time(),
            )
            if not claimed:
                return
            for item in claimed:
                append_line(
                    {
                        "pid": os.getpid(),
                        "intent_id": item.intent.intent_id,
                        "token": item.claim_token,
                        "attempt": item.attempt,
                    }
                )
            # The send itself: while one process waits on its channel, the other claims.
            await anyio.sleep(0.02)
            for item in claimed:
                await store.delivery.delivered(item, now=time.time())


if __name__ == "__main__":
    anyio.run(main)
