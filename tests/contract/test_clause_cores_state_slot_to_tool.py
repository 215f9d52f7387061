"""A core's authored tool reads the state its input slot wrote in the same turn.

Clause: slots and authored tools "receive the reduced author-facing ctx SDK
(turn ids, state get/set, emit)": one turn, one state. The tool is a real
module of the core (``agent/tools.py``), discovered by the Host's own tool
source and run through the catalog, policy and approval pipeline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.host import DefaultToolSource, Host, HostConfig, NoChannels, RuntimeCapabilities
from hostkit.testing import (
    CallTools,
    InMemoryMemorySource,
    Reply,
    ScriptedModel,
    StaticProviderSource,
)
from hostkit.turns import TurnEvent
from tests.cores_support import core_host_config, make_core
from tests.hosts import request

pytestmark = pytest.mark.anyio

SLOTS = """
async def remember(ctx, text):
    await ctx.state.set("topic", text.strip())
    return text
"""
TOOLS = '''
from hostkit.effects import ToolContext, tool


@tool("notes.topic")
async def topic(ctx: ToolContext) -> str:
    """The topic this session asked about last."""
    entry = await ctx.state.entry("topic")
    version = await ctx.state.set("topic", entry.value.upper(), expected=entry.version)
    ctx.emit("read", {"version": version, "revision": ctx.core_revision})
    return f"{entry.value} (v{entry.version})"
'''


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)


def sources(config: HostConfig, model: ScriptedModel, observer: Recorder) -> RuntimeCapabilities:
    return RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
        observer=observer,
    )


async def test_a_tool_reads_what_the_input_slot_wrote(tmp_path: Path) -> None:
    manifest = {
        "model": "test",
        "capabilities": {"notes.*": "allow"},
        "tools": ["tools"],
        "slots": {"input": "slots:remember"},
        "memory": False,
    }
    files = {"agent/slots.py": SLOTS, "agent/tools.py": TOOLS}
    path, _ = make_core(tmp_path, "notes", manifest=manifest, files=files)
    config = core_host_config(tmp_path, {"notes": path})
    model, recorder = ScriptedModel([CallTools(("notes_topic", {})), Reply("ok")]), Recorder()
    async with Host.open(config, capabilities=sources(config, model, recorder)) as host:
        result = await host.turns.run(request(" tides ", core_id="notes"))
        stored = await host.store.cores.state_get("notes", result.session_id, "topic")
    assert result.outcome == "completed", result.error
    assert result.effects[0].status == "succeeded"
    # The model received the tool's answer: the value and version the slot wrote.
    tool_message = model.requests[1].messages[-1]
    assert tool_message.role == "tool"
    assert "tides (v1)" in tool_message.content
    assert stored is not None
    assert (stored.value, stored.version) == ("TIDES", 2)
    read = [e for e in recorder.events if e.kind == "tool.read"]
    assert [dict(e.data) for e in read] == [{"version": 2, "revision": result.core_revision}]
