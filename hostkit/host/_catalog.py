"""An agent's tool catalog as the Host would offer it now, each tool with its provenance.

Read, never connected: the static tools come from the current generation
(what a new turn pins), an MCP server's tools from the given session's live
connection, and a declared server without one is reported with the state
the store last recorded for it. Starting a server only to list its tools
would bypass the ``mcp.connect`` gate, so a catalog never does.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.effects import (
    McpConnections,
    PolicyDecision,
    mcp_call_grant,
    mcp_connect_grant,
    provider_name,
)
from hostkit.errors import InvalidValue, bounded
from hostkit.host._generation import Generation
from hostkit.store import RuntimeStore
from hostkit.types import McpServerStatus, plain_text

__all__ = ["CatalogServer", "CatalogTool", "ToolCatalog", "tool_catalog"]

MAX_DESCRIPTION_CHARS = 200
_MAX_KNOWN = 20
# The longest agent name and session id a catalog is asked for.
_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """One tool on offer: its effect, the name the model sees, where it comes from.

    ``source`` is ``builtin:<family>``, ``module:<name>``, ``mcp:<server>`` or
    a tool source's own label; ``decision`` is the policy's (never ``deny``:
    denied tools are not on offer).
    """

    effect: str
    provider_name: str
    source: str
    description: str
    decision: PolicyDecision


@dataclass(frozen=True, slots=True)
class CatalogServer:
    """A declared MCP server with no live connection in the session.

    ``status`` is the last one stored (None: never connected); ``connect`` is
    the policy's decision for ``mcp.connect:<server>``.
    """

    server: str
    status: McpServerStatus | None
    connect: PolicyDecision


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    """What ``Host.tool_catalog`` returns: tools in catalog order, then the offline servers."""

    agent: str
    session_id: str | None
    generation: int
    tools: tuple[CatalogTool, ...]
    servers: tuple[CatalogServer, ...]


async def tool_catalog(
    generation: Generation,
    connections: McpConnections,
    store: RuntimeStore,
    agent: str,
    *,
    session_id: str | None = None,
) -> ToolCatalog:
    """``agent``'s catalog in ``generation``, with ``session_id``'s live MCP tools.

    An agent the generation does not configure is ``InvalidValue``, and so is an
    argument of another type (checked before it is compared, hashed or quoted).
    """
    if not isinstance(agent, str):
        raise InvalidValue(
            f"agent must be an agent's name, not {bounded(type(agent).__name__, 60)}"
        )
    name = str.__str__(agent)  # a plain copy: a subclass's own methods never run here
    if session_id is not None:
        session_id = plain_text(session_id, limit=_MAX_ID)
        if session_id is None:
            raise InvalidValue(f"session_id must be None or a session id of 1-{_MAX_ID} characters")
    agent = name
    if agent not in generation.config.agents:
        known = ", ".join(sorted(generation.config.agents)[:_MAX_KNOWN]) or "none"
        raise InvalidValue(bounded(f"no agent named {bounded(agent, 60)!r} (agents: {known})", 400))
    pinned = await generation.agent_tools(agent)
    policy = pinned.policy
    tools = [
        _row(tool.name, source, tool.description, policy.decide(tool.name))
        for tool, source in pinned.tools
    ]
    live = connections.session_tools(session_id, agent) if session_id is not None else {}
    stored = {status.server: status for status in await store.mcp_servers.mcp_statuses(agent)}
    servers: list[CatalogServer] = []
    for server in sorted(pinned.mcp_servers, key=lambda s: s.name):
        connect = policy.decide(mcp_connect_grant(server.name))
        if policy.decide(mcp_call_grant(server.name)) == "deny":
            connect = "deny"  # the generation pins neither grant: the server cannot be used
        digest, discovered = live.get(server.name, ("", ()))
        if connect == "deny" or digest != server.declaration.digest():
            servers.append(CatalogServer(server.name, stored.get(server.name), connect))
            continue
        tools.extend(
            _row(tool.name, f"mcp:{server.name}", tool.description, decision)
            for tool in discovered
            if (decision := policy.decide_call(tool.name, mcp_call_grant(server.name))) != "deny"
        )
    return ToolCatalog(agent, session_id, generation.number, tuple(tools), tuple(servers))


def _row(effect: str, source: str, description: str, decision: PolicyDecision) -> CatalogTool:
    text = " ".join(description.split())
    return CatalogTool(
        effect, provider_name(effect), source, bounded(text, MAX_DESCRIPTION_CHARS), decision
    )
