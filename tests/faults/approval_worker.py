"""A Host process for the approval crash tests (run as a script, not collected).

``python approval_worker.py '<json>'`` opens a Host on ``root``'s SQLite file
and stops (forever) at one chosen point, writing ``marker`` when it is there,
so the test can kill it exactly there. ``mode``:

- ``ask``: run a turn whose ``files.stamp`` call is asked of an approver that
  never answers (a person still deciding);
- ``record-answer``: record an answer to approval ``approval_id`` the way
  ``host.approvals.answer`` does first, then stop before any continuation;
- ``continue``: answer ``approval_id`` through ``host.approvals.answer``; the
  continuation's tool stops ``before`` or ``after`` it appends its line
  (option ``tool``);
- ``continue-killed``: the same answer, but the process SIGKILLs itself the
  moment its continuation turn is admitted, before that turn claims the call;
- ``inline``: run a turn whose model reads ``files.peek`` then asks ``files.stamp``
  under the same call id (``call_0``, as from a server that sends no ids); the
  approver approves at once and the stamp stops as ``tool`` says.

Option ``peek`` (any mode; always with ``inline``) adds ``files.peek`` to the
tools, as the turn that asked had it; ``ttl_s`` sets the session lease ttl of
this process's turns (how soon a paused one's lease lapses).

The test imports ``host_config`` and ``stamp_tool`` so both sides have the
same agent revision and tool (the same approval fingerprint).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from hostkit.effects import (
    ApprovalDecision,
    ApprovalLedger,
    ApprovalRequest,
    AuthoredTool,
    ToolContext,
    tool,
)
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ConversationFacts, TurnRequest
from tests.positional_ids import PositionalIds

ASK = {"allow": ["*"], "ask": ["files.stamp"]}


def host_config(root: Path, *, ttl_s: float | None = None) -> HostConfig:
    """``ttl_s``: the session lease ttl of this process's turns (None: the default)."""
    lease = {} if ttl_s is None else {"session_lease_ttl_s": ttl_s}
    return parse_config(
        {
            "host": {
                "database": str(root / "hostkit.db"),
                "workspace": str(root),
                "approval_timeout_s": 600.0,
                **lease,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False, "policy": ASK}},
        },
        base_dir=root,
    )


def stamp_tool(root: Path, stop: str | None = None, marker: Path | None = None) -> AuthoredTool:
    """``files.stamp``: appends its label to ``root/stamps.txt``; ``stop`` holds it forever
    ``before`` or ``after`` the append (after writing ``marker``)."""
    stamps = root / "stamps.txt"

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str) -> str:
        """Append a stamp line."""
        if stop == "before" and marker is not None:
            await anyio.Path(marker).write_text("inside the tool, before the append")
            await anyio.sleep_forever()
        async with await anyio.open_file(stamps, "a") as out:
            await out.write(label + "\n")
        if stop == "after" and marker is not None:
            await anyio.Path(marker).write_text("inside the tool, after the append")
            await anyio.sleep_forever()
        return f"stamped {label}"

    return stamp


def peek_tool() -> AuthoredTool:
    """``files.peek``: allowed without asking, and harmless."""

    @tool("files.peek")
    async def peek(ctx: ToolContext, what: str) -> str:
        """Read nothing, say so."""
        return f"peeked {what}"

    return peek


def repeated_ids_script() -> PositionalIds:
    """Step one peeks as ``call_0``; step two asks to stamp, as ``call_0`` again."""
    return PositionalIds(
        [
            CallTools(("files_peek", {"what": "notes"})),
            CallTools(("files_stamp", {"label": "one"})),
            Reply("stamped"),
        ]
    )


def stamp_request(text: str = "stamp it") -> TurnRequest:
    return TurnRequest(
        input=text,
        principal=ConversationFacts(channel="test", conversation_key="c1", principal_key="alice"),
        request_id=f"req-{text.replace(' ', '-')}",
    )


async def publish(path: str | Path, text: str) -> None:
    """Write ``text`` whole or not at all for a reader polling from another process."""
    part = anyio.Path(f"{path}.part")
    await part.write_text(text)
    await part.rename(path)


class Deciding:
    """A person who sees the prompt and has not decided yet; says so in ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        await publish(self.marker, request.approval_id)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


class Approving:
    """An approver that approves every call at once (an inline answer)."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return "approve_once"


class KilledAtContinuation:
    """An observer that kills this process as its continuation turn is admitted."""

    def notify(self, event: TurnEvent) -> None:
        if event.kind == "turn.started" and event.request_id.startswith("continue:"):
            os.kill(os.getpid(), signal.SIGKILL)


async def main(options: dict[str, Any]) -> None:
    root, marker = Path(options["root"]), Path(options["marker"])
    mode = options["mode"]
    model = ScriptedModel([CallTools(("files_stamp", {"label": "one"})), Reply("stamped")])
    tools = [stamp_tool(root, options.get("tool"), marker)]
    approver: Deciding | Approving | None = Deciding(marker) if mode == "ask" else None
    if mode == "inline":
        model, approver = repeated_ids_script(), Approving()
    if mode == "inline" or options.get("peek"):
        tools.append(peek_tool())
    observer = KilledAtContinuation() if mode == "continue-killed" else None
    caps = capabilities(model, tools=tools, observer=observer)
    config = host_config(root, ttl_s=options.get("ttl_s"))
    async with Host.open(config, capabilities=caps, approver=approver) as host:
        if mode in ("ask", "inline"):
            await host.turns.run(stamp_request())
            return
        operator = await host.operator("ops", reason="answer an approval")
        approval_id = options["approval_id"]
        if mode == "record-answer":
            ledger = ApprovalLedger(host.store)
            await ledger.answer(operator, approval_id, decision="approve_once", fingerprint=None)
            await anyio.Path(marker).write_text("answer recorded, continuation not started")
            await anyio.sleep_forever()
        await host.approvals.answer(approval_id, "approve_once", by=operator)


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
