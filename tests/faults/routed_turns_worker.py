"""A Host process for the recovered-routed-turns crash test (run as a script, not collected).

``python routed_turns_worker.py <root>`` opens a Host on ``root``'s SQLite file and runs
five turns at once, each in its own conversation, then stops forever:

- ``wait routed`` (route ``LOST_ROUTE``): its provider call never returns;
- ``stamp it`` (route ``ASK_ROUTE``): asks ``files.stamp`` of an approver still deciding;
- ``wait plain`` (no route, as from the CLI): its provider call never returns;
- ``pay now`` (route ``PAYING_ROUTE``): its ``ledger.pay`` call writes the ledger, then
  never returns;
- ``pay then wait`` (route ``PAID_ROUTE``): its ``ledger.pay`` call writes the ledger and
  returns, and the provider call after it never returns.

Each writes a marker in ``root`` when it is there (``waiting-routed``, ``asked`` with the
approval id, ``waiting-plain``, ``paying``, ``paid-waiting``), so the test kills the
process with all five mid-turn.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

from hostkit.effects import ApprovalDecision, ApprovalRequest, ToolContext, tool
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest

LOST_ROUTE: dict[str, Any] = {
    "channel": "slack.main",
    "conversation": "T1:C1:U1",
    "reply": {"channel": "C1", "thread_ts": "17.5"},
}
ASK_ROUTE: dict[str, Any] = {
    "channel": "telegram.main",
    "conversation": "42:7",
    "reply": {"chat_id": 42},
}
PAYING_ROUTE: dict[str, Any] = {
    "channel": "slack.main",
    "conversation": "T1:C2:U1",
    "reply": {"channel": "C2"},
}
PAID_ROUTE: dict[str, Any] = {
    "channel": "slack.main",
    "conversation": "T1:C3:U1",
    "reply": {"channel": "C3"},
}
TURNS: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
    ("wait routed", "c-routed", LOST_ROUTE),
    ("stamp it", "c-ask", ASK_ROUTE),
    ("wait plain", "c-plain", None),
    ("pay now", "c-paying", PAYING_ROUTE),
    ("pay then wait", "c-paid", PAID_ROUTE),
)


def host_config(root: Path) -> HostConfig:
    """The Host both processes open (``files.stamp`` is asked of an approver)."""
    return parse_config(
        {
            "host": {"database": str(root / "hostkit.db"), "workspace": str(root)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"], "ask": ["files.stamp"]},
                }
            },
        },
        base_dir=root,
    )


@tool("files.stamp")
async def stamp(ctx: ToolContext, label: str) -> str:
    """Stamp a document (never runs here: its approval is never answered)."""
    raise AssertionError("the call ran without an approval")


@tool("ledger.pay")
async def pay(ctx: ToolContext, label: str) -> str:
    """Pay: one line in the workspace's ledger (a side effect), then hang if asked to."""
    root = Path(ctx.workspace)
    async with await anyio.open_file(root / "ledger", "a") as ledger:
        await ledger.write(f"{label}\n")
    if label == "hang":
        await publish(root / "paying", "the payment is made, its result is not recorded")
        await anyio.sleep_forever()
    return f"paid {label}"


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


def routed_request(text: str, conversation: str, route: dict[str, Any] | None) -> TurnRequest:
    return TurnRequest(
        input=text,
        principal=ConversationFacts(
            channel="test", conversation_key=conversation, principal_key="alice"
        ),
        request_id=f"req-{conversation}",
        route=route,
    )


def model(root: Path) -> ScriptedModel:
    async def decide(request: ModelRequest) -> CallTools:
        text = [m.content for m in request.messages if m.role == "user"][-1]
        if "stamp" in text:
            return CallTools(("files_stamp", {"label": "invoice 7"}))
        marker = text.replace(" ", "-").replace("wait", "waiting")
        if text.startswith("pay"):
            if request.messages[-1].role != "tool":
                return CallTools(("ledger_pay", {"label": "hang" if text == "pay now" else "ok"}))
            marker = "paid-waiting"
        await anyio.Path(root / marker).write_text("inside the provider call")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return ScriptedModel([decide], repeat_last=True)


async def main(root: Path) -> None:
    async with (
        Host.open(
            host_config(root),
            capabilities=capabilities(model(root), tools=[stamp, pay]),
            approver=Deciding(root / "asked"),
        ) as host,
        anyio.create_task_group() as group,
    ):
        for text, conversation, route in TURNS:
            group.start_soon(host.turns.run, routed_request(text, conversation, route))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
