"""The operator's view of MCP servers: each agent's declared servers joined with their last status.

Built from the configuration (what is declared) and the store's
``mcp_servers`` rows (what the Host last knew), never from a connection:
reading it starts no server and opens no socket. A declared server with no
row was never connected; a row whose server is no longer declared is shown
as ``removed``. Declarations are their secret-safe view (env names only,
URLs without credentials).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import FrozenMap, freeze, thaw
from hostkit.host import HostConfig
from hostkit.inspect._source import Source, id_arg, store_of
from hostkit.types import McpServerStatus, McpToolRow, safe_argv, url_view

__all__ = ["McpServerRow", "McpServerRows", "mcp_server_rows", "mcp_server_view"]

McpRowState = Literal["connected", "failing", "denied", "closed", "never connected", "removed"]


@dataclass(frozen=True, slots=True)
class McpServerRow:
    """One server of one agent, as an operator sees it.

    ``state`` is the stored state, ``never connected`` (declared, no row) or
    ``removed`` (a row, no longer declared). ``target`` is the argv joined
    by spaces or the URL. ``changed`` says the stored status was recorded
    for a declaration other than today's (a status recorded without its
    declaration is taken to be of today's). ``provenance`` (``mcp:<server>``)
    is what each of its tools is traced to.
    """

    agent: str
    server: str
    state: McpRowState
    transport: str
    target: str
    env: tuple[str, ...]
    network: bool
    detail: str
    tools: tuple[McpToolRow, ...]
    provenance: str
    failing_until: float | None = None
    updated_at: float | None = None
    changed: bool = False
    declaration: Mapping[str, Any] = field(default_factory=FrozenMap)


@dataclass(frozen=True, slots=True)
class McpServerRows:
    """Every row, ordered by agent, then server."""

    servers: tuple[McpServerRow, ...]


def mcp_server_rows(
    config: HostConfig, statuses: Sequence[McpServerStatus], *, agent: str | None = None
) -> McpServerRows:
    """Join the declared servers of ``config`` (of ``agent``, or all) with ``statuses``.

    ``config`` is the one the Host runs (``host.config``): each Agent Core it
    could load is an agent there, declaring what its live revision's
    ``agent.yaml`` declares. A core under ``[cores]`` that is not among its
    agents (not live, or not loadable) has no known declarations: its
    statuses are left out, not shown as ``removed``. An ``agent`` that is
    neither an agent, nor a core, nor in any status is ``InvalidValue``.
    """
    names = {*config.agents, *config.cores}
    agent = None if agent is None else id_arg("agent", agent)
    if agent is not None and agent not in names and not any(s.agent == agent for s in statuses):
        known = ", ".join(sorted(names)[:20]) or "none"
        raise InvalidValue(
            f"no agent named {bounded(agent, 60)!r} in the configuration (agents: {known})"
        )
    unknown = set(config.cores) - set(config.agents)
    stored = {
        (s.agent, s.server): s
        for s in statuses
        if (agent is None or s.agent == agent) and s.agent not in unknown
    }
    rows: dict[tuple[str, str], McpServerRow] = {}
    for name, settings in config.agents.items():
        if agent is not None and name != agent:
            continue
        for server, declared in settings.mcp.items():
            view = declared.declaration(server).view()
            rows[(name, server)] = _row(name, server, view, stored.get((name, server)))
    for key, status in stored.items():
        if key not in rows:
            rows[key] = _row(status.agent, status.server, status.declaration, status, removed=True)
    return McpServerRows(tuple(rows[key] for key in sorted(rows)))


async def mcp_server_view(
    source: Source, config: HostConfig, *, agent: str | None = None
) -> McpServerRows:
    """``mcp_server_rows`` over the statuses in ``source``'s store (a read; no connection)."""
    statuses = await store_of(source).mcp_servers.mcp_statuses()
    return mcp_server_rows(config, statuses, agent=agent)


def _row(
    agent: str,
    server: str,
    view: Mapping[str, Any],
    status: McpServerStatus | None,
    *,
    removed: bool = False,
) -> McpServerRow:
    plain = _shown(view)
    transport = str(plain.get("transport", ""))
    if "command" in plain:
        target = " ".join(str(arg) for arg in plain["command"])
    else:
        target = str(plain.get("url", ""))
    state: McpRowState = "removed" if removed else status.state if status else "never connected"
    return McpServerRow(
        agent=agent,
        server=server,
        state=state,
        transport=transport,
        target=target,
        env=tuple(str(name) for name in plain.get("env", ())),
        network=bool(plain.get("network", False)),
        detail=status.detail if status else "",
        tools=status.tools if status else (),
        provenance=f"mcp:{server}",
        failing_until=status.failing_until if status else None,
        updated_at=status.updated_at if status else None,
        changed=_changed(status, plain) if not removed else False,
        declaration=freeze(plain),
    )


def _changed(status: McpServerStatus | None, declared: dict[str, Any]) -> bool:
    if status is None or not status.declaration:
        return False
    return bool(_shown(status.declaration) != declared)


def _shown(view: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration's view redacted as today's views are: one stored by an older
    version (or of a server since removed) may hold what a view now hides."""
    plain = thaw(view) if view else {}
    if isinstance(plain.get("command"), list):
        plain["command"] = safe_argv((str(arg) for arg in plain["command"]), ())
    if isinstance(plain.get("url"), str):
        plain["url"] = url_view(plain["url"])[0]
    return plain
