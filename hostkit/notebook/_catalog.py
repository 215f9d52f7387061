"""CatalogInspector: an agent's tools with where each comes from, and its unconnected MCP servers.

Drawn only from ``hostkit.inspect.CatalogView``. Tool names, descriptions
and server details may have been written by an MCP server, so every cell is
escaped; the plain text is what ``text()`` and non-widget front ends show.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import ipywidgets as widgets

from hostkit.host import Host
from hostkit.inspect import CatalogRow, CatalogView, catalog_view
from hostkit.notebook._inspector_html import panel_html, row_html, table_html, title_html
from hostkit.notebook._inspectors import _Inspector

__all__ = ["CatalogInspector", "state_text"]

_TOOL_COLUMNS = ("effect", "model sees", "source", "state", "description")
_SERVER_COLUMNS = ("server", "state", "detail")


def state_text(row: CatalogRow) -> str:
    """``failing until HH:MM:SS`` (local time) for a failing server, else the row's state."""
    if row.state == "failing" and row.failing_until is not None:
        return f"failing until {time.strftime('%H:%M:%S', time.localtime(row.failing_until))}"
    return row.state


class CatalogInspector(_Inspector):
    """One agent's catalog: a table of tools with their provenance, then one of offline servers."""

    def __init__(self, view: CatalogView) -> None:
        self.model = view
        tools = view.tools
        servers = view.servers
        parts = [title_html("tool catalog", *_facts(view))]
        if tools:
            body = "".join(
                row_html(r.effect, r.provider_name, r.source, state_text(r), r.description)
                for r in tools
            )
            parts.append(table_html(_TOOL_COLUMNS, body))
        else:
            parts.append("<i>no tools on offer</i>")
        if servers:
            parts.append("<div><b>MCP servers without a connection in this session</b></div>")
            body = "".join(row_html(r.source, state_text(r), r.description) for r in servers)
            parts.append(table_html(_SERVER_COLUMNS, body))
        super().__init__(children=[widgets.HTML(panel_html(*parts))])

    @classmethod
    async def load(
        cls, host: Host, agent: str, *, session_id: str | None = None
    ) -> CatalogInspector:
        """The inspector of ``host.tool_catalog(agent, session_id=...)``."""
        return cls(await catalog_view(host, agent, session_id=session_id))

    def html(self) -> str:
        """The rendered HTML (what the widget shows)."""
        return "".join(child.value for child in self.children if isinstance(child, widgets.HTML))

    def text(self) -> str:
        view = self.model
        session = "" if view.session_id is None else f" in session {view.session_id}"
        lines = [f"tool catalog of {view.agent}{session}"]
        tools = [(r.effect, r.source, state_text(r)) for r in view.tools]
        lines.extend(_aligned(tools) or ["  no tools on offer"])
        if view.servers:
            lines.append("MCP servers without a connection in this session:")
            servers = [(r.source, state_text(r), r.description) for r in view.servers]
            lines.extend(_aligned(servers))
        return "\n".join(lines)


def _facts(view: CatalogView) -> tuple[tuple[str, str], ...]:
    facts = [("agent", view.agent)]
    if view.session_id is not None:
        facts.append(("session", view.session_id))
    return tuple(facts)


def _aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows as indented, space-aligned columns (the last column is not padded)."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        (
            "  "
            + "".join(f"{cell.ljust(width)}  " for cell, width in zip(row, widths, strict=False))
            + row[-1]
        ).rstrip()
        for row in rows
    ]
