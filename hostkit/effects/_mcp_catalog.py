"""A turn's MCP catalog entries: the ``mcp.connect:<server>`` gate, then discovery.

For each declared server, in name order: authority first (the capability
snapshot and the policy, rechecked on every turn, so a revoked server's
connection is closed before anything else), then reuse of the session's
live connection, then the cached failure, then approval of the connect
(asked unless a rule other than the catch-all ``*`` allows it) and only
then, concurrently through the Host's window, the connector. Entries are
assembled in (server, tool) order, each bound to its connection.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence

import anyio

from hostkit.effects._approvals import ApprovalKey, ApprovalRequest, ApprovalRuntime
from hostkit.effects._catalog import CatalogEntry, provider_name
from hostkit.effects._fingerprint import digest_of
from hostkit.effects._mcp import McpServer, mcp_call_grant, mcp_connect_grant
from hostkit.effects._mcp_pool import McpConnections, McpDiscovery, authority_of
from hostkit.effects._policy import EffectPolicy
from hostkit.effects._redaction import Redactor
from hostkit.errors import ApprovalClosed, bounded
from hostkit.types import TurnExecutionContext, bounded_metadata, new_id

__all__ = ["MCP_WINDOW_SHARE", "mcp_entries"]

_log = logging.getLogger(__name__)

# The discovered tools of all servers together take at most this share of the model's
# window (counted as 4 characters a token), split evenly between the servers that list
# tools: one server's list, hostile or only large, cannot leave the turn no room or crowd
# out another server's tools.
MCP_WINDOW_SHARE = 0.5


async def mcp_entries(
    *,
    pool: McpConnections,
    approvals: ApprovalRuntime,
    context: TurnExecutionContext,
    policy: EffectPolicy,
    servers: Sequence[McpServer],
    taken: Collection[str] = (),
    window_tokens: int | None = None,
) -> tuple[list[CatalogEntry], tuple[McpDiscovery, ...]]:
    """The catalog entries of the declared ``servers`` and one discovery per server.

    ``taken`` are the provider names of the turn's other entries. A discovered
    tool whose name one of them (or an earlier server's tool) already has is
    left out and named in its server's discovery: a name a server chose at run
    time never takes the agent's other tools down with it. With the model's
    ``window_tokens``, so is a tool past its server's share of the window
    (``MCP_WINDOW_SHARE``): nor does the size of what a server lists.
    """
    session, agent = context.session_id, context.core_id
    await pool.retain(session, {server.name for server in servers})
    await pool.sweep()
    principal = context.principal
    if principal.conversation_key is not None:
        await pool.observe_binding(
            (principal.channel or principal.principal_id, principal.conversation_key), session
        )
    if not servers:
        return [], ()  # the common turn: nothing declared, nothing more to do
    granted = context.capability_snapshot.get("effects", ())
    found: dict[str, McpDiscovery] = {}
    approved: list[tuple[McpServer, str]] = []
    for server in sorted(servers, key=lambda s: s.name):
        connect = mcp_connect_grant(server.name)
        call = mcp_call_grant(server.name)
        if connect not in granted or call not in granted:
            missing = connect if connect not in granted else call
            found[server.name] = await pool.denied(
                agent, session, server, f"the agent holds no {missing} capability"
            )
            continue
        decision = policy.decide(connect)
        if decision == "deny":
            found[server.name] = await pool.denied(
                agent, session, server, f"{connect} is denied by the agent's policy"
            )
            continue
        authority = authority_of(principal.principal_id, context.core_id, policy.fingerprint())
        reused = await pool.reusable(agent, session, server, authority)
        if reused is not None:
            found[server.name] = reused
            continue
        failing = pool.failing(agent, server)
        if failing is not None:
            found[server.name] = failing
            continue
        if decision == "ask" or not policy.explicitly_allows(connect):
            refusal = await _approve_connect(approvals, context, policy, server)
            if refusal is not None:
                found[server.name] = await pool.denied(agent, session, server, refusal)
                continue
        approved.append((server, authority))

    async def discover(server: McpServer, authority: str) -> None:
        found[server.name] = await pool.connect(agent, session, server, authority)

    async with anyio.create_task_group() as group:
        for server, authority in approved:
            group.start_soon(discover, server, authority)
    entries: list[CatalogEntry] = []
    used = set(taken)
    connected = {server.name for server, _ in approved}
    listing = sum(1 for discovery in found.values() if discovery.tools)
    share = (
        None
        if window_tokens is None or not listing
        else int(window_tokens * 4 * MCP_WINDOW_SHARE) // listing
    )
    for name in sorted(found):
        discovery = found[name]
        binding = next(s.declaration.digest() for s in servers if s.name == name)
        clashes: list[str] = []
        over: list[str] = []
        spent = 0
        for tool in discovery.tools:
            if policy.decide_call(tool.name, mcp_call_grant(name)) == "deny":
                continue
            if provider_name(tool.name) in used:
                clashes.append(tool.mcp_name)
                continue
            if share is not None and spent + tool.catalog_chars > share:
                over.append(tool.mcp_name)
                continue
            spent += tool.catalog_chars
            used.add(provider_name(tool.name))
            entries.append(
                CatalogEntry(
                    new_id("eff"),
                    tool.name,
                    provider_name(tool.name),
                    tool,
                    f"mcp:{name}",
                    capability=mcp_call_grant(name),
                    binding=binding,
                )
            )
        tool_names = [tool.name for tool in discovery.tools]
        notes = _missed_rules(policy, name, tool_names, log=name in connected)
        if over:
            notes.insert(
                0,
                f"{len(over)} left out, past this server's share of the model's context "
                "window: " + ", ".join(over),
            )
        if clashes:
            notes.insert(0, "left out, their names are taken by other tools: " + ", ".join(clashes))
        if notes:
            detail = "; ".join(part for part in (discovery.detail, *notes) if part)
            found[name] = dataclasses.replace(discovery, detail=bounded(detail, 300))
    return entries, tuple(found[name] for name in sorted(found))


def _missed_rules(
    policy: EffectPolicy, server: str, tools: Sequence[str], *, log: bool
) -> list[str]:
    """One note per ``ask`` or ``deny`` rule written for ``server``'s tools that matches none
    of them but is close to one: a typo, and the tool it meant runs unasked. ``log``: also
    logged (once per connection, not at every turn that reuses it). A server that listed
    no tools, or a rule near none of them, is kept quiet."""
    notes = []
    for kind, rule, meant in policy.near_misses(tools, mcp_server=server):
        notes.append(
            f"the policy's {kind} rule {rule} matches none of its tools (did you mean {meant}?)"
        )
        if log:
            _log.warning("MCP server %s: %s", server, notes[-1])
    return notes


async def _approve_connect(
    approvals: ApprovalRuntime,
    context: TurnExecutionContext,
    policy: EffectPolicy,
    server: McpServer,
) -> str | None:
    """None when the connect is approved; otherwise why not.

    Asked inline and not kept as a durable pending approval: nothing waits on
    a connect, so an unanswered one leaves the server out of this turn and
    the next turn asks again. "Approve for session" is remembered as usual.
    """
    connect = mcp_connect_grant(server.name)
    declaration = server.declaration
    warning = server.connector.approval_warning
    key = ApprovalKey(
        principal_id=context.principal.principal_id,
        session_id=context.session_id,
        policy_fingerprint=digest_of(
            context.core_revision, context.capability_snapshot, declaration.digest()
        ),
        rule_key=policy.rule_key(connect),
        core_id=context.core_id,
    )
    shown: dict[str, object] = {"effect": connect, "arguments": declaration.view()}
    if warning:
        shown["warning"] = warning
    # Declared env values never reach a view, even where an argv repeats one.
    view = bounded_metadata(Redactor.of(dict(declaration.env)).value(shown))

    def ask() -> ApprovalRequest:
        return ApprovalRequest(
            new_id("apr"), key, connect, context.turn_id, view, (), warning=warning
        )

    try:
        outcome = await approvals.resolve(key, ask, approvals.provider)
    except ApprovalClosed as exc:
        return exc.message
    if outcome == "approved":
        return None
    if outcome == "denied":
        return f"the approver denied {connect}"
    return f"{connect} was not approved: nobody answered"
