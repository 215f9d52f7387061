"""Clause: a Host runs an Agent Core at its live Git revision, never its work tree or HEAD.

Each turn pins the commit the Host-owned ref points at (TurnResult.core_revision
is its 40-hex id); committing moves nothing that runs; moving the ref and
applying the configuration builds a generation on the new revision; a core
without a live ref is not available while the Host's other agents work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.errors import TurnRejected
from hostkit.host import DefaultToolSource, Host, HostConfig, NoChannels, RuntimeCapabilities
from hostkit.testing import InMemoryMemorySource, StaticProviderSource
from hostkit.types import ModelRequest
from tests.cores_support import commit, core_host_config, make_core, manifest_text, set_live
from tests.hosts import request

pytestmark = pytest.mark.anyio

TOOLS_V1 = '''
from hostkit.effects import ToolContext, tool

from .words import count


@tool("notes.count")
async def count_words(ctx: ToolContext, text: str) -> int:
    """Count the words of a text."""
    return count(text)
'''
WORDS = "def count(text: str) -> int:\n    return len(text.split())\n"
TOOLS_V2 = '''
from hostkit.effects import ToolContext, tool


@tool("notes.shout")
async def shout(ctx: ToolContext, text: str) -> str:
    """Upper-case a text."""
    return text.upper()
'''


def manifest(instructions: str) -> dict[str, object]:
    return {
        "model": "test",
        "instructions": instructions,
        "capabilities": {"notes.*": "allow"},
        "tools": ["tools"],
        "memory": False,
    }


def sources(config: HostConfig, model: ScriptedModel) -> RuntimeCapabilities:
    """The Host's own tool source (tool modules discovered in a child) and ``model``."""
    return RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    )


@asynccontextmanager
async def core_host(config: HostConfig, model: ScriptedModel) -> AsyncIterator[Host]:
    async with Host.open(config, capabilities=sources(config, model)) as host:
        yield host


async def reapply(host: Host, model: ScriptedModel) -> int:
    """Apply the Host's configuration again (its cores at their live refs now)."""
    return await host.apply_config(
        host.declared_config, capabilities=sources(host.declared_config, model)
    )


def system_text(req: ModelRequest) -> str:
    return "\n".join(m.content for m in req.messages if m.role == "system")


def tool_names(req: ModelRequest) -> set[str]:
    return {definition.name for definition in req.tools}


async def test_a_turn_runs_the_live_commit_and_reports_its_sha(tmp_path: Path) -> None:
    path, live = make_core(
        tmp_path,
        "notes",
        manifest=manifest("Answer as the notes core, version one."),
        files={"agent/tools.py": TOOLS_V1, "agent/words.py": WORDS},
    )
    model = ScriptedModel([Reply("done")])
    async with core_host(core_host_config(tmp_path, {"notes": path}), model) as host:
        result = await host.turns.run(request(core_id="notes"))
    assert result.outcome == "completed"
    assert result.core_revision == live
    assert "version one" in system_text(model.requests[0])
    assert tool_names(model.requests[0]) == {"notes_count"}


async def test_committing_without_moving_the_ref_changes_nothing_that_runs(
    tmp_path: Path,
) -> None:
    path, live = make_core(
        tmp_path,
        "notes",
        manifest=manifest("version one"),
        files={"agent/tools.py": TOOLS_V1, "agent/words.py": WORDS},
    )
    model = ScriptedModel([Reply("one"), Reply("two")])
    async with core_host(core_host_config(tmp_path, {"notes": path}), model) as host:
        await host.turns.run(request(core_id="notes"))
        head = commit(
            path,
            {"agent.yaml": manifest_text({"id": "notes", **manifest("version two")})},
            "edit the work tree",
        )
        await reapply(host, model)
        result = await host.turns.run(request(core_id="notes"))
    assert head != live
    assert result.outcome == "completed", result.error
    assert result.core_revision == live
    assert "version one" in system_text(model.requests[1])


async def test_moving_the_ref_and_applying_runs_the_new_revision_next(tmp_path: Path) -> None:
    path, first = make_core(
        tmp_path,
        "notes",
        manifest=manifest("version one"),
        files={"agent/tools.py": TOOLS_V1, "agent/words.py": WORDS},
    )
    model = ScriptedModel([Reply("one"), Reply("two")])
    async with core_host(core_host_config(tmp_path, {"notes": path}), model) as host:
        before = await host.turns.run(request(core_id="notes"))
        second = commit(
            path,
            {
                "agent.yaml": manifest_text({"id": "notes", **manifest("version two")}),
                "agent/tools.py": TOOLS_V2,
            },
            "second revision",
            remove=["agent/words.py"],
        )
        set_live(path, second)
        generation = await reapply(host, model)
        after = await host.turns.run(request(core_id="notes"))
    assert (before.core_revision, after.core_revision) == (first, second)
    assert generation == 2
    assert "version two" in system_text(model.requests[1])
    assert tool_names(model.requests[1]) == {"notes_shout"}


async def test_a_core_without_a_live_ref_is_rejected_while_other_agents_work(
    tmp_path: Path,
) -> None:
    path, _ = make_core(tmp_path, "draft", manifest=manifest("unreleased"), live=False)
    config = core_host_config(
        tmp_path, {"draft": path}, agents={"assistant": {"provider": "test", "memory": False}}
    )
    model = ScriptedModel([Reply("still here")])
    async with core_host(config, model) as host:
        assert any("hostkit core promote draft" in line for line in host.warnings)
        promote = r'run `hostkit core promote draft --reason "\.\.\."`'
        with pytest.raises(TurnRejected, match=promote):
            await host.turns.run(request(core_id="draft"))
        answer = await host.run_turn("assistant", "hello")
    assert answer == "still here"
