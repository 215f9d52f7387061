"""Clause: a step's tool results that do not fit the window together are cut, not the turn.

Eight calls at once, each returning 2 MB: every result is cut to the model
view's limit, and together they still exceed the scripted model's 8,192-token
window. The turn used to end ``failed`` (``current_input_too_large``) after
all eight effects had run, the model never seeing their results. Now the
model sees each result's beginning with a note of how much it shows, and
answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.effects import ToolContext, tool
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest
from tests.hosts import request

pytestmark = pytest.mark.anyio


@tool("probe.big")
async def big(ctx: ToolContext, n: int) -> str:
    """Returns two megabytes."""
    return f"part {n}: " + "y" * 2_000_000


def decide(req: ModelRequest) -> Reply | CallTools:
    if req.messages[-1].role == "tool":
        return Reply("read all eight")
    return CallTools(*[("probe_big", {"n": n}) for n in range(8)])


async def test_eight_results_too_long_together_reach_the_model_cut(tmp_path: Path) -> None:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([decide], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, tools=[big])) as host:
        result = await host.turns.run(request("fetch all eight"))
    assert (result.outcome, result.text) == ("completed", "read all eight"), result.error
    assert [e.status for e in result.effects] == ["succeeded"] * 8
    last = model.requests[-1]
    results = [m for m in last.messages if m.role == "tool"]
    assert len(results) == 8
    for n, message in enumerate(results):
        assert message.content.startswith(f"part {n}: yyy")
        assert "[cut to fit the model's context window: the first " in message.content
