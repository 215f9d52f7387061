"""Clause: tool provenance is the real source, and a name collision names both sources.

"Tool provenance is the real source (builtin, authored module, MCP server),
and a name collision names both sources." A real configuration generation
builds an agent's tools from the Host's own tool source (builtins, memory on
a real SQLite store, an authored tool module imported from a real file).
``mcp:<server>`` is reserved for MCP discovery, which hostkit does not have yet.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process import ProcessSupervisor
from hostkit.effects import (
    AuthoredTool,
    EffectCollision,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    Toolset,
    tool,
)
from hostkit.errors import ConfigError, TurnRejected
from hostkit.host import (
    DefaultToolSource,
    Host,
    HostConfig,
    NoChannels,
    ProcessResources,
    RuntimeCapabilities,
    StoreMemorySource,
    ToolRequest,
    parse_config,
)
from hostkit.host._generation import Generation
from hostkit.store import RuntimeStore
from hostkit.testing import Reply, ScriptedModel, StaticProviderSource, StaticToolSource
from hostkit.types import TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.hosts import request
from tests.support import facts

pytestmark = pytest.mark.anyio

AGENT = "assistant"


@tool("notes.read")
async def notes_read(ctx: ToolContext) -> str:
    """Reads notes."""
    return "notes"


def module_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, effect: str) -> str:
    """A real authored tool module on ``sys.path`` defining one tool named ``effect``."""
    (tmp_path / f"{name}.py").write_text(
        "from hostkit.effects import ToolContext, tool\n\n"
        f"@tool({effect!r})\n"
        "async def authored(ctx: ToolContext) -> str:\n"
        '    """An authored tool."""\n'
        "    return 'authored'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def agent_config(tmp_path: Path, **agent: Any) -> HostConfig:
    return parse_config(
        {
            # Beside the modules, not around them: an agent may not write code the Host runs.
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path / "workspace"),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {AGENT: {"provider": "test", "policy": {"allow": ["*"]}, **agent}},
        },
        base_dir=tmp_path,
    )


@pytest.fixture
async def supervisor() -> AsyncIterator[ProcessSupervisor]:
    async with ProcessSupervisor() as opened:
        yield opened


async def sources(
    config: HostConfig,
    store: RuntimeStore,
    tools: Any,
    processes: ProcessResources | None = None,
) -> dict[str, str]:
    """effect -> provenance, as a real generation pins them for the agent."""
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(ScriptedModel([Reply("ok")])),
        memory=StoreMemorySource(store),
        tools=tools,
        channels=NoChannels(),
    )
    generation = Generation(1, config, capabilities, store=store, processes=processes)
    pinned = await generation.agent_tools(AGENT)
    return {tool.name: source for tool, source in pinned.tools}


async def test_tool_provenance_is_the_real_source(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: RuntimeStore,
    supervisor: ProcessSupervisor,
) -> None:
    module = module_with(tmp_path, monkeypatch, "hk_provenance_notes", "notes.write")
    config = agent_config(
        tmp_path,
        memory=True,
        builtins=["files.read", "web.extract", "terminal.run"],
        tool_modules=[module],
    )
    processes = ProcessResources(supervisor=supervisor, artifact_root=tmp_path / "artifacts")
    found = await sources(config, store, DefaultToolSource(config), processes)
    assert found == {
        "files.read": "builtin:files",
        "web.extract": "builtin:web",
        "terminal.run": "builtin:terminal",
        "memory.recall": "builtin:memory",
        "memory.store": "builtin:memory",
        "memory.forget": "builtin:memory",
        "notes.write": f"module:{module}",
    }


async def test_tool_provenance_of_static_and_embedder_sources(
    tmp_path: Path, store: RuntimeStore
) -> None:
    config = agent_config(tmp_path, memory=False)
    assert await sources(config, store, StaticToolSource([notes_read])) == {"notes.read": "test"}
    labelled = StaticToolSource([notes_read], label="embedder:notes")
    assert await sources(config, store, labelled) == {"notes.read": "embedder:notes"}

    class NotesSource:
        """An embedder's own source returning bare tools."""

        async def tools(self, request: ToolRequest) -> Sequence[AuthoredTool]:
            return [notes_read]

    assert await sources(config, store, NotesSource()) == {"notes.read": "source:NotesSource"}


@pytest.mark.parametrize(
    ("effect", "collides_as"),
    [("files.read", "files.read"), ("files_read", "files_read")],
    ids=["same-effect-name", "same-provider-name"],
)
async def test_tool_name_collision_names_both_sources(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: RuntimeStore,
    effect: str,
    collides_as: str,
) -> None:
    module = module_with(tmp_path, monkeypatch, f"hk_provenance_{effect.replace('.', '_')}", effect)
    config = agent_config(tmp_path, memory=False, builtins=["files.read"], tool_modules=[module])
    with pytest.raises(EffectCollision) as raised:
        await sources(config, store, DefaultToolSource(config))
    error = raised.value
    assert isinstance(error, ConfigError)
    assert error.key == f"agents.{AGENT}"
    assert error.name == collides_as.replace(".", "_")
    assert (error.first, error.second) == (
        ("files.read", "builtin:files"),
        (effect, f"module:{module}"),
    )
    assert "builtin:files" in error.message
    assert f"module:{module}" in error.message

    # Through a Host, the turn is refused before it starts, with both sources named.
    model = ScriptedModel([Reply("never")])
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=StoreMemorySource(store),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    )
    async with Host.open(config, capabilities=capabilities) as host:
        with pytest.raises(TurnRejected) as rejected:
            await host.turns.run(request())
    assert "builtin:files" in rejected.value.message
    assert f"module:{module}" in rejected.value.message
    assert model.requests == []


async def test_tool_name_collision_fails_catalog_preparation(
    authority: AuthorityResolver,
) -> None:
    @tool("notes.read")
    async def other_notes(ctx: ToolContext) -> str:
        """Another notes reader."""
        return "other"

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(
                ((notes_read, "module:team_notes"), (other_notes, "mcp:notes-server")),
                EffectPolicy(allow=("*",)),
                Path("/tmp"),
            )

    base = context_for(await authority.for_conversation(facts("provenance")))
    context = TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": ("notes.read",)},
    )
    runtime = EffectRuntime(toolsets=Tools())
    with pytest.raises(EffectCollision) as raised:
        await runtime.prepare_catalog(context)
    assert "module:team_notes" in raised.value.message
    assert "mcp:notes-server" in raised.value.message
