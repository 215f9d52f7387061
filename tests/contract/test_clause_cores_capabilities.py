"""Clause: a core's capability grants are the whole of its authority.

Each rule compiles to effects with its approval (fs.read -> files.read and
files.list, ...); nothing else is allowed (no "*"); an authored tool in
agent/tools.py goes through the same catalog, policy and approval as any tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.cores import CoreLocation, load_core
from hostkit.effects import ApprovalDecision, ApprovalRequest, EffectPolicy, provider_name
from hostkit.host import DefaultToolSource, Host, NoChannels, RuntimeCapabilities, compile_core
from hostkit.testing import InMemoryMemorySource, StaticProviderSource
from tests.cores_support import core_host_config, make_core
from tests.hosts import request

pytestmark = pytest.mark.anyio

NOTES = '''
from hostkit.effects import ToolContext, tool


@tool("notes.write")
async def write_note(ctx: ToolContext, name: str) -> str:
    """Write a note."""
    return f"wrote {name}"
'''


class Approver:
    """Answers every ask with one decision and records what it was shown."""

    def __init__(self, decision: ApprovalDecision) -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return self.decision


async def test_each_rule_compiles_to_its_effects_and_nothing_else_is_allowed(
    tmp_path: Path,
) -> None:
    path, sha = make_core(
        tmp_path,
        "ops",
        manifest={
            "model": "test",
            "capabilities": {
                "fs.read": "allow",
                "fs.write": "ask",
                "terminal.run": "deny",
                "web.extract": "allow",
                "notes.*": "ask",
                "secret.bind:DEPLOY_TOKEN": "ask",
                "secret.bind:OTHER_TOKEN": "deny",
            },
            "memory": True,
        },
    )
    config = core_host_config(tmp_path, {"ops": path})
    loaded = await load_core(
        CoreLocation("ops", path, "refs/hostkit/live"), sha, cores_root=config.cores_root
    )
    agent = compile_core(config, loaded)
    policy = EffectPolicy(
        allow=tuple(agent.policy.allow), deny=tuple(agent.policy.deny), ask=tuple(agent.policy.ask)
    )
    decisions = {
        effect: policy.decide(effect)
        for effect in (
            "files.read",
            "files.list",
            "files.write",
            "files.edit",
            "terminal.run",
            "terminal.status",
            "web.extract",
            "notes.write",
            "memory.recall",
            "calendar.read",
            "mcp.connect:anything",
        )
    }
    assert decisions == {
        "files.read": "allow",
        "files.list": "allow",
        "files.write": "ask",
        "files.edit": "ask",
        "terminal.run": "deny",
        "terminal.status": "deny",
        "web.extract": "allow",
        "notes.write": "ask",
        "memory.recall": "allow",
        "calendar.read": "deny",
        "mcp.connect:anything": "deny",
    }
    assert "*" not in agent.policy.allow
    assert agent.builtins == (
        "files.edit",
        "files.list",
        "files.read",
        "files.write",
        "web.extract",
    )
    assert agent.secrets == ("DEPLOY_TOKEN",)
    assert agent.provider == "test"
    assert agent.tool_path == (str(loaded.root),)


async def test_an_authored_tool_is_offered_asked_and_refused_like_any_tool(
    tmp_path: Path,
) -> None:
    path, sha = make_core(
        tmp_path,
        "scribe",
        manifest={
            "model": "test",
            "capabilities": {"fs.read": "allow", "notes.*": "ask"},
            "tools": ["tools"],
            "memory": False,
        },
        files={"agent/tools.py": NOTES},
    )
    config = core_host_config(tmp_path, {"scribe": path})
    model = ScriptedModel(
        [
            CallTools((provider_name("notes.write"), {"name": "a.md"})),
            Reply("refused"),
            CallTools((provider_name("notes.write"), {"name": "b.md"})),
            Reply("written"),
        ]
    )
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    )
    approver = Approver("deny")
    async with Host.open(config, capabilities=capabilities, approver=approver) as host:
        denied = await host.turns.run(request(core_id="scribe"))
        approver.decision = "approve_once"
        allowed = await host.turns.run(request(core_id="scribe"))
    offered = {definition.name for definition in model.requests[0].tools}
    assert offered == {"files_read", "files_list", "notes_write"}
    assert [(e.effect, e.status) for e in denied.effects] == [("notes.write", "denied")]
    assert [(e.effect, e.status) for e in allowed.effects] == [("notes.write", "succeeded")]
    assert [seen.effect for seen in approver.seen] == ["notes.write", "notes.write"]
    assert denied.core_revision == allowed.core_revision == sha
    assert any("wrote b.md" in m.content for m in model.requests[3].messages if m.role == "tool")
