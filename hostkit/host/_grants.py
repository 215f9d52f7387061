"""The grants an agent holds, each decided by its policy, and the rules that cannot be.

A grant (``terminal.network``, ``secret.bind:<NAME>``, ``mcp.connect:<server>``,
``mcp.call:<server>``) is no tool call, but the policy's rules name it as they
name tools. Every grant the Host builds comes from here, for ``hostkit.toml``
agents and Agent Cores alike, so a rule over one either takes effect as written
or the configuration is refused: never a rule that is read and then ignored.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from hostkit.effects import (
    EffectPolicy,
    mcp_call_grant,
    mcp_connect_grant,
    provider_spelling,
    quoted_rule,
    rule_problem,
    secret_grant,
)

if TYPE_CHECKING:
    from hostkit.host._config import AgentConfig

__all__ = [
    "NETWORK_GRANT",
    "AgentGrants",
    "Builtin",
    "agent_grants",
    "agent_policy",
    "model_spelling_problem",
    "policy_problem",
]

NETWORK_GRANT = "terminal.network"
# What an agent's ``builtins`` may name: the Host's own tools, and one grant.
Builtin = Literal[
    "files.read",
    "files.list",
    "files.write",
    "files.edit",
    "web.extract",
    "terminal.run",
    "terminal.status",
    "terminal.stop",
    # Not a tool: the grant that lets this agent's terminal runs reach the network.
    "terminal.network",
]
# Effects every agent may have: the builtin tools, and memory's (``memory = true``).
_HOST_EFFECTS = (
    *(name for name in get_args(Builtin) if name != NETWORK_GRANT),
    "memory.recall",
    "memory.store",
    "memory.forget",
)
_LISTS = ("allow", "ask", "deny")


@dataclass(frozen=True, slots=True)
class AgentGrants:
    """What ``agent_grants`` found: the network, secret and MCP grants the agent holds."""

    network: bool
    secrets: tuple[str, ...]
    mcp: tuple[str, ...]


def agent_policy(agent: AgentConfig) -> EffectPolicy:
    """``agent``'s ``[policy]`` as the ``EffectPolicy`` its turns run under."""
    rules = agent.policy
    return EffectPolicy(allow=tuple(rules.allow), deny=tuple(rules.deny), ask=tuple(rules.ask))


def agent_grants(
    agent: AgentConfig,
    mcp_servers: Iterable[str] | None = None,
    *,
    policy: EffectPolicy | None = None,
) -> AgentGrants:
    """The grants ``agent`` holds under its policy.

    ``terminal.network`` is held where the policy ``allow``s it, or ``ask``s for it
    and for ``terminal.run`` alike (every run, with the network, is then a person's
    yes: ``ask = ["*"]``); never where it is denied. A secret is held unless
    denied (each binding is asked per call anyway). An MCP server's connect and
    call grants are held together, unless either is denied (``ask`` on the call
    asks before each of its tools; on the connect, before connecting).
    ``mcp_servers``: the servers the generation's source declares (default: the
    agent's ``mcp`` tables). ``policy``: the one the generation resolved (default:
    resolved from ``agent`` now), so a copy a source edited grants nothing.
    """
    if policy is None:
        policy = agent_policy(agent)
    network = NETWORK_GRANT in agent.builtins and _network_decision(policy) != "deny"
    secrets = tuple(
        grant
        for grant in (secret_grant(name) for name in agent.secrets)
        if policy.decide(grant) != "deny"
    )
    servers = sorted(agent.mcp) if mcp_servers is None else list(mcp_servers)
    mcp = tuple(
        grant
        for server in servers
        if all(
            policy.decide(grant) != "deny"
            for grant in (mcp_connect_grant(server), mcp_call_grant(server))
        )
        for grant in (mcp_connect_grant(server), mcp_call_grant(server))
    )
    return AgentGrants(network, secrets, mcp)


def policy_problem(agent: AgentConfig) -> tuple[str, str] | None:
    """Why a rule of ``agent``'s policy could not take effect as written, as the rule's
    list (``policy.ask``) and a sentence naming the rule (None: each can).

    Refused: a rule no effect or grant name can match (``FILES.*``, ``mcp.*Delete*``,
    ``files .write``), naming what to write instead; a rule naming an MCP server the
    agent does not declare (it matches nothing, and a server declared later under that
    name would skip it); a rule written as the model sees a tool (``files_write``,
    ``files_*``, ``mcp_git_git_commit``), which matches no effect name; an ``ask`` over
    ``terminal.network`` that leaves ``terminal.run`` unasked (a grant held for every
    run or none: nobody would be asked).
    """
    for kind in _LISTS:
        for rule in getattr(agent.policy, kind):
            problem = _rule_problem(rule, agent)
            if problem is not None:
                return f"policy.{kind}", f"the rule {quoted_rule(rule)} {problem}"
    policy = agent_policy(agent)
    if NETWORK_GRANT in agent.builtins and _network_decision(policy) is None:
        rule = next(r for r in policy.ask if fnmatch.fnmatchcase(NETWORK_GRANT, r))
        return "policy.ask", (
            f"the rule {rule!r} asks for {NETWORK_GRANT} but 'terminal.run' is not asked: "
            "the grant is held for every run or none, so nobody would be asked; ask for "
            "'terminal.run' too (each run, with the network, is then approved), or allow "
            f"or deny {NETWORK_GRANT}"
        )
    return None


def model_spelling_problem(rule: str, meant: str) -> str:
    """Why ``rule``, written as the model sees a tool, is refused: ``meant`` is it in
    effect names (found by parsing or, for a glob, once the agent's tools are built)."""
    return f"the rule {quoted_rule(rule)} {_model_spelling(meant)}"


def _network_decision(policy: EffectPolicy) -> str | None:
    """How ``terminal.network`` is decided: ``allow``/``deny`` as its rules say, and an
    ``ask`` only where every ``terminal.run`` is asked as well (each networked run is a
    person's yes); None for an ``ask`` nobody would ever be asked."""
    decision = policy.decide(NETWORK_GRANT)
    if decision != "ask":
        return decision
    return "ask" if policy.decide("terminal.run") == "ask" else None


def _rule_problem(rule: str, agent: AgentConfig) -> str | None:
    problem = rule_problem(rule)
    if problem is not None:
        return problem
    server = _mcp_server(rule)
    if server is not None and server not in agent.mcp:
        declared = ", ".join(sorted(agent.mcp)) or "none"
        return (
            f"names the MCP server {server!r}, which this agent does not declare under "
            f"mcp (declared: {declared}): it would match nothing"
        )
    meant = provider_spelling(rule, _HOST_EFFECTS, agent.mcp)
    return None if meant is None else _model_spelling(meant)


def _model_spelling(meant: str) -> str:
    return (
        "is a tool's name as the model sees it; policy rules match effect names: "
        f"did you mean {quoted_rule(meant)}?"
    )


def _mcp_server(rule: str) -> str | None:
    """The server an MCP rule names (``mcp.<server>.…``, ``mcp.connect:<server>``,
    ``mcp.call:<server>``), when it names one without a wildcard."""
    for grant in ("mcp.connect:", "mcp.call:"):
        if rule.startswith(grant):
            server = rule.removeprefix(grant)
            return None if _has_wildcard(server) else server
    kind, dot, rest = rule.partition(".")
    server, dot2, _ = rest.partition(".")
    if kind != "mcp" or not dot or not dot2 or ":" in server or _has_wildcard(server):
        return None
    return server


def _has_wildcard(text: str) -> bool:
    return any(char in text for char in "*?[")
