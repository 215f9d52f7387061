"""One Host of the PostgreSQL multi-host test (run as a script, not collected).

``python _multi_host_proc.py '<json>'`` pretends to run on machine
``hostname`` (so the other Hosts can only take its leases over by expiry,
never by a liveness check of its pid), opens a Host whose ``[store] url`` is
the shared PostgreSQL database, and serves that database's inbox with the
inbox worker ``hostkit serve`` uses (``host.inbox_worker``), on a
``ChannelInbox`` with a short lease. Then, in order:

1. writes ``ready`` (its Host is open) and waits for ``go``;
2. accepts ``events`` (platform deliveries; the same event may be given to
   several Hosts) and writes the receipts to ``receipts``;
3. with ``again``: waits for that file, accepts ``events`` once more (a
   platform retrying after a Host died) and writes ``receipts_again``;
4. serves until ``stop`` appears, closes its Host, and writes to ``turns``
   the ``turn.started`` and terminal events its Host published, by turn id
   (published after their rows commit: a Host that is not killed misses none).

The scripted model holds each call ``hold_s`` seconds and appends a JSON line
``{"pid", "host", "payload", "edge": "start" | "end", "at"}`` to ``log`` at
both ends (one ``O_APPEND`` write, so lines of several processes never
interleave). From call number ``block_from`` on, it writes ``marker`` and
never answers: the test SIGKILLs this process mid-turn.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])
# Another machine: its leases end by expiry only (LeaseOwner.liveness is "unknown" there).
socket.gethostname = lambda: OPTIONS["hostname"]

import anyio  # noqa: E402

from hostkit.host import Host, parse_config  # noqa: E402
from hostkit.inbox import ChannelInbox, RetryPolicy  # noqa: E402
from hostkit.testing import Reply, ScriptedModel, capabilities  # noqa: E402
from hostkit.types import InboundEnvelope, ModelRequest  # noqa: E402

ROOT = Path(OPTIONS["root"])
DEADLINE_S = 120.0
LIFECYCLE = frozenset(
    f"turn.{kind}"
    for kind in (
        "started",
        "completed",
        "needs_user",
        "failed",
        "cancelled",
        "lost",
        "indeterminate",
    )
)
calls = 0


def append_line(path: str, record: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


async def log_edge(payload: str, edge: str) -> None:
    record = {
        "pid": os.getpid(),
        "host": OPTIONS["hostname"],
        "payload": payload,
        "edge": edge,
        "at": time.time(),
    }
    await anyio.to_thread.run_sync(append_line, OPTIONS["log"], record)


async def answer(request: ModelRequest) -> Reply:
    global calls
    calls += 1
    payload = next(m.content for m in reversed(request.messages) if m.role == "user")
    await log_edge(payload, "start")
    block_from = OPTIONS.get("block_from")
    if block_from is not None and calls >= block_from:
        await anyio.Path(OPTIONS["marker"]).write_text(payload)
        await anyio.sleep_forever()
    await anyio.sleep(OPTIONS["hold_s"])
    await log_edge(payload, "end")
    return Reply(f"{OPTIONS['hostname']} answered {payload}")


async def wait_for(path: str) -> None:
    with anyio.fail_after(DEADLINE_S):
        # The test writes the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.02)


def envelope(event: dict[str, str]) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id="chat.shared",
        platform_event_key=event["key"],
        conversation_key=event["conversation"],
        principal_key=event["principal"],
        authenticated_by="signature",
        received_at=time.time(),
        payload=event["text"],
    )


async def accept_all(inbox: ChannelInbox, into: str) -> None:
    receipts = []
    for event in OPTIONS["events"]:
        receipt = await inbox.accept(envelope(event))
        receipts.append([event["key"], receipt.inbound_id, receipt.disposition])
    # Whole or not at all: the test SIGKILLs the victim as soon as this file exists.
    part = anyio.Path(f"{into}.part")
    await part.write_text(json.dumps(receipts))
    await part.rename(into)


async def record_turns(events: Any, into: dict[str, list[str]]) -> None:
    async for published in events:
        into.setdefault(published.turn_id, []).append(published.kind)


async def main() -> None:
    config = parse_config(
        {
            "host": {
                "database": str(ROOT / "unused.db"),
                "workspace": str(ROOT / "workspace"),
                "session_lease_ttl_s": OPTIONS["ttl_s"],
                "admission_timeout_s": 60.0,
            },
            "store": {"url": OPTIONS["url"], "pool_size": 4},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=ROOT,
    )
    model = ScriptedModel([answer], repeat_last=True)
    # An attempt that finds the dead Host's turn still holding its session (TurnInProgress)
    # is retried: these attempts span 9 s at least, well past a lease of a few seconds.
    policy = RetryPolicy(
        max_attempts=60, base_delay_s=0.05, max_delay_s=0.3, lease_s=OPTIONS["lease_s"]
    )
    turns: dict[str, list[str]] = {}
    async with (
        Host.open(config, capabilities=capabilities(model)) as host,
        host.events.subscribe(lambda event: event.kind in LIFECYCLE) as events,
        anyio.create_task_group() as group,
    ):
        group.start_soon(record_turns, events, turns)
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        await anyio.Path(OPTIONS["ready"]).write_text(str(os.getpid()))
        await wait_for(OPTIONS["go"])
        # The worker `hostkit serve` runs (HostDaemon's "inbox" daemon), on this inbox.
        async with host.inbox_worker(inbox=inbox, concurrency=3, idle_poll_s=0.5):
            await accept_all(inbox, OPTIONS["receipts"])
            if OPTIONS.get("again"):
                await wait_for(OPTIONS["again"])
                await accept_all(inbox, OPTIONS["receipts_again"])
            await wait_for(OPTIONS["stop"])
        group.cancel_scope.cancel()
    await anyio.Path(OPTIONS["turns"]).write_text(json.dumps(turns))


if __name__ == "__main__":
    anyio.run(main)
