"""The secret-safe MCP security diff an operator reviews before a promotion.

An MCP server runs code or reaches a service with the core's authority, so a
change of what it is, or of what the core lets it do, needs a human to look.
"What it may do" is judged on the compiled policy (``effect_policy``), not
on the rules as written: the effective decision for ``mcp.connect:<server>``
and the rules that reach the server's tools (``mcp.<server>.*``), and what the
connector reaches the server under (``McpConnector.identity``): for a stdio
server the core's ``sandbox`` (``none`` runs it unsandboxed) and
``workspace`` (its working directory and only writable bind), for an HTTP
server the core's ``url_allow_private`` (the addresses it may reach). What
they look at is recorded and shown in CLIs and widgets, so it must never
carry a secret: env entries appear by NAME only ("set", "changed",
"removed"), a URL only as its origin, and argv goes through the one
redaction of ``hostkit.cores._redact`` (the patch uses it too). Its review
token (``hostkit.cores._review``) binds the operator's "yes" to this exact
diff between these two commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hostkit.cores._manifest import CoreManifest, effect_policy
from hostkit.cores._redact import manifest_secrets, origin, safe_argv
from hostkit.effects import EffectPolicy, McpServerConfig, PolicyDecision

__all__ = ["mcp_security_diff"]

_CONNECT = "mcp.connect:"
_FIELDS = ("command", "url", "env", "network", "connect_timeout_seconds", "call_timeout_seconds")
# View keys that come from the core's policy, sandbox, workspace or URL policy rather
# than the declaration.
_AUTHORITY = ("sandbox", "workspace", "url_allow_private", "connect", "tools")
_DECISIONS: tuple[PolicyDecision, ...] = ("deny", "ask", "allow")


def mcp_security_diff(live: CoreManifest | None, candidate: CoreManifest) -> dict[str, Any]:
    """What changes from ``live`` to ``candidate`` in MCP declarations and their authority.

    ``{}`` when nothing changed. Otherwise ``{"servers": {name: {...}}}`` with
    one entry per added, removed or changed server, each with ``change``,
    ``before``/``after`` views (transport, argv, url origin, env names,
    network, timeouts; for stdio the ``sandbox`` and ``workspace``, for HTTP
    the ``url_allow_private`` networks; the effective ``connect``
    decision and the ``tools`` rules with their decisions) and, for a changed
    server, the ``fields`` that differ and per env name
    ``set``/``changed``/``removed``.
    """
    before = live.mcp if live is not None else {}
    after = candidate.mcp
    secrets = manifest_secrets(live, candidate)
    old_policy = effect_policy(live) if live is not None else EffectPolicy(allow=())
    new_policy = effect_policy(candidate)
    servers: dict[str, Any] = {}
    for name in sorted({*before, *after}):
        old, new = before.get(name), after.get(name)
        old_view = (
            None if old is None or live is None else _view(name, old, live, old_policy, secrets)
        )
        new_view = None if new is None else _view(name, new, candidate, new_policy, secrets)
        if old == new and old_view == new_view:
            continue
        entry: dict[str, Any] = {"before": old_view, "after": new_view}
        if old is None or old_view is None:
            entry["change"] = "added"
        elif new is None or new_view is None:
            entry["change"] = "removed"
        else:
            entry["change"] = "changed"
            entry["fields"] = _changed_fields(old, new, old_view, new_view)
        entry["env"] = _env_changes(old, new)
        servers[name] = entry
    # A grant for a server neither side declares is refused by the schema.
    return {"servers": servers} if servers else {}


def _view(
    name: str,
    server: McpServerConfig,
    manifest: CoreManifest,
    policy: EffectPolicy,
    secrets: tuple[str, ...],
) -> dict[str, Any]:
    view: dict[str, Any] = {"transport": server.transport}
    if server.command is not None:
        view["command"] = safe_argv(server.command, secrets)
        view["env"] = sorted(server.env)
        view["network"] = server.network
        view["sandbox"] = manifest.sandbox
        # As written (relative to hostkit.toml's folder); None: the Host's workspace.
        view["workspace"] = manifest.workspace
    else:
        view["url"] = origin(server.url or "")
        view["url_allow_private"] = sorted(manifest.url_allow_private)
    view["connect_timeout_seconds"] = server.connect_timeout_seconds
    view["call_timeout_seconds"] = server.call_timeout_seconds
    view["connect"] = _connect(policy, name)
    view["tools"] = _tool_rules(policy, name)
    return view


def _connect(policy: EffectPolicy, name: str) -> PolicyDecision:
    """The connect's effective decision, as the MCP catalog takes it.

    An ``allow`` from a rule that does not spell ``mcp.connect:`` is asked
    (``EffectPolicy.explicitly_allows``); ``deny``: declared but cannot be used.
    """
    effect = _CONNECT + name
    decision = policy.decide(effect)
    if decision == "allow" and not policy.explicitly_allows(effect):
        return "ask"
    return decision


def _tool_rules(policy: EffectPolicy, name: str) -> dict[str, PolicyDecision]:
    """Every policy glob that can match one of the server's tools (``mcp.<name>.<tool>``),
    with the decision it stands for (deny, then ask, then allow: the policy's order)."""
    prefix = f"mcp.{name}."
    found: dict[str, PolicyDecision] = {}
    for decision in _DECISIONS:
        for rule in getattr(policy, decision):
            literal = _literal_prefix(rule)
            if prefix.startswith(literal) or literal.startswith(prefix):
                found.setdefault(rule, decision)
    return dict(sorted(found.items()))


def _literal_prefix(rule: str) -> str:
    """The part of a glob before its first wildcard (a wildcard there can match anything after)."""
    for index, char in enumerate(rule):
        if char in "*?[":
            return rule[:index]
    return rule


def _changed_fields(
    old: McpServerConfig,
    new: McpServerConfig,
    old_view: Mapping[str, Any],
    new_view: Mapping[str, Any],
) -> list[str]:
    fields = [name for name in _FIELDS if getattr(old, name) != getattr(new, name)]
    fields.extend(key for key in _AUTHORITY if old_view.get(key) != new_view.get(key))
    return fields


def _env_changes(old: McpServerConfig | None, new: McpServerConfig | None) -> dict[str, str]:
    """Per env NAME: set / changed / removed. Values are compared, never copied."""
    before = old.env if old is not None else {}
    after = new.env if new is not None else {}
    changes: dict[str, str] = {}
    for name in sorted({*before, *after}):
        if name not in before:
            changes[name] = "set"
        elif name not in after:
            changes[name] = "removed"
        elif before[name] != after[name]:
            changes[name] = "changed"
    return changes
