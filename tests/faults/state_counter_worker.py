"""A Host process for the cross-process authored-state test (run as a script, not collected).

``python state_counter_worker.py '<json>'`` opens a Host on a shared SQLite
file and runs one turn whose authored tool increments the core-wide counter
``counter`` ``times`` times with compare-and-set retries. After its first
increment it writes ``started`` and waits for ``other`` (the other worker's
``started``), so the two processes' loops overlap. It writes
``{"outcome", "conflicts"}`` to ``results``.

Options (JSON keys): ``root``, ``conversation``, ``times``, ``started``,
``other``, ``go`` (a file to wait for before the turn), ``results``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from hostkit.effects import ToolContext, tool
from hostkit.errors import StateConflict
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])
ROOT = Path(OPTIONS["root"])
conflicts = 0


async def wait_for(path: str, timeout_s: float = 60.0) -> None:
    with anyio.fail_after(timeout_s):
        # Another process writes the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.005)


async def increment(ctx: ToolContext) -> None:
    """One increment: read, then write conditionally on the version read; retry on conflict."""
    global conflicts
    assert ctx.core_state is not None
    while True:
        entry = await ctx.core_state.entry("counter")
        current, version = (0, None) if entry is None else (entry.value, entry.version)
        await anyio.sleep(0.002)  # the window in which the other process may write
        try:
            await ctx.core_state.set("counter", current + 1, expected=version)
            return
        except StateConflict:
            conflicts += 1


@tool("counter.bump", timeout_s=120.0)
async def bump(ctx: ToolContext) -> str:
    """Increment the core-wide counter ``times`` times."""
    await increment(ctx)
    await anyio.Path(OPTIONS["started"]).write_text("1")
    await wait_for(OPTIONS["other"])
    for _ in range(OPTIONS["times"] - 1):
        await increment(ctx)
    return "bumped"


def decide(request: ModelRequest) -> Reply | CallTools:
    if request.messages and request.messages[-1].role == "tool":
        return Reply("done")
    return CallTools(("counter_bump", {}))


async def main() -> None:
    config = parse_config(
        {
            "host": {"database": str(ROOT / "hostkit.db"), "workspace": str(ROOT)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=ROOT,
    )
    model = ScriptedModel([decide], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, tools=[bump])) as host:
        await wait_for(OPTIONS["go"])
        result = await host.turns.run(
            TurnRequest(
                input="count",
                principal=ConversationFacts(
                    channel="test", conversation_key=OPTIONS["conversation"], principal_key="a"
                ),
                request_id=f"req-{OPTIONS['conversation']}",
            )
        )
    record = {"outcome": result.outcome, "error": result.error, "conflicts": conflicts}
    await anyio.Path(OPTIONS["results"]).write_text(json.dumps(record))


if __name__ == "__main__":
    anyio.run(main)
