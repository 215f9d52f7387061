"""The per-turn effect catalog: final definitions plus opaque resolved references."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hostkit.effects._authored import AuthoredTool
from hostkit.errors import ConfigError, bounded
from hostkit.types import ResolvedEffectRef, ToolDefinition, new_id

if TYPE_CHECKING:
    from hostkit.effects._mcp_pool import McpDiscovery

__all__ = [
    "CatalogEntry",
    "EffectCollision",
    "PreparedEffectCatalog",
    "SourcedTool",
    "check_collisions",
    "provider_name",
]


def provider_name(effect: str) -> str:
    """The provider-visible function name of a dotted effect name (providers forbid dots)."""
    return effect.replace(".", "_")


@dataclass(frozen=True, slots=True)
class SourcedTool:
    """A tool with its provenance: where it really comes from, for display and collisions.

    ``source`` is ``builtin:<family>`` (files, web, terminal, memory),
    ``module:<python module>`` for an agent's ``tool_modules``,
    ``mcp:<server>`` (reserved for MCP discovery), or a label a test or an
    embedder's own tool source chose.
    """

    tool: AuthoredTool
    source: str


class EffectCollision(ConfigError):
    """Two tools of one turn would share a name, so dispatch could not tell them apart.

    Either both have the same effect name, or two effect names map to the same
    provider-visible name (``a.b`` and ``a_b``). ``first`` and ``second`` are
    ``(effect, source)`` of the two; the message names both sources.
    """

    def __init__(
        self,
        name: str,
        first: tuple[str, str],
        second: tuple[str, str],
        *,
        key: str | None = None,
    ) -> None:
        self.name = name
        self.first = first
        self.second = second
        if first[0] == second[0]:
            message = f"two tools collide as effect {first[0]!r}: from {first[1]} and {second[1]}"
        else:
            message = (
                f"effects {first[0]!r} from {first[1]} and {second[0]!r} from {second[1]} "
                f"collide as {name!r}"
            )
        super().__init__(bounded(message, 400), key=key)


def check_collisions(tools: Iterable[tuple[str, str]], *, key: str | None = None) -> None:
    """Raise ``EffectCollision`` for the first two ``(effect, source)`` sharing a name.

    ``key`` is the configuration key the error names (``agents.<name>``).
    """
    seen: dict[str, tuple[str, str]] = {}
    for effect, source in tools:
        name = provider_name(effect)
        previous = seen.get(name)
        if previous is not None:
            raise EffectCollision(name, previous, (effect, source), key=key)
        seen[name] = (effect, source)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One resolved effect: what the definition, display, policy and dispatch all share.

    ``capability`` is what the turn's snapshot must hold to run it (the effect
    itself when None; ``mcp.call:<server>`` for an MCP tool, whose names are
    discovered after the snapshot was pinned). ``binding`` names the
    connection's declaration for a connection-bound entry.
    """

    entry_id: str
    effect: str
    provider_name: str
    tool: AuthoredTool
    source: str
    capability: str | None = None
    binding: str | None = None


class PreparedEffectCatalog:
    """Frozen for one turn: definitions for the provider, references for execute().

    The model loop resolves a returned tool name only through this catalog;
    the returned reference is bound to this catalog and turn and is refused by
    any other. ``close()`` releases the catalog (idempotent). Raises
    ``EffectCollision`` when two entries would share a name.
    """

    def __init__(
        self,
        *,
        turn_id: str,
        session_id: str,
        entries: tuple[CatalogEntry, ...],
        discoveries: tuple[McpDiscovery, ...] = (),
    ) -> None:
        self.catalog_id = new_id("cat")
        # One ``McpDiscovery`` per declared MCP server: connected, failing or denied, and why.
        self.discoveries = discoveries
        self.turn_id = turn_id
        self.session_id = session_id
        check_collisions((entry.effect, entry.source) for entry in entries)
        self._by_name: Mapping[str, CatalogEntry] = {e.provider_name: e for e in entries}
        self._by_id: Mapping[str, CatalogEntry] = {e.entry_id: e for e in entries}
        self.definitions: tuple[ToolDefinition, ...] = tuple(
            ToolDefinition(e.provider_name, e.tool.description, e.tool.parameters) for e in entries
        )
        self.closed = False

    @property
    def effects(self) -> tuple[str, ...]:
        return tuple(entry.effect for entry in self._by_id.values())

    @property
    def entries(self) -> tuple[CatalogEntry, ...]:
        return tuple(self._by_id.values())

    def resolve(self, name: str) -> ResolvedEffectRef | None:
        """The reference for a provider-visible name, or None if this turn has no such effect."""
        entry = self._by_name.get(name)
        if entry is None or self.closed:
            return None
        return ResolvedEffectRef(self.catalog_id, entry.entry_id, entry.effect)

    def entry(self, ref: ResolvedEffectRef) -> CatalogEntry | None:
        if self.closed or ref.catalog_id != self.catalog_id:
            return None
        entry = self._by_id.get(ref.entry_id)
        return entry if entry is not None and entry.effect == ref.effect else None

    async def close(self) -> None:
        self.closed = True
