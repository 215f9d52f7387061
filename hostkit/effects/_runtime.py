"""EffectRuntime: the one pipeline every effect invocation follows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

from hostkit.effects._authored import AuthoredTool, ToolContext
from hostkit.effects._catalog import CatalogEntry, PreparedEffectCatalog, provider_name
from hostkit.effects._policy import EffectPolicy
from hostkit.effects._views import render_output, result
from hostkit.errors import InvalidValue, UserError, bounded
from hostkit.types import (
    EffectRequest,
    EffectResult,
    EffectStatus,
    TurnExecutionContext,
    new_id,
)

__all__ = ["EffectRuntime", "Toolset", "ToolsetProvider"]


@dataclass(frozen=True, slots=True)
class Toolset:
    """The effects one turn may see, already filtered by the agent's resolved policy."""

    tools: tuple[tuple[AuthoredTool, str], ...]
    policy: EffectPolicy
    workspace: Path


class ToolsetProvider(Protocol):
    """Supplies a turn's toolset from the generation pinned in its context."""

    async def toolset(self, context: TurnExecutionContext) -> Toolset: ...


class EffectRuntime:
    """``execute(EffectRequest, TurnExecutionContext) -> EffectResult`` plus the catalog seam.

    Order for every invocation: validate the request and its catalog binding;
    check the turn owns the catalog; require the effect in the pinned
    capability snapshot; validate arguments; apply policy; invoke under a
    deadline; build bounded views. Nothing is invoked before those checks
    pass. Cancellation of the caller propagates (the turn records it).
    """

    def __init__(self, *, toolsets: ToolsetProvider) -> None:
        self._toolsets = toolsets
        self._catalogs: dict[str, tuple[PreparedEffectCatalog, Toolset]] = {}

    async def prepare_catalog(self, context: TurnExecutionContext) -> PreparedEffectCatalog:
        """Freeze this turn's definitions and references (effects issue adds MCP discovery)."""
        toolset = await self._toolsets.toolset(context)
        entries = tuple(
            CatalogEntry(new_id("eff"), tool.name, provider_name(tool.name), tool, source)
            for tool, source in toolset.tools
            if tool.name in context.capability_snapshot.get("effects", ())
        )
        catalog = PreparedEffectCatalog(
            turn_id=context.turn_id, session_id=context.session_id, entries=entries
        )
        self._catalogs[catalog.catalog_id] = (catalog, toolset)
        return catalog

    async def close_catalog(self, catalog: PreparedEffectCatalog) -> None:
        self._catalogs.pop(catalog.catalog_id, None)
        await catalog.close()

    async def execute(self, request: EffectRequest, context: TurnExecutionContext) -> EffectResult:
        """Run one effect through the pipeline; returns a typed result, never adapter errors."""
        call_id, effect = request.call_id, request.ref.effect

        def refused(status: EffectStatus, error: str) -> EffectResult:
            # Every refusal happens before invocation: started=False, nothing for the model.
            return result(
                call_id=call_id,
                effect=effect,
                status=status,
                started=False,
                model_text="",
                error=error,
            )

        bound = self._catalogs.get(request.ref.catalog_id)
        entry = bound[0].entry(request.ref) if bound else None
        if bound is None or entry is None:
            return refused("not_found", "no such effect in this turn's catalog")
        catalog, toolset = bound
        if (catalog.turn_id, catalog.session_id) != (context.turn_id, context.session_id):
            return refused("denied", "the catalog belongs to another turn")
        if effect not in context.capability_snapshot.get("effects", ()):
            return refused("denied", "the effect is not in the turn's capability snapshot")
        try:
            arguments = entry.tool.validate(request.arguments)
        except InvalidValue as exc:
            return refused("invalid", exc.message)
        if entry.tool.preflight is not None:
            try:
                entry.tool.preflight(arguments)
            except UserError as exc:
                return refused("denied", exc.message)
        if toolset.policy.decide(effect) != "allow":
            return refused("denied", "denied by the agent's effect policy")
        return await self._invoke(call_id, entry, arguments, context, toolset.workspace)

    async def _invoke(
        self,
        call_id: str,
        entry: CatalogEntry,
        arguments: dict[str, object],
        context: TurnExecutionContext,
        workspace: Path,
    ) -> EffectResult:
        tool_context = ToolContext(
            turn_id=context.turn_id,
            session_id=context.session_id,
            core_id=context.core_id,
            owner=context.principal.principal_id,
            workspace=workspace,
        )
        effect = entry.effect
        try:
            with anyio.fail_after(entry.tool.timeout_s):
                output = await entry.tool.invoke(tool_context, arguments)
        except TimeoutError:
            return result(
                call_id=call_id,
                effect=effect,
                status="timed_out",
                started=True,
                model_text="",
                error=f"timed out after {entry.tool.timeout_s:g}s",
            )
        except Exception as exc:
            return result(
                call_id=call_id,
                effect=effect,
                status="failed",
                started=True,
                model_text="",
                error=bounded(f"{type(exc).__name__}: {exc}", 300),
            )
        text, size, truncated = render_output(output)
        return result(
            call_id=call_id,
            effect=effect,
            status="succeeded",
            started=True,
            model_text=text,
            size=size,
            truncated=truncated,
        )
