"""One config generation: its capabilities, resolved per-agent policy, pinned cores."""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import AsyncResource

from hostkit.context import EstimatorRegistry, ProviderSummarizer, Summarizer
from hostkit.cores import LoadedCore, SlotRuntime, hold_package, release_package
from hostkit.effects import (
    ApprovalRuntime,
    AuthoredTool,
    CatalogEntry,
    EffectPolicy,
    EffectRuntime,
    McpConnections,
    McpServer,
    SourcedTool,
    Toolset,
    check_collisions,
    fingerprint_of,
    mcp_call_grant,
    provider_name,
)
from hostkit.errors import ConfigError, HostkitError, TurnRejected, bounded
from hostkit.freeze import FrozenMap
from hostkit.host._capabilities import (
    AgentMemory,
    MemoryRequest,
    ProcessResources,
    ProviderRequest,
    RuntimeCapabilities,
    ToolRequest,
)
from hostkit.host._config import HostConfig
from hostkit.host._grants import (
    NETWORK_GRANT,
    agent_grants,
    agent_policy,
    model_spelling_problem,
)
from hostkit.host._source_calls import (
    ask_source,
    checked_memory,
    checked_provider,
    checked_servers,
    checked_tools,
    source_name,
)
from hostkit.host._tool_modules import forget_versions
from hostkit.providers import ModelProvider
from hostkit.store import RuntimeStore
from hostkit.turns import OutputCheck, PinnedCore, capability_snapshot
from hostkit.types import TurnExecutionContext

_log = logging.getLogger("hostkit.host")

# How many agents a generation builds the tools of at once (each may discover tool
# modules in a child process).
BUILD_CONCURRENCY = 4

__all__ = ["Generation", "unknown_agent"]


@dataclass(frozen=True, slots=True)
class _AgentTools:
    """What a generation pins for an agent once, for every turn: tools, policy, identity."""

    tools: tuple[tuple[AuthoredTool, str], ...]
    policy: EffectPolicy
    effect_names: tuple[str, ...]
    policy_fingerprint: str
    workspace: Path
    secret_grants: tuple[str, ...]
    mcp_servers: tuple[McpServer, ...] = ()


def _sourced(
    tools: Sequence[AuthoredTool | SourcedTool], label: str
) -> list[tuple[AuthoredTool, str]]:
    """Each tool with its provenance (``label`` for a bare one), each tool object once.

    The same object offered twice (a tool module re-exporting another's tool) is
    one tool; different tools under one name are a collision, found later.
    """
    offered: dict[int, tuple[AuthoredTool, str]] = {}
    for item in tools:
        tool, origin = (item.tool, item.source) if isinstance(item, SourcedTool) else (item, label)
        offered.setdefault(id(tool), (tool, origin))
    return list(offered.values())


