"""A process on a shared inbox database, for the inbox store fault tests (a script, not collected).

``python inbox_store_worker.py '<json>'`` opens the store at ``db``, writes
``ready`` once open, waits for the file ``go`` (so several processes start
their work together), then runs ``mode``:

- ``accept``: ``tasks`` concurrent accepts of the one envelope ``key``; each
  receipt is one JSON line ``{"pid", "inbound_id", "disposition"}`` in ``out``.
- ``claim``: claims batches of ``batch`` (lease ``lease_s``) until no inbound
  is ready or claimed (by any process), completing each claim after holding it
  ``hold_s`` (default 0); each claim is one line ``{"pid", "inbound_id",
  "token", "attempt", "at"}`` in ``out``, written before it is completed, and
  with ``done_out`` the moment its completion starts is one line
  ``{"inbound_id", "at"}`` there.
- ``ioerror``: accepts ``batch`` envelopes with checkpoint ``c2`` while the
  process may not write files past ``fsize`` bytes (``RLIMIT_FSIZE``: the
  kernel refuses the write, SQLite gets a real I/O error), then lifts the
  limit and accepts the same batch again; one JSON line of what happened.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from typing import Any

import anyio

from hostkit.errors import StoreError
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import RuntimeStore
from hostkit.types import InboundEnvelope, InboundResult, SourceCheckpoint

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])


def envelope(key: str, payload: str = "hello") -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=OPTIONS.get("channel", "webhook.main"),
        platform_event_key=key,
        conversation_key="chat-1",
        principal_key="user-1",
        authenticated_by="hmac",
        received_at=1_800_000_000.0,
        payload=payload,
    )


def append_line(record: dict[str, Any], path: str | None = None) -> None:
    # One write of an O_APPEND file: lines of several processes never interleave.
    fd = os.open(path or OPTIONS["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


async def wait_for(path: str, timeout_s: float = 60.0) -> None:
    with anyio.fail_after(timeout_s):
        # Another process creates the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def accept(inbox: ChannelInbox) -> None:
    async def one() -> None:
        receipt = await inbox.accept(envelope(OPTIONS["key"]))
        append_line(
            {
                "pid": os.getpid(),
                "inbound_id": receipt.inbound_id,
                "disposition": receipt.disposition,
            }
        )

    async with anyio.create_task_group() as group:
        for _ in range(OPTIONS["tasks"]):
            group.start_soon(one)


async def claim(inbox: ChannelInbox) -> None:
    while True:
        claimed = await inbox.claim_batch(OPTIONS["batch"])
        if not claimed:
            # Nothing due for this process: done, unless another holds a conversation's
            # earlier message (the later ones become due once it completes).
            if not any(c.ready or c.claimed for c in await inbox.counts()):
                return
            await anyio.sleep(0.005)
            continue
        for item in claimed:
            append_line(
                {
                    "pid": os.getpid(),
                    "inbound_id": item.inbound_id,
                    "token": item.claim_token,
                    "attempt": item.attempt,
                    "at": time.time(),
                }
            )
        # Held a moment, as a handler would hold it: the other processes claim meanwhile.
        await anyio.sleep(OPTIONS.get("hold_s", 0.0))
        for item in claimed:
            if "done_out" in OPTIONS:
                append_line({"inbound_id": item.inbound_id, "at": time.time()}, OPTIONS["done_out"])
            await inbox.complete(item, InboundResult("ignored"))


async def ioerror(inbox: ChannelInbox) -> None:
    batch = [envelope(f"big-{n}", "x" * 60_000) for n in range(OPTIONS["batch"])]
    checkpoint = SourceCheckpoint("poller", "c2")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a refused write fails with EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (OPTIONS["fsize"], hard))
    error = ""
    try:
        await inbox.accept_batch(batch, checkpoint)
    except StoreError as exc:
        error = str(exc)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    cursor_after_error = await inbox.checkpoint("poller")
    receipts = await inbox.accept_batch(batch, checkpoint)
    append_line(
        {
            "error": error,
            "cursor_after_error": cursor_after_error,
            "retried": [r.disposition for r in receipts],
            "cursor": await inbox.checkpoint("poller"),
        }
    )


async def main() -> None:
    async with RuntimeStore.open(OPTIONS["db"]) as store:
        inbox = ChannelInbox.on_store(
            store, policy=RetryPolicy(lease_s=OPTIONS.get("lease_s", 600.0))
        )
        await anyio.Path(OPTIONS["ready"]).write_text(str(os.getpid()))
        await wait_for(OPTIONS["go"])
        await {"accept": accept, "claim": claim, "ioerror": ioerror}[OPTIONS["mode"]](inbox)


if __name__ == "__main__":
    anyio.run(main)
