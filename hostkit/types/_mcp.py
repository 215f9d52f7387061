"""What the Host last knew of one declared MCP server, for operators (``hostkit mcp list``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hostkit.freeze import FrozenMap

__all__ = ["McpServerState", "McpServerStatus", "McpToolRow"]

# connected: a session holds a live connection and its tools are listed;
# failing: the last connect or discovery failed, retried after ``failing_until``;
# denied: the agent's capabilities or policy refuse ``mcp.connect:<server>``, or the
# approver did; closed: every connection ended (Host shutdown, removal, eviction).
McpServerState = Literal["connected", "failing", "denied", "closed"]


@dataclass(frozen=True, slots=True)
class McpToolRow:
    """One discovered tool: its effect name, the server's own name for it, its description."""

    effect: str
    name: str
    description: str


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    """The latest state of (agent, server), kept in the store across processes.

    ``detail`` is a bounded, secret-free reason; ``failing_until`` and
    ``updated_at`` are wall-clock times; ``declaration`` is the secret-safe view
    (env names, never values).
    """

    agent: str
    server: str
    state: McpServerState
    detail: str = ""
    tools: tuple[McpToolRow, ...] = ()
    failing_until: float | None = None
    updated_at: float = 0.0
    declaration: Mapping[str, Any] = field(default_factory=FrozenMap)
