"""A Host process whose turn pauses (SIGSTOP) as its effect is about to start (run as a
script, not collected): what a stalled VM or a stopped process looks like to the others.

``python stale_holder_worker.py '<json>'`` opens a Host on a shared SQLite file (on the
PostgreSQL database ``url`` when given) and runs one turn of conversation ``c1`` whose
model calls ``probe.stamp`` (it appends ``text`` to ``stamps``: an effect anyone can see
happened). With ``pause`` set, the process writes ``marker`` and stops itself at the
turn's ``effect.started`` event (``pause="model"``: in its first model call, whose context
decision is made and not yet written); the test continues it with SIGCONT. With
``suspend`` the stop is what a system suspend or a paused VM looks like from inside:
``time.monotonic`` (anyio's clock) does not count it, as Linux's ``CLOCK_MONOTONIC``
does not, while the wall clock and ``CLOCK_BOOTTIME`` do. The turn's outcome goes to
``result`` as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])

_awake = time.monotonic
_asleep = [0.0]  # the seconds this process was "suspended" (``suspend``)


def _suspended_monotonic() -> float:
    """``CLOCK_MONOTONIC`` across a suspend: the time suspended is not counted."""
    return _awake() - _asleep[0]


if OPTIONS.get("suspend"):
    time.monotonic = _suspended_monotonic  # before anyio and asyncio read it

import anyio  # noqa: E402

from hostkit.effects import ToolContext, tool  # noqa: E402
from hostkit.host import Host, parse_config  # noqa: E402
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities  # noqa: E402
from hostkit.turns import TurnEvent  # noqa: E402
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest  # noqa: E402

ROOT = Path(OPTIONS["root"])


class PauseAtEffect:
    """The observer that stops this process when its turn's effect is about to start."""

    def notify(self, event: TurnEvent) -> None:
        if OPTIONS.get("pause") is True and event.kind == "effect.started":
            pause()


def pause() -> None:
    """Say so in ``marker``, then stop this process until the test continues it."""
    Path(OPTIONS["marker"]).write_text(str(os.getpid()))
    stopped = _awake()
    os.kill(os.getpid(), signal.SIGSTOP)
    if OPTIONS.get("suspend"):
        _asleep[0] += _awake() - stopped


@tool("probe.stamp")
async def stamp(ctx: ToolContext, text: str) -> str:
    """Append a line to the stamps file."""
    with open(OPTIONS["stamps"], "a", encoding="utf-8") as out:  # noqa: ASYNC230 (a probe)
        out.write(text + "\n")
    return "stamped"


def decide(request: ModelRequest) -> Reply | CallTools:
    if request.messages and request.messages[-1].role == "tool":
        return Reply("stamped")
    if OPTIONS.get("pause") == "model":
        pause()
    return CallTools(("probe.stamp", {"text": OPTIONS["text"]}))


async def main() -> None:
    config = parse_config(
        {
            "host": {
                "database": str(ROOT / "hostkit.db"),
                "workspace": str(ROOT),
                "session_lease_ttl_s": OPTIONS["ttl_s"],
                "admission_timeout_s": 60.0,
            },
            "store": {"url": OPTIONS["url"]} if OPTIONS.get("url") else {},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {"provider": "test", "memory": False, "policy": {"allow": ["*"]}}
            },
        },
        base_dir=ROOT,
    )
    model = ScriptedModel([decide], repeat_last=True)
    sources = capabilities(model, tools=[stamp], observer=PauseAtEffect())
    async with Host.open(config, capabilities=sources) as host:
        result = await host.turns.run(
            TurnRequest(
                input="remember this",
                request_id=OPTIONS["request"],
                principal=ConversationFacts("test", "c1", "alice"),
            )
        )
    await anyio.Path(OPTIONS["result"]).write_text(
        json.dumps({"outcome": result.outcome, "effects": [e.status for e in result.effects]})
    )


anyio.run(main)
