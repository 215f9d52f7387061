"""Malformed tool-call arguments never reach an MCP server, nor its approver.

An MCP tool's input schema commonly has no ``required`` and no
``additionalProperties: false``, so any object validates against it. Arguments a
model sent truncated (cut off at its output limit) were kept as ``{"_raw": text}``,
which such a schema accepted: the server ran the tool on its defaults (a report
mailed to everyone instead of to bob), and an ``ask`` policy showed the approver
``_raw`` text reading "to bob". Such a call is refused ``invalid`` before the
schema, the policy and the approver; a property the server really names ``_raw``
still works.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import capabilities
from tests.hosts import request
from tests.wire import WireServer
from tests.wire.rigs import WireRig, build_rig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent.parent / "mcp_servers" / "mailer_server.py"
TRUNCATED = '{"to": "bob@corp.example", "body": "Q3 numbers are'


class Approver:
    """Approves every prompt, recording it."""

    def __init__(self) -> None:
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return "approve_once"


def mailer_config(tmp_path: Path, policy: dict[str, Any]) -> HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shutil.copy(SERVER, workspace / "mailer_server.py")
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": policy,
                    "mcp": {"mail": {"command": [sys.executable, "mailer_server.py"]}},
                }
            },
        },
        base_dir=tmp_path,
    )


def server_calls(tmp_path: Path) -> list[dict[str, Any]]:
    """What the server was sent, in order (it logs each call before running it)."""
    log = tmp_path / "ws" / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def run_one_call(
    tmp_path: Path, wire: WireServer, policy: dict[str, Any], call: Call
) -> tuple[Any, Approver, WireRig]:
    rig = build_rig("openai", wire=wire, local=None)
    assert isinstance(rig, WireRig)
    rig.expect(Answer(calls=(call,), finish="length"), stream=True)
    rig.expect(Answer(deltas=("ok",)), stream=True)
    config = mailer_config(tmp_path, policy)
    approver = Approver()
    try:
        caps = capabilities(rig.provider, config=config)
        async with Host.open(config, capabilities=caps, approver=approver) as host:
            with anyio.fail_after(60):
                result = await host.turns.run(request("mail bob the Q3 numbers"))
    finally:
        await rig.aclose()
    return result, approver, rig


async def test_truncated_arguments_never_reach_the_server_nor_the_approver(
    tmp_path: Path, wire: WireServer
) -> None:
    policy = {"allow": ["*", "mcp.connect:mail"], "ask": ["mcp.mail.*"]}
    call = Call("c1", "mcp_mail_send_report", (TRUNCATED[:20], TRUNCATED[20:]))
    result, approver, rig = await run_one_call(tmp_path, wire, policy, call)
    offered = [t["function"]["name"] for t in rig.wire.requests[0].body["tools"]]
    assert "mcp_mail_send_report" in offered
    assert [(e.effect, e.status) for e in result.effects] == [("mcp.mail.send_report", "invalid")]
    assert server_calls(tmp_path) == []
    assert approver.seen == []
    [told] = [m["content"] for m in rig.wire.requests[-1].body["messages"] if m["role"] == "tool"]
    assert told.startswith(
        "[invalid] the arguments were not one JSON object: they are cut off before their JSON"
    ), told
    assert "sent to" not in told


async def test_a_property_the_server_names_raw_is_sent_like_any_other(
    tmp_path: Path, wire: WireServer
) -> None:
    policy = {"allow": ["*", "mcp.connect:mail"]}
    call = Call("c1", "mcp_mail_note", ('{"_raw": "remember the Q3 numbers"}',))
    result, _, rig = await run_one_call(tmp_path, wire, policy, call)
    assert [e.status for e in result.effects] == ["succeeded"]
    assert server_calls(tmp_path) == [
        {"tool": "note", "arguments": {"_raw": "remember the Q3 numbers"}}
    ]
    [told] = [m["content"] for m in rig.wire.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "noted remember the Q3 numbers" in told
