"""Capability sources for tests: fixed providers and tools, memory in a dict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hostkit.effects import AuthoredTool, SourcedTool
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.host import (
    AgentMemory,
    DefaultMcpSource,
    DefaultToolSource,
    HostConfig,
    MemoryRequest,
    NoChannels,
    ProviderRequest,
    RecalledItem,
    RuntimeCapabilities,
    ToolRequest,
    memory_tools,
)
from hostkit.providers import ModelProvider
from hostkit.store import (
    MAX_MEMORY_CHARS,
    MAX_MEMORY_CHARS_PER_OWNER,
    MAX_MEMORY_ITEMS_PER_OWNER,
    MAX_RECALL,
)
from hostkit.turns import Observer
from hostkit.types import is_count, is_text

__all__ = [
    "InMemoryMemory",
    "InMemoryMemorySource",
    "StaticProviderSource",
    "StaticToolSource",
    "capabilities",
]


def _kept(limit: object) -> int:
    if not is_count(limit, low=0, high=1_000_000):
        raise InvalidValue("keep_requests must be an integer from 0 to 1000000")
    return limit


def _record(requests: list[Any], request: object, keep: int) -> None:
    """Keep the newest ``keep`` requests: a long-lived Host asks once per turn (each request
    holds the whole configuration), so an unbounded log grows for as long as it runs."""
    requests.append(request)
    if len(requests) > keep:
        del requests[: len(requests) - keep]


class StaticProviderSource:
    """Returns the provider given for each agent (or one provider for all).

    ``requests`` records the last ``keep_requests`` ProviderRequests, like
    ``ScriptedModel.requests``.
    """

    def __init__(
        self,
        providers: ModelProvider | Mapping[str, ModelProvider],
        *,
        keep_requests: int = 1_000,
    ) -> None:
        self._providers = providers
        self._keep = _kept(keep_requests)
        self.requests: list[ProviderRequest] = []

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        _record(self.requests, request, self._keep)
        if isinstance(self._providers, Mapping):
            return self._providers[request.agent]
        return self._providers


class StaticToolSource:
    """Returns the same tools for every agent, plus memory tools when memory is enabled.

    The given tools' provenance is ``label`` (``test`` unless the caller names
    one); memory tools are ``builtin:memory``. ``requests`` keeps the last
    ``keep_requests`` ToolRequests.
    """

    def __init__(
        self,
        tools: Sequence[AuthoredTool] = (),
        *,
        label: str = "test",
        keep_requests: int = 1_000,
    ) -> None:
        self._tools = list(tools)
        self._label = label
        self._keep = _kept(keep_requests)
        self.requests: list[ToolRequest] = []

    async def tools(self, request: ToolRequest) -> Sequence[SourcedTool]:
        _record(self.requests, request, self._keep)
        memory = memory_tools(request.memory) if request.memory is not None else []
        return [
            *(SourcedTool(tool, "builtin:memory") for tool in memory),
            *(SourcedTool(tool, self._label) for tool in self._tools),
        ]


class InMemoryMemory:
    """Substring-match memory partitioned by owner.

    As strict as the store's memory (same text, per-owner and limit rules, ids
    that ``forget`` takes, another owner's id not found), so a test cannot pass
    on input the real one refuses. ``items`` maps each owner to its item ids
    and texts; ``origins`` each id to the (session, turn) that stored it.
    """

    def __init__(self) -> None:
        self.items: dict[str, dict[int, str]] = {}
        self.origins: dict[int, tuple[str | None, str | None]] = {}
        self._next_id = 1

    async def remember(
        self, owner: str, text: str, *, session_id: str | None = None, turn_id: str | None = None
    ) -> None:
        if not is_text(text, limit=MAX_MEMORY_CHARS) or not text.strip() or "\x00" in text:
            raise InvalidValue(f"a memory is 1 to {MAX_MEMORY_CHARS} characters of text, no NUL")
        kept = self.items.setdefault(owner, {})
        chars = sum(map(len, kept.values()))
        full = len(kept) >= MAX_MEMORY_ITEMS_PER_OWNER
        if full or chars + len(text) > MAX_MEMORY_CHARS_PER_OWNER:
            raise InvalidValue(
                f"memory is full: {len(kept)} items / {chars} characters for this person and agent"
            )
        kept[self._next_id] = text
        self.origins[self._next_id] = (session_id, turn_id)
        self._next_id += 1

    async def recall(self, owner: str, query: str, *, limit: int = 5) -> list[RecalledItem]:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidValue("limit must be an integer")
        words = query.lower().split()
        found = [
            RecalledItem(item_id, text)
            for item_id, text in self.items.get(owner, {}).items()
            if any(w in text.lower() for w in words)
        ]
        return found[: max(1, min(limit, MAX_RECALL))]

    async def forget(self, owner: str, item_id: int) -> None:
        if isinstance(item_id, bool) or not isinstance(item_id, int) or item_id < 1:
            raise InvalidValue("a memory item id is a positive integer")
        if self.items.get(owner, {}).pop(item_id, None) is None:
            raise NotFoundOrUnauthorized("memory item")
        del self.origins[item_id]


class InMemoryMemorySource:
    """One InMemoryMemory per agent."""

    def __init__(self) -> None:
        self.by_agent: dict[str, InMemoryMemory] = {}

    async def memory(self, request: MemoryRequest) -> AgentMemory:
        return self.by_agent.setdefault(request.agent, InMemoryMemory())


def capabilities(
    provider: ModelProvider | Mapping[str, ModelProvider],
    *,
    tools: Sequence[AuthoredTool] = (),
    observer: Observer | None = None,
    config: HostConfig | None = None,
) -> RuntimeCapabilities:
    """Capabilities for a test Host: given providers and tools, in-memory memory.

    With ``config``, the agents' configured ``builtins`` (files, web,
    terminal) and declared MCP servers come too, built by the Host's own sources.
    """
    source: StaticToolSource | _WithBuiltins = StaticToolSource(tools)
    if config is not None:
        source = _WithBuiltins(StaticToolSource(tools), DefaultToolSource(config))
    return RuntimeCapabilities(
        providers=StaticProviderSource(provider),
        memory=InMemoryMemorySource(),
        tools=source,
        channels=NoChannels(),
        observer=observer,
        mcp=None if config is None else DefaultMcpSource(config),
    )


class _WithBuiltins:
    """The given tools plus the configured builtins."""

    def __init__(self, given: StaticToolSource, builtins: DefaultToolSource) -> None:
        self._given = given
        self._builtins = builtins

    async def tools(self, request: ToolRequest) -> Sequence[SourcedTool]:
        given = list(await self._given.tools(request))
        names = {item.tool.name for item in given}
        # Memory comes from the given source (in-memory); a configured builtin of the
        # same name beside it is not a collision but the same family twice.
        extra = [
            item
            for item in await self._builtins.tools(request)
            if not (item.source == "builtin:memory" and item.tool.name in names)
        ]
        return [*given, *extra]
