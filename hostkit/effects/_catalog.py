"""The per-turn effect catalog: final definitions plus opaque resolved references."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hostkit.effects._authored import AuthoredTool
from hostkit.errors import InvalidValue
from hostkit.types import ResolvedEffectRef, ToolDefinition, new_id

__all__ = ["CatalogEntry", "PreparedEffectCatalog", "provider_name"]


def provider_name(effect: str) -> str:
    """The provider-visible function name of a dotted effect name (providers forbid dots)."""
    return effect.replace(".", "_")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One resolved effect: what the definition, display, policy and dispatch all share."""

    entry_id: str
    effect: str
    provider_name: str
    tool: AuthoredTool
    source: str


class PreparedEffectCatalog:
    """Frozen for one turn: definitions for the provider, references for execute().

    The model loop resolves a returned tool name only through this catalog;
    the returned reference is bound to this catalog and turn and is refused by
    any other. ``close()`` releases the catalog (idempotent).
    """

    def __init__(self, *, turn_id: str, session_id: str, entries: tuple[CatalogEntry, ...]) -> None:
        self.catalog_id = new_id("cat")
        self.turn_id = turn_id
        self.session_id = session_id
        by_name: dict[str, CatalogEntry] = {}
        for entry in entries:
            previous = by_name.get(entry.provider_name)
            if previous is not None:
                raise InvalidValue(
                    f"effect name collision on {entry.provider_name!r}: "
                    f"{previous.effect} from {previous.source} "
                    f"and {entry.effect} from {entry.source}"
                )
            by_name[entry.provider_name] = entry
        self._by_name: Mapping[str, CatalogEntry] = by_name
        self._by_id: Mapping[str, CatalogEntry] = {e.entry_id: e for e in entries}
        self.definitions: tuple[ToolDefinition, ...] = tuple(
            ToolDefinition(e.provider_name, e.tool.description, e.tool.parameters) for e in entries
        )
        self.closed = False

    @property
    def effects(self) -> tuple[str, ...]:
        return tuple(entry.effect for entry in self._by_id.values())

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
