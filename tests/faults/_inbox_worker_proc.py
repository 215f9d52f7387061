"""A Host process for the inbox worker crash tests (run as a script, not collected).

``python _inbox_worker_proc.py '<json>'`` opens a Host on ``root/hostkit.db``
and, by ``mode``:

- ``serve``: runs the Host's inbox worker until inbound ``until`` is
  terminal, then writes ``results`` (how many provider calls this process
  made). With ``ready``/``go``: says it is open, and waits before serving.
  With ``block``, the model writes ``marker`` and never answers (the test
  SIGKILLs the process mid-turn).
- ``stall``: a worker whose turn runner writes ``marker`` and never returns:
  the claim is taken and the turn id reserved, the turn never started.
- ``hold``: claims one inbound itself, writes ``marker``, then at each file of
  ``steps`` tries to end the claim (``complete``, ``fail``, ``extend``) and
  appends what the inbox answered to ``results``.

Every inbox here has ``lease_s`` seconds of lease (default 1: short, so a test
waits little for a dead claimant's lease to run out). With ``hostname`` the
process pretends to run on that machine (its leases then end by expiry only,
never by a liveness check of its pid); ``session_lease_ttl_s`` sets its Host's.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])
if "hostname" in OPTIONS:
    socket.gethostname = lambda: OPTIONS["hostname"]

import anyio  # noqa: E402

from hostkit.errors import StaleClaim  # noqa: E402
from hostkit.host import Host, parse_config  # noqa: E402
from hostkit.inbox import ChannelInbox, InboxWorker, RetryPolicy  # noqa: E402
from hostkit.testing import Reply, ScriptedModel, capabilities  # noqa: E402
from hostkit.types import (  # noqa: E402
    InboundFailure,
    InboundResult,
    ModelRequest,
    TurnRequest,
    TurnResult,
)

ROOT = Path(OPTIONS["root"])
DEADLINE_S = 60.0


async def publish(path: str | Path, text: str) -> None:
    """Write ``text`` whole or not at all for a reader polling from another process."""
    part = anyio.Path(f"{path}.part")
    await part.write_text(text)
    await part.rename(path)


async def wait_for(path: str) -> None:
    with anyio.fail_after(DEADLINE_S):
        # Another process writes the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def answer(request: ModelRequest) -> Reply:
    if OPTIONS.get("block"):
        await anyio.Path(OPTIONS["marker"]).write_text(str(os.getpid()))
        await anyio.sleep_forever()
    return Reply(f"answered by {os.getpid()}")


async def stall(request: TurnRequest) -> TurnResult:
    await publish(OPTIONS["marker"], request.request_id)
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def serve(host: Host, inbox: ChannelInbox, model: ScriptedModel) -> None:
    worker = host.inbox_worker(inbox=inbox, idle_poll_s=0.05)
    if OPTIONS.get("ready"):
        await anyio.Path(OPTIONS["ready"]).write_text(str(os.getpid()))
    if OPTIONS.get("go"):
        await wait_for(OPTIONS["go"])
    async with worker:
        with anyio.fail_after(DEADLINE_S):
            while True:
                record = await inbox.record(OPTIONS["until"])
                if record is not None and record.state in ("completed", "dead_lettered"):
                    break
                await anyio.sleep(0.05)
    await anyio.Path(OPTIONS["results"]).write_text(json.dumps({"calls": len(model.requests)}))


async def hold(inbox: ChannelInbox) -> None:
    claimed = await inbox.claim()
    assert claimed is not None
    await publish(OPTIONS["marker"], claimed.claim_token)
    answers: list[Any] = []
    for step in OPTIONS["steps"]:
        await wait_for(step)
        complete = await inbox.complete(claimed, InboundResult("ignored", detail="from A"))
        failed = await inbox.fail(claimed, InboundFailure("transient", "from_a", "A failed"))
        try:
            await inbox.extend(claimed)
            extended = "extended"
        except StaleClaim:
            extended = "stale_claim"
        answers.append([complete.disposition, failed.disposition, extended])
        await publish(OPTIONS["results"], json.dumps(answers))


async def main() -> None:
    config = parse_config(
        {
            "host": {
                "database": str(ROOT / "hostkit.db"),
                "workspace": str(ROOT),
                "session_lease_ttl_s": float(OPTIONS.get("session_lease_ttl_s", 60.0)),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=ROOT,
    )
    model = ScriptedModel([answer], repeat_last=True)
    lease_s = float(OPTIONS.get("lease_s", 1.0))
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=0.5, lease_s=lease_s)
    async with Host.open(config, capabilities=capabilities(model)) as host:
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        mode = OPTIONS["mode"]
        if mode == "serve":
            await serve(host, inbox, model)
        elif mode == "stall":
            async with InboxWorker(inbox, stall, idle_poll_s=0.05):
                await anyio.sleep_forever()
        elif mode == "hold":
            await hold(inbox)


if __name__ == "__main__":
    anyio.run(main)