class Generation(AsyncResource):
    """Capabilities are immutable per generation; turns pin one and keep it to the end.

    The runtime resolves each agent's policy and passes it into the
    ToolRequest, then drops every tool the policy forbids even if a source
    returned it. ``active`` counts its users (turns pinning it, and uses
    outside a turn that ``hold`` it: a channel send, a catalog read) so a
    replaced generation closes only after the last of them.
    """

    def __init__(
        self,
        number: int,
        config: HostConfig,
        capabilities: RuntimeCapabilities,
        *,
        approvals: ApprovalRuntime | None = None,
        store: RuntimeStore | None = None,
        processes: ProcessResources | None = None,
        estimators: EstimatorRegistry | None = None,
        outputs: Mapping[str, OutputCheck] | None = None,
        mcp: McpConnections | None = None,
        cores: Mapping[str, LoadedCore] | None = None,
        unavailable: Mapping[str, str] | None = None,
        supplied: RuntimeCapabilities | None = None,
    ) -> None:
        self.number = number
        # Agent Cores at the revision this generation pinned, and why others are missing.
        self._cores = dict(cores or {})
        for loaded in self._cores.values():
            hold_package(loaded.package)  # imported until this generation closes
        # Each core's slots, built once per generation (the functions import on first use).
        self._slots = {core_id: SlotRuntime.of(loaded) for core_id, loaded in self._cores.items()}
        self._unavailable = dict(unavailable or {})
        # The embedder's sources this generation shares with others (the Host closes
        # them); None when ``capabilities`` were built for this generation alone.
        self.supplied = supplied
        self.mcp = mcp
        # The answer check of each agent with an output type (Python agents).
        self.outputs = dict(outputs or {})
        self.processes = processes
        self.estimators = estimators
        # Handed as it is to every source (each request's ``config``): it is immutable all
        # the way down, so no source can change what this generation, ``host.config`` or
        # another agent's requests see, and nothing needs copying.
        self.config = config
        # Resolved before any source runs, and never again: the runtime decides policy (a
        # source is handed it in ToolRequest.policy), each agent's compiled once.
        self._policies = {name: agent_policy(agent) for name, agent in config.agents.items()}
        self.capabilities = capabilities
        self.effects = EffectRuntime(toolsets=self, approvals=approvals, store=store, mcp=mcp)
        self.active = 0
        self.retired = False
        self._tools: dict[str, _AgentTools] = {}
        self._masked_secrets = _host_secret_names(config)
        self._revisions: dict[str, str] = {}
        # One lock per agent (its first build): agents build concurrently.
        self._locks: dict[str, anyio.Lock] = {}
        self._closed = False

    def policy(self, agent: str) -> EffectPolicy:
        """``agent``'s policy as this generation resolved it when it was built."""
        return self._policies[agent]

    async def serves(self, agent: str) -> bool:
        """Whether this generation can build ``agent``'s tools (it may now, to know)."""
        if agent in self._unavailable or agent not in self.config.agents:
            return False
        try:
            await self.agent_tools(agent)
        except Exception:
            return False
        return True

    def core(self, core_id: str) -> LoadedCore | None:
        """The Agent Core ``core_id`` at this generation's revision (None: not a loaded core)."""
        return self._cores.get(core_id)

    @property
    def cores(self) -> Mapping[str, LoadedCore]:
        """Every Agent Core this generation loaded, by id."""
        return dict(self._cores)

    def revision(self, agent: str) -> str:
        """An Agent Core's commit (40 hex); for an agent of ``hostkit.toml``, a content
        hash of everything that defines it in this configuration.

        The configuration of a generation never changes: hashed once per agent.
        """
        loaded = self._cores.get(agent)
        if loaded is not None:
            return loaded.revision
        cached = self._revisions.get(agent)
        if cached is not None:
            return cached
        agent_config = self.config.agents[agent]
        provider = self.config.providers[agent_config.provider]
        payload = json.dumps(
            [agent_config.model_dump(mode="json"), provider.model_dump(mode="json")],
            sort_keys=True,
        )
        revision = "cfg-" + hashlib.sha256(payload.encode()).hexdigest()[:16]
        self._revisions[agent] = revision
        return revision

    async def agent_tools(self, agent: str) -> _AgentTools:
        cached = self._tools.get(agent)
        if cached is not None:  # built once per generation; the lock is for the first build
            return cached
        async with self._locks.setdefault(agent, anyio.Lock()):
            cached = self._tools.get(agent)
            if cached is not None:
                return cached
            policy = self.policy(agent)
            memory = await self._memory(agent) if self.config.agents[agent].memory else None
            request = ToolRequest(
                self.config, agent, policy, self.workspace(agent), memory, self.processes
            )
            source = self.capabilities.tools
            found = await ask_source("tool", source, lambda: source.tools(request))
            offered = _sourced(checked_tools(source, found), f"source:{source_name(source)}")
            servers = await self._mcp_servers(request)
            # An MCP server's tools are discovered per session, after the snapshot is
            # pinned: the snapshot holds its connect and call grants instead.
            grants = agent_grants(
                self.config.agents[agent], (s.name for s in servers), policy=policy
            )
            held = [*grants.mcp, *grants.secrets, *([NETWORK_GRANT] if grants.network else [])]
            effects = [*(t.name for t, _ in offered), *held]
            # A glob parsing had to accept (``*_write`` may be for a tool module's
            # ``notes_write``) that now matches only how the model sees a tool.
            spelled = policy.model_spellings(effects, mcp_servers=(s.name for s in servers))
            if spelled:
                kind, rule, meant = spelled[0]
                raise ConfigError(
                    model_spelling_problem(rule, meant), key=f"agents.{agent}.policy.{kind}"
                )
            for line in _unmatched_rules(agent, policy, effects):
                _log.warning("%s", line)
            allowed = tuple(
                (tool, origin) for tool, origin in offered if policy.decide(tool.name) != "deny"
            )
            # Two tools under one name would make dispatch ambiguous: name both sources.
            check_collisions(
                ((tool.name, origin) for tool, origin in allowed), key=f"agents.{agent}"
            )
            cached = self._tools[agent] = _AgentTools(
                tools=allowed,
                policy=policy,
                effect_names=tuple(sorted([*(tool.name for tool, _ in allowed), *grants.mcp])),
                policy_fingerprint=policy.fingerprint(),
                workspace=self.workspace(agent),
                secret_grants=grants.secrets,
                mcp_servers=servers,
            )
            return cached

    async def build_tools(
        self,
        agents: Iterable[str],
        *,
        fatal: Collection[str] = (),
        served: Callable[[str], Awaitable[bool]] | None = None,
        closing: Callable[[], bool] = lambda: False,
    ) -> None:
        """Build ``agents``' tools now rather than at their first turn, as ``pin`` would.

        A configuration error (a tool module missing, two tools under one name, a
        rule only the model's spelling matches) of one of ``fatal`` (what the
        caller just wrote) is raised, keyed ``agents.<agent>``: nothing this
        generation holds may serve; so is one of an agent that ``served`` says the
        previous generation serves (this apply broke it). Another agent's is logged
        and the agent made unavailable with it: it was broken before, or its
        configuration was recorded elsewhere (a core's move), and must not hold back
        the rest. Any other failure (a store, a source,
        a discovery that timed out) is no fault of the configuration: logged, and
        the agent's first turn builds again. A core that is not available is
        skipped: its turns get their own reason. At most ``BUILD_CONCURRENCY``
        agents build at once; none starts once ``closing()``.
        """
        wanted = [a for a in agents if a not in self._unavailable and a in self.config.agents]
        limiter = anyio.CapacityLimiter(BUILD_CONCURRENCY)
        failed: list[ConfigError] = []

        async def build(agent: str) -> None:
            async with limiter:
                if failed or closing():
                    return
                try:
                    await self.agent_tools(agent)
                except ConfigError as exc:
                    error = exc
                    if not exc.message.startswith(f"agents.{agent}"):
                        error = ConfigError(exc.message, key=f"agents.{agent}")
                    if agent in fatal or (served is not None and await served(agent)):
                        failed.append(error)
                        group.cancel_scope.cancel()
                        return
                    _log.warning("agent %r is not available: %s", agent, error.message)
                    self._unavailable[agent] = f"agent {agent!r} is not available: {error.message}"
                except Exception as exc:
                    reason = exc.message if isinstance(exc, HostkitError) else type(exc).__name__
                    _log.warning(
                        "agent %r: its tools are built at its first turn: %s", agent, reason
                    )

        async with anyio.create_task_group() as group:
            for agent in wanted:
                group.start_soon(build, agent)
        if failed:
            raise failed[0]

    async def _memory(self, agent: str) -> AgentMemory:
        source = self.capabilities.memory
        found = await ask_source(
            "memory", source, lambda: source.memory(MemoryRequest(self.config, agent))
        )
        return checked_memory(source, found)

    async def _provider(self, request: ProviderRequest) -> ModelProvider:
        source = self.capabilities.providers
        found = await ask_source("provider", source, lambda: source.model_provider(request))
        return checked_provider(source, found)

    async def _mcp_servers(self, request: ToolRequest) -> tuple[McpServer, ...]:
        source = self.capabilities.mcp
        if source is None:
            return ()
        found = await ask_source("MCP", source, lambda: source.mcp_servers(request))
        servers = tuple(checked_servers(source, found))
        if servers and self.mcp is None:
            raise TurnRejected("MCP servers are declared but this Host keeps no connections")
        return servers

    def workspace(self, agent: str) -> Path:
        configured = self.config.agents[agent].workspace or self.config.host.workspace
        return self.config.resolve(configured)

    async def pin(self, core_id: str, revision: str | None) -> PinnedCore:
        if self.retired or self._closed:
            raise TurnRejected("this configuration generation was replaced")
        if core_id in self._unavailable:
            raise TurnRejected(self._unavailable[core_id])
        if core_id not in self.config.agents:
            raise TurnRejected(unknown_agent(core_id, sorted(self.config.agents)))
        current = self.revision(core_id)
        if revision is not None and revision != current:
            raise TurnRejected(
                f"revision {bounded(revision, 80)!r} of {core_id!r} is not available"
            )
        # Counted before the first await, so apply_config never closes a generation
        # that a turn is still pinning.
        self.active += 1
        try:
            provider = await self._provider(ProviderRequest(self.config, core_id))
            if self.estimators is not None:
                # A source may know its providers' exact tokenizers (duck-typed: optional).
                for estimator in getattr(self.capabilities.providers, "estimators", ()):
                    if self.estimators.get(estimator.estimator_id) is not estimator:
                        self.estimators.register(estimator)
            tools = await self.agent_tools(core_id)
        except HostkitError as exc:
            self._unpin()
            rejected = TurnRejected(f"agent {core_id!r} is not available: {exc.message}")
            # A provider or credential outage clears: whoever retries must know it may.
            rejected.retryable = exc.retryable
            raise rejected from exc
        except BaseException as exc:
            self._unpin()
            if isinstance(exc, Exception):
                raise TurnRejected(
                    f"agent {core_id!r} is not available ({type(exc).__name__})"
                ) from exc
            raise
        agent = self.config.agents[core_id]
        return PinnedCore(
            core_id=core_id,
            core_revision=current,
            generation=self.number,
            instructions=agent.instructions,
            provider=provider,
            effects=self.effects,
            effect_names=tools.effect_names,
            policy_fingerprint=tools.policy_fingerprint,
            workspace=tools.workspace,
            max_steps=agent.max_steps,
            secret_grants=tools.secret_grants,
            process_limits=FrozenMap(self.config.host.limits.model_dump()),
            observer=self.capabilities.observer,
            output=self.outputs.get(core_id),
            slots=self._slots.get(core_id),
        )

    def hold(self) -> None:
        """Count a use outside a turn (a channel send, a catalog read) as a pin: a reload
        meanwhile must not close the sources it is using. ``release`` ends it."""
        if self._closed:
            raise TurnRejected("this configuration generation is closed")
        self.active += 1

    async def release(self) -> bool:
        """One user (a turn, a hold) finished with this generation; True when it is now
        safe to close."""
        self._unpin()
        return self.idle

    def _unpin(self) -> None:
        # Every way a pin ends (its turn released it, or pinning failed) comes here: whoever
        # drops the last pin of a retired generation closes it (the Host, which sees ``idle``).
        self.active -= 1

    @property
    def idle(self) -> bool:
        """Replaced, and nothing pins or holds it any more: nothing will use it again."""
        return self.retired and self.active == 0

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        if context.generation != self.number:
            raise TurnRejected("the turn was pinned to another generation")
        tools = await self.agent_tools(context.core_id)
        agent = self.config.agents[context.core_id]
        return Toolset(
            tools.tools,
            tools.policy,
            self.workspace(context.core_id),
            agent.secret_ttl_s,
            mcp_servers=tools.mcp_servers,
            masked_secrets=self._masked_secrets,
        )

    async def summarizer(self, agent: str) -> Summarizer | None:
        """A provider summarizer for ``agent``'s context compaction (None: fallback only)."""
        config = self.config.agents.get(agent)
        if config is None:
            return None
        provider = await self._provider(
            ProviderRequest(self.config, agent, provider=config.summarizer or config.provider)
        )
        return ProviderSummarizer(provider)

    async def approval_fingerprint(
        self, core: PinnedCore, effect: str, session_id: str
    ) -> str | None:
        """The fingerprint a turn pinned to ``core`` would give ``effect`` now.

        "" when the effect is not offered. An MCP tool is offered while its
        server is declared with ``mcp.call:<server>`` granted; without a live
        connection of ``session_id`` here (another process answers) its schema
        is unknown, so None: the continuation checks the fingerprint against
        the tool its reconnected catalog lists before anything runs.
        """
        tools = await self.agent_tools(core.core_id)
        for tool, source in tools.tools:
            if tool.name == effect and effect in core.effect_names:
                entry = CatalogEntry("", tool.name, provider_name(tool.name), tool, source)
                return fingerprint_of(core.core_revision, capability_snapshot(core), entry)
        server = next((s for s in tools.mcp_servers if effect.startswith(f"mcp.{s.name}.")), None)
        if server is None or mcp_call_grant(server.name) not in core.effect_names:
            return ""
        live = {} if self.mcp is None else self.mcp.session_tools(session_id, core.core_id)
        binding, discovered = live.get(server.name, ("", ()))
        mcp_tool = next((found for found in discovered if found.name == effect), None)
        if mcp_tool is None:
            return None
        entry = CatalogEntry(
            "",
            effect,
            provider_name(effect),
            mcp_tool,
            f"mcp:{server.name}",
            capability=mcp_call_grant(server.name),
            binding=binding,
        )
        return fingerprint_of(core.core_revision, capability_snapshot(core), entry)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Its held secrets' spellings go with it: a replaced or closed generation keeps none.
        self.effects.close()
        for loaded in self._cores.values():
            if release_package(loaded.package):
                forget_versions(loaded.package)
        if self.supplied is None:
            await self.capabilities.aclose()


