"""The catalog view: an agent's tools with their provenance, and its MCP servers not connected.

Drawn from ``Host.tool_catalog``: one row per tool on offer (``builtin:files``,
``module:x``, ``mcp:<server>``) with the policy's decision as its state, then
one row per declared MCP server that has no live connection in the session,
with what the Host last recorded of it. Reading it connects nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hostkit.effects import mcp_connect_grant
from hostkit.host import CatalogServer, Host, ToolCatalog

__all__ = ["CatalogRow", "CatalogState", "CatalogView", "catalog_rows", "catalog_view"]

CatalogState = Literal[
    "allowed",
    "asks first",
    "connected elsewhere",
    "failing",
    "denied",
    "closed",
    "never connected",
]


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """A tool on offer (``effect`` set) or a declared server without a connection (``effect`` "").

    A tool's ``state`` is ``allowed`` or ``asks first``. A server's is
    ``connected elsewhere`` (another session holds it), ``failing`` (until
    ``failing_until``, wall clock), ``denied`` (by policy or at the last
    attempt), ``closed`` or ``never connected``; ``description`` then says why.
    """

    effect: str
    provider_name: str
    source: str
    description: str
    state: CatalogState
    failing_until: float | None = None


@dataclass(frozen=True, slots=True)
class CatalogView:
    """The rows of one agent's catalog, tools first (in catalog order), then servers by name."""

    agent: str
    session_id: str | None
    generation: int
    rows: tuple[CatalogRow, ...]

    @property
    def tools(self) -> tuple[CatalogRow, ...]:
        return tuple(row for row in self.rows if row.effect)

    @property
    def servers(self) -> tuple[CatalogRow, ...]:
        return tuple(row for row in self.rows if not row.effect)


def catalog_rows(catalog: ToolCatalog) -> CatalogView:
    """The view of a ``ToolCatalog``."""
    tools = [
        CatalogRow(
            tool.effect,
            tool.provider_name,
            tool.source,
            tool.description,
            "asks first" if tool.decision == "ask" else "allowed",
        )
        for tool in catalog.tools
    ]
    servers = [_server_row(server, catalog.session_id) for server in catalog.servers]
    return CatalogView(catalog.agent, catalog.session_id, catalog.generation, (*tools, *servers))


async def catalog_view(host: Host, agent: str, *, session_id: str | None = None) -> CatalogView:
    """``catalog_rows`` of ``host.tool_catalog(agent, session_id=...)``."""
    return catalog_rows(await host.tool_catalog(agent, session_id=session_id))


def _server_row(server: CatalogServer, session_id: str | None) -> CatalogRow:
    source = f"mcp:{server.server}"
    if server.connect == "deny":
        why = f"{mcp_connect_grant(server.server)} is denied by the agent's policy"
        return CatalogRow("", "", source, why, "denied")
    status = server.status
    if status is None:
        return CatalogRow("", "", source, "", "never connected")
    if status.state == "connected":
        tools = len(status.tools)
        where = "another session" if session_id is not None else "a session"
        why = f"{tools} tool{'' if tools == 1 else 's'}, in {where}"
        return CatalogRow("", "", source, why, "connected elsewhere")
    return CatalogRow("", "", source, status.detail, status.state, status.failing_until)
