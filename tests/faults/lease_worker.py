"""A Host process for the cross-process session lease tests (run as a script, not collected).

``python lease_worker.py '<json>'`` opens a Host on a shared SQLite file and
runs ``turns`` turns of one conversation. Each turn calls an authored tool
that holds the session for ``hold_s`` seconds and appends one JSON line
``{"pid", "session", "turn", "start", "end"}`` to ``log`` (one ``write`` of
an ``O_APPEND`` file, so lines of several processes never interleave).

Options (JSON keys): ``root``, ``log``, ``conversation``, ``turns``,
``hold_s`` (``null``: hold forever), ``ttl_s``, ``ready`` (a file written
once the Host is open), ``go`` (a file to wait for before the first turn),
``marker`` (a file written when the tool starts), ``asking`` (a file written
just before the first turn is asked for), ``hostname`` (pretend to
run on another machine), ``results`` (a file for the turns' outcomes).
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])
if OPTIONS.get("hostname"):
    # A Host "on another machine": its leases can only end by expiry, never by a
    # liveness check from this one.
    socket.gethostname = lambda: OPTIONS["hostname"]  # type: ignore[assignment]

import anyio  # noqa: E402

from hostkit.effects import ToolContext, tool  # noqa: E402
from hostkit.host import Host, parse_config  # noqa: E402
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities  # noqa: E402
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest  # noqa: E402

ROOT = Path(OPTIONS["root"])


def append_line(path: str, record: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


@tool("probe.hold")
async def hold_session(ctx: ToolContext) -> str:
    """Hold the session for a while and record the interval."""
    start = time.time()
    if OPTIONS.get("marker"):
        await anyio.Path(OPTIONS["marker"]).write_text(ctx.turn_id)
    hold = OPTIONS.get("hold_s")
    await anyio.sleep(math.inf if hold is None else hold)
    end = time.time()
    record = {
        "pid": os.getpid(),
        "session": ctx.session_id,
        "turn": ctx.turn_id,
        "start": start,
        "end": end,
    }
    append_line(OPTIONS["log"], record)
    return "held"


def decide(request: ModelRequest) -> Reply | CallTools:
    if request.messages and request.messages[-1].role == "tool":
        return Reply("done")
    return CallTools(("probe_hold", {}))


async def wait_for(path: str, timeout_s: float = 60.0) -> None:
    with anyio.fail_after(timeout_s):
        # Another process writes the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def main() -> None:
    config = parse_config(
        {
            "host": {
                "database": str(ROOT / "hostkit.db"),
                "workspace": str(ROOT),
                "session_lease_ttl_s": OPTIONS.get("ttl_s", 60.0),
                "admission_timeout_s": 120.0,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=ROOT,
    )
    model = ScriptedModel([decide], repeat_last=True)
    caps = capabilities(model, tools=[hold_session])
    outcomes: list[dict[str, Any]] = []
    async with Host.open(config, capabilities=caps) as host:
        if OPTIONS.get("ready"):
            await anyio.Path(OPTIONS["ready"]).write_text(str(os.getpid()))
        if OPTIONS.get("go"):
            await wait_for(OPTIONS["go"])
        for index in range(OPTIONS.get("turns", 1)):
            asked = time.time()
            if index == 0 and OPTIONS.get("asking"):
                await anyio.Path(OPTIONS["asking"]).write_text(str(asked))
            result = await host.turns.run(
                TurnRequest(
                    input=f"process {os.getpid()} turn {index}",
                    principal=ConversationFacts(
                        channel="test",
                        conversation_key=OPTIONS["conversation"],
                        principal_key="alice",
                    ),
                    request_id=f"req-{os.getpid()}-{index}",
                )
            )
            outcomes.append(
                {
                    "turn": result.turn_id,
                    "session": result.session_id,
                    "outcome": result.outcome,
                    "asked": asked,
                    "ended": time.time(),
                }
            )
    if OPTIONS.get("results"):
        await anyio.Path(OPTIONS["results"]).write_text(json.dumps(outcomes))


if __name__ == "__main__":
    anyio.run(main)