_DONE = {"ask": "asked for", "deny": "denied"}
# The variables a provider of this kind's SDK reads its credentials from by default.
_DEFAULT_KEY_ENV = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
}


def _host_secret_names(config: HostConfig) -> tuple[str, ...]:
    """Every environment variable the Host reads a secret from, masked in every result:
    what some agent holds or [secrets.*] lets go somewhere, each provider's API key and
    each channel's signing secret and bot token (agents share the workspace, where any
    tool may have written one)."""
    names = {*config.secrets, *(n for a in config.agents.values() for n in a.secrets)}
    for provider in config.providers.values():
        # The SDKs read their default variables too, whatever api_key_env names.
        names.update((provider.api_key_env or "", *_DEFAULT_KEY_ENV.get(provider.kind, ())))
    for channel in config.channels.values():
        names.update((channel.secret_env or "", channel.token_env or ""))
    names.discard("")
    return tuple(sorted(names))


def _unmatched_rules(agent: str, policy: EffectPolicy, effects: Sequence[str]) -> list[str]:
    """One line per ``ask`` or ``deny`` rule of ``agent`` that matches none of its tools and
    grants but is a slip from one (``EffectPolicy.near_misses``): the effect it meant runs
    unasked. (A rule for a tool the agent simply does not have is kept quiet: it is
    harmless, and often deliberate.)"""
    return [
        f"agent {agent!r}: the policy's {kind} rule {rule!r} matches none of its tools; "
        f"did you mean {meant!r}? ({meant} is not {_DONE[kind]} by it)"
        for kind, rule, meant in policy.near_misses(effects)
    ]


# Agent names listed in the refusal of an unknown one: enough to spot the right one.
_LISTED_AGENTS = 12


def unknown_agent(name: str, known: Sequence[str]) -> str:
    """Why a turn for ``name`` is refused: the closest known agent, and which there are."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(known[:_LISTED_AGENTS]) + (", ..." if len(known) > _LISTED_AGENTS else "")
    return f"no agent named {bounded(name, 80)!r}{hint} (agents here: {listed or 'none'})"
