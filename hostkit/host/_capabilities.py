"""Capability composition (runtime-composition.md in Python): sources, not instances.

A Host asks *sources* for what a turn needs, naming the agent and the config
generation; sources decide how to build and cache. One ``RuntimeCapabilities``
value is immutable for one generation; a live config apply builds a new one,
and turns keep the generation they started with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio
from anyio.abc import AsyncResource

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    ProcessSupervisor,
    RunJournal,
    TerminalRuns,
    load_artifact_key,
)
from hostkit.delivery import OutboundChannel
from hostkit.effects import AuthoredTool, EffectPolicy, McpServer, SourcedTool
from hostkit.host._config import HostConfig
from hostkit.providers import ModelProvider
from hostkit.turns import Observer

__all__ = [
    "AgentMemory",
    "Channel",
    "ChannelSource",
    "McpSource",
    "MemoryRequest",
    "MemorySource",
    "ProcessResources",
    "ProviderRequest",
    "ProviderSource",
    "RecalledItem",
    "RuntimeCapabilities",
    "ToolRequest",
    "ToolSource",
]


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """Which provider an agent needs; ``provider`` is an explicit reference if given."""

    config: HostConfig
    agent: str
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryRequest:
    config: HostConfig
    agent: str


@dataclass(frozen=True, slots=True)
class RecalledItem:
    """One recalled item: its id, which ``forget`` takes, and its text."""

    item_id: int
    text: str


@runtime_checkable
class AgentMemory(Protocol):
    """One agent's memory; items are kept per owner so principals never see each other's.

    ``remember`` records the session and turn that stored an item (its
    provenance); ``forget`` removes one of the owner's own items by id, so a
    full memory can make room again.
    """

    async def recall(self, owner: str, query: str, *, limit: int = 5) -> list[RecalledItem]: ...

    async def remember(
        self, owner: str, text: str, *, session_id: str | None = None, turn_id: str | None = None
    ) -> None: ...

    async def forget(self, owner: str, item_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ProcessResources(AsyncResource):
    """The Host's process lifecycle, shared by every generation's process-starting tools.

    The Host owns the supervisor, so shutting it down ends every process tree
    any generation started. Terminal output goes to opaque per-session
    directories under ``artifact_root``, named with a key kept there. The
    background-run registries live here too, one per workspace, so a run
    started before a configuration reload is still there (and still
    stoppable) after it. With a ``journal`` background runs are durable
    (recorded in the store, announced on completion) and ``recover()`` marks
    a dead Host's runs ``orphaned``.
    """

    supervisor: ProcessSupervisor
    artifact_root: Path
    # The Host's own state (``HostConfig.state_paths()``): never a run's working directory.
    protected: tuple[Path, ...] = ()
    journal: RunJournal | None = None
    # Free bytes terminal output leaves on the artifacts' disk (``host.artifact_reserve_mb``).
    artifact_reserve_bytes: int = 0
    _terminals: dict[Path, TerminalRuns] = field(default_factory=dict)
    _key: list[bytes] = field(default_factory=list)

    async def artifact_key(self) -> bytes:
        """The artifact root's stable key, created on first use (nothing on disk before)."""
        if not self._key:
            self._key.append(await anyio.to_thread.run_sync(load_artifact_key, self.artifact_root))
        return self._key[0]

    async def terminal_runs(self, workspace: Path) -> TerminalRuns:
        """The Host's registry of terminal runs in ``workspace`` (created on first use)."""
        key = await self.artifact_key()
        runs = self._terminals.get(workspace)
        if runs is None:
            runs = self._terminals[workspace] = TerminalRuns(
                supervisor=self.supervisor,
                workspace=WorkspaceScope(workspace, protected=self.protected),
                artifact_root=self.artifact_root,
                artifact_key=key,
                journal=self.journal,
                artifact_reserve_bytes=self.artifact_reserve_bytes,
            )
        return runs

    async def recover(self) -> int:
        """Mark background runs of a dead Host process ``orphaned`` (Host start); how many."""
        return 0 if self.journal is None else await self.journal.recover()

    async def aclose(self) -> None:
        """End every process tree, then close the run registries (Host shutdown)."""
        try:
            await self.supervisor.aclose()
        finally:
            terminals = list(self._terminals.values())
            self._terminals.clear()
            for runs in terminals:
                await runs.aclose()


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """What a ToolSource builds tools against. The Host resolves ``policy``; a source
    cannot supply its own, and building a tool authorizes nothing."""

    config: HostConfig
    agent: str
    policy: EffectPolicy
    workspace: Path
    memory: AgentMemory | None
    processes: ProcessResources | None = None


class ProviderSource(Protocol):
    async def model_provider(self, request: ProviderRequest) -> ModelProvider: ...


class MemorySource(Protocol):
    """Two requests for the same agent in one generation must reach the same store."""

    async def memory(self, request: MemoryRequest) -> AgentMemory: ...


class ToolSource(Protocol):
    """Builds an agent's tools. Each is a ``SourcedTool`` naming where it really comes
    from (``builtin:<family>``, ``module:<name>``, ``mcp:<server>``); a bare
    ``AuthoredTool`` is labelled ``source:<the source's class name>``."""

    async def tools(self, request: ToolRequest) -> Sequence[AuthoredTool | SourcedTool]: ...


class McpSource(Protocol):
    """An agent's declared MCP servers, each with a connector bound to its sandbox, workspace
    and URL policy. Building one starts nothing: connecting is the runtime's gated effect."""

    async def mcp_servers(self, request: ToolRequest) -> Sequence[McpServer]: ...


# An outbound channel: replies by route, approval prompts (``hostkit.delivery``).
Channel = OutboundChannel


class ChannelSource(Protocol):
    """A generation's outbound channels by alias (the ``[channels.<id>]`` id); None fails
    the delivery closed (``no_channel``)."""

    def channel(self, alias: str) -> OutboundChannel | None: ...


@dataclass(frozen=True, slots=True)
class RuntimeCapabilities(AsyncResource):
    """The capability sources of one config generation, plus its process-level observer."""

    providers: ProviderSource
    memory: MemorySource
    tools: ToolSource
    channels: ChannelSource
    observer: Observer | None = None
    mcp: McpSource | None = None

    async def aclose(self) -> None:
        """Close every source that holds resources (idempotent if the sources are).

        Providers first, channels last; every source is closed even when an
        earlier one raises (the first error propagates, later ones chained).
        """
        async with contextlib.AsyncExitStack() as stack:
            for source in (self.channels, self.tools, self.memory, self.providers):
                close = getattr(source, "aclose", None)
                if close is not None:
                    stack.push_async_callback(close)
