"""Host: composition of store, authority and the seams from one capability generation."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import os
import weakref
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
from anyio.abc import AsyncResource

from hostkit._cancellation import uninterrupted
from hostkit._opening import Opening
from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.builtins.process import ProcessSupervisor, RunJournal
from hostkit.context import (
    ContextManager,
    EstimatorRegistry,
    SessionCompactor,
    Summarizer,
    WorkspaceBootstrap,
)
from hostkit.cores import LoadedCore
from hostkit.delivery import ChannelsClosing, DeliveryPolicy, DeliveryRuntime, OutboundChannel
from hostkit.effects import (
    ApprovalProvider,
    ApprovalRuntime,
    McpConnections,
    PendingApproval,
)
from hostkit.errors import (
    ApprovalRefused,
    ConfigError,
    HostkitError,
    InvalidTurnRequest,
    InvalidValue,
    RuntimeFailure,
    StoreClosed,
    TurnRejected,
    bounded,
)
from hostkit.freeze import FrozenMap
from hostkit.host._agent import (
    Agent,
    check_agent_code,
    check_agents,
    compose_agents,
    with_agents,
)
from hostkit.host._approvals import HostApprovals
from hostkit.host._artifacts import HostArtifacts
from hostkit.host._attachments import HostAttachments
from hostkit.host._bus import EventBus
from hostkit.host._capabilities import ProcessResources, RuntimeCapabilities
from hostkit.host._catalog import ToolCatalog, tool_catalog
from hostkit.host._config import (
    HostConfig,
    default_config,
    load_config,
    state_overlaps,
    unlisted_secrets,
)
from hostkit.host._core_sandbox import core_test_sandbox
from hostkit.host._cores import (
    compile_core,
    compose_cores,
    core_locations,
    unavailable_reasons,
)
from hostkit.host._defaults import (
    DefaultCapabilities,
    check_changed_provider_keys,
    check_provider_extras,
    load_channel_adapters,
)
from hostkit.host._generation import Generation, unknown_agent
from hostkit.host._inbound import InboundCommands, InboundTurns, reply_route
from hostkit.host._memory_admin import HostMemory
from hostkit.host._outbound import HeldChannel
from hostkit.host._reload import (
    ReloadOutcome,
    check_cores,
    config_changes,
    core_changes,
    live_revisions,
    rejected,
    reopen_changes,
    split_state,
    with_opened,
)
from hostkit.host._store import open_configured_store, upgrade_notices
from hostkit.inbox import ChannelInbox, InboxWorker, Route
from hostkit.store import InboxLimits, LeaseOwner, RuntimeStore
from hostkit.telemetry import Tracing, open_tracing
from hostkit.turns import Observer, PinnedCore, TurnExecution
from hostkit.types import (
    ConversationFacts,
    PrincipalScope,
    TurnExecutionContext,
    TurnRequest,
    TurnResult,
    is_names,
    is_seconds,
    new_id,
)

if TYPE_CHECKING:
    from hostkit.cores import CoreRegistry
    from hostkit.host._serve import HostDaemon

__all__ = ["Host", "TurnNotCompleted", "resolve_config"]


_log = logging.getLogger("hostkit.host")
# aclose waits this long for an apply in progress before closing the generations anyway.
APPLY_CLOSE_WAIT_S = 30.0
# An apply builds the tools of new and changed agents for at most this long; the rest
# are built at their first turn (their discovery is no fault of the configuration).
BUILD_TOOLS_DEADLINE_S = 120.0
# What aclose's writes wait for another process's lock, all of them together: a stopped
# process holding it must not keep a closing Host for a lock timeout per write (the
# next start recovers what could not be written: turns end `lost`, claims come back).
CLOSE_LOCK_WAIT_S = 5.0


class TurnNotCompleted(RuntimeFailure):
    """``Host.run_turn`` got a terminal outcome other than ``completed``; ``result`` says which."""

    def __init__(self, result: TurnResult) -> None:
        self.result = result
        super().__init__(f"turn ended {result.outcome}: {result.error or 'no detail'}")


class Host(AsyncResource):
    """An agent Host: ``async with Host.open(config) as host``.

    ``host.turns`` is the full TurnExecution seam; ``host.run_turn(agent,
    message)`` is the minimal embedder path; ``host.attachments`` stores the
    content a ``TurnRequest`` attaches by reference; ``host.artifacts.reclaim()``
    deletes terminal output past ``[host] artifact_retention_s``. The Host owns
    the store, the authority resolver and its in-memory operator issuer, and the config
    generations; ``aclose()`` rejects pending approval prompts, cancels
    running turns, revokes operator authority and closes everything, even
    when one step fails.

    ``approver`` answers ``ask`` effects while a turn runs (console, widget,
    script; replace it with ``host.approvals.runtime.provider = ...``); with
    none, or no answer within ``host.approval_timeout_s``, the turn pauses
    ``needs_user`` and ``host.approvals.answer`` continues it later.

    ``tracing`` is the Host's own OpenTelemetry tracing when ``[host.telemetry]``
    turns it on (docs/observability.md); it is set up at open and flushed at
    close, so a later ``apply_config`` keeps it until the Host is reopened.

    ``warnings`` holds one line per configuration problem found at open (a
    workspace overlapping the Host's own state), and one if the open upgraded the
    database's schema (naming the backup it kept); each is also logged on the
    ``hostkit.host`` logger, and the CLI prints them on stderr.

    ``memory`` lists and forgets agent memory items outside a turn (an
    operator's, audited; or a person's own).

    ``inbox`` is the Host's ChannelInbox (in its store: claims hold across
    processes sharing the database); ``inbox_worker()`` makes a worker that
    answers it with turns.
    """

    def __init__(
        self,
        *,
        config: HostConfig,
        store: RuntimeStore,
        authority: AuthorityResolver,
        capabilities: RuntimeCapabilities,
        events: EventBus,
        lease_owner: LeaseOwner,
        approver: ApprovalProvider | None = None,
        warnings: tuple[str, ...] = (),
        tracing: Tracing | None = None,
        agents: Sequence[Agent] = (),
        cores: Mapping[str, LoadedCore] | None = None,
        declared: HostConfig | None = None,
        supplied: RuntimeCapabilities | None = None,
        check_providers: bool = True,
        require_channels: bool = True,
    ) -> None:
        self.config = config
        # Whether open and every apply refuse a used provider whose package is missing.
        self._check_providers = check_providers
        # Whether they refuse an outbound channel whose secret is unset (else it is left out).
        self._require_channels = require_channels
        # The capability sources the embedder supplied (open or apply_config), or None for
        # the defaults built from each configuration. Supplied sources serve every later
        # generation (a reload, a core promotion) until others are supplied; they close
        # once no generation uses them and they are no longer the Host's.
        self._supplied = supplied
        # The configuration as given, before its Agent Cores and Python agents were
        # composed in: apply_config(host.declared_config) recomposes at the live refs now.
        self.declared_config = declared or config
        # Python agents: composed into every configuration this Host applies.
        self.agents = tuple(agents)
        self.tracing = tracing
        self.warnings = warnings
        self.store = store
        self.authority = authority
        self.events = events
        self._issuer: OperatorIssuer = authority.operator_issuer()
        self._approval_runtime = ApprovalRuntime(
            provider=approver,
            decision_timeout_s=config.host.approval_timeout_s,
            revocations=store.approvals,
        )
        # A conversation moved to another session ends the old one's session approvals.
        authority.watch_bindings(self._approval_runtime.observe_conversation)
        self.processes = ProcessResources(
            supervisor=ProcessSupervisor(),
            artifact_root=config.artifact_root,
            protected=config.state_paths(),
            journal=RunJournal(store=store, host_owner=lease_owner, observer=events),
            artifact_reserve_bytes=config.host.artifact_reserve_mb * 1024 * 1024,
        )
        # MCP connections are the Host's: session-scoped, reused across turns and
        # generations, all closed (every stdio process tree ended) by aclose().
        self.mcp = McpConnections(status=store.mcp_servers.record_mcp_status)
        self.estimators = EstimatorRegistry()
        self._generation = self._new_generation(
            1,
            config,
            capabilities,
            cores=cores,
            unavailable=unavailable_reasons(config, warnings),
            supplied=supplied,
        )
        self._retired: list[Generation] = []
        self.context = ContextManager(
            store,
            estimators=self.estimators,
            bootstrap=WorkspaceBootstrap(),
            compactor=SessionCompactor(store, owner=lease_owner),
            summarizers=self._summarizer,
        )
        # Retired last in aclose: leases it could not end become a dead owner's.
        self._lease_owner = lease_owner
        self.turns = TurnExecution(
            store=store,
            authority=authority,
            context=self.context,
            cores=self,
            observer=events,
            lease_owner=lease_owner,
            lease_ttl_s=config.host.session_lease_ttl_s,
            admission_timeout_s=config.host.admission_timeout_s,
        )
        self.attachments = HostAttachments(store=store, authority=authority)
        self.artifacts = HostArtifacts(
            root=config.artifact_root, retention_s=config.host.artifact_retention_s
        )
        self.memory = HostMemory(
            store=store, authority=authority, agents=lambda: self.config.agents
        )
        # New inbounds stop at the backlog limit, and before the database's disk is down
        # to the reserve the Host keeps for turn results and delivery records.
        self.inbox = ChannelInbox.on_store(
            store,
            limits=InboxLimits(
                config.serve.inbox_max_queued, config.serve.inbox_disk_reserve_mb << 20
            ),
        )
        self._inbound = InboundTurns(
            self.turns,
            store,
            closed=lambda: self._closed,
            channels=lambda: self.config.channels,
        )
        # Workers made by inbox_worker(): stopped (grace, release) before turns are ended.
        self._workers: weakref.WeakSet[InboxWorker] = weakref.WeakSet()
        # Runtimes made by delivery_runtime(): stopped (grace, release) before channels close.
        self._deliveries: weakref.WeakSet[DeliveryRuntime] = weakref.WeakSet()
        self.approvals = HostApprovals(
            store=store,
            authority=authority,
            runtime=self._approval_runtime,
            turns=self.turns,
            fingerprint=self._approval_fingerprint,
            wait_s=config.host.admission_timeout_s,
        )
        self._commands = InboundCommands(
            self.approvals,
            authority,
            store,
            route=lambda envelope: reply_route(self.config.channels, envelope),
            channels=lambda: self.config.channels,
        )
        self._closed = False
        # reload(): one at a time (SIGHUP and the watcher, a notebook cell).
        self._reload_lock = anyio.Lock()
        # apply_config (reloads and core moves go through it): one at a time, composing to
        # installing; aclose takes it (bounded) before closing the generations.
        self._apply_lock = anyio.Lock()
        # The tools builds under way (an apply's, a core move's tools gate), each with the
        # event set once it ended: aclose cancels them (nothing is installed, no core moves)
        # and waits for them to end, discovery children with them (bounded).
        self._building: dict[anyio.CancelScope, anyio.Event] = {}

    def _new_generation(
        self,
        number: int,
        config: HostConfig,
        capabilities: RuntimeCapabilities,
        *,
        cores: Mapping[str, LoadedCore] | None = None,
        unavailable: Mapping[str, str] | None = None,
        supplied: RuntimeCapabilities | None = None,
    ) -> Generation:
        return Generation(
            number,
            config,
            capabilities,
            approvals=self._approval_runtime,
            store=self.store,
            processes=self.processes,
            estimators=self.estimators,
            outputs={agent.name: agent.output for agent in self.agents if agent.output is not None},
            mcp=self.mcp,
            cores=cores,
            unavailable=unavailable,
            supplied=supplied,
        )

    @classmethod
    def open(
        cls,
        config: HostConfig | str | Path | None = None,
        *,
        capabilities: RuntimeCapabilities | None = None,
        approver: ApprovalProvider | None = None,
        agents: Sequence[Agent] = (),
        check_providers: bool = True,
        require_channels: bool | None = None,
        observer: Observer | None = None,
        reads_only: bool = False,
    ) -> Opening[Host]:
        """Open a Host: ``async with Host.open(...) as host`` or ``host = await Host.open(...)``.

        ``config`` is a ``HostConfig``, a path to ``hostkit.toml``, or None for
        the default (embedded SQLite in the working directory). Opening
        creates or upgrades the database and ends turns a dead Host left
        running (``lost``); awaited without ``async with``, the caller closes
        the Host with ``await host.aclose()``.

        ``agents`` are ``hostkit.Agent`` values defined in Python: each joins the
        configuration's agents (a name clash is a ``ConfigError``) and goes
        through the same catalog, policy and approvals. With no ``config`` and
        some ``agents``, the default configuration has no ``assistant``: the
        Python agents are what runs. Their code (defining modules, tools' files)
        and the import path must lie outside every workspace an agent can write
        to, and be files of one link: otherwise an agent could rewrite what the
        Host runs, and the Host does not open (``ConfigError``, docs/effects.md).

        ``check_providers=False`` opens without checking that the used
        providers' packages are installed (here and at every later apply): for
        an operator's listing or review, which runs no turn. Providers are built
        at a turn's first model call, so a turn that does run still refuses a
        missing package with the same ``MissingDependency`` line. A channel
        whose secret variable is unset is then left out too, not refused.

        ``require_channels`` (default: as ``check_providers``) refuses an
        outbound channel whose secret variable is unset; False leaves it out,
        for a Host that sends nothing itself (only a ``delivery_runtime()``
        does: the CLI's turns write their answers to the outbox, and
        ``hostkit serve`` delivers them).

        ``observer`` hears every turn event of this Host, whatever generation runs
        the turn (beside ``[host.telemetry]``'s tracing and ``host.events``): an
        application's own ``TracingObserver(tracer_provider)``, with the sources
        the configuration implies. What it raises never reaches a turn; its first
        failure is logged once (``hostkit.turns.Observer``).

        ``reads_only`` opens for an operator's view, which must work while another
        process holds the write lock or the disk is full: the opening ends no dead
        Host's turns or runs (the next Host that writes does; meanwhile ``store.inspect``
        shows such a turn ``interrupted``, never running), and no write of this Host
        waits for another process's lock (it fails at once instead).
        """
        _check_open(capabilities, approver, agents, observer)
        return Opening(
            lambda: cls._open(
                config,
                capabilities=capabilities,
                approver=approver,
                agents=agents,
                check_providers=check_providers,
                require_channels=check_providers if require_channels is None else require_channels,
                observer=observer,
                reads_only=reads_only,
            )
        )

    @classmethod
    async def _open(
        cls,
        config: HostConfig | str | Path | None,
        *,
        capabilities: RuntimeCapabilities | None,
        approver: ApprovalProvider | None,
        agents: Sequence[Agent] = (),
        check_providers: bool = True,
        require_channels: bool = True,
        observer: Observer | None = None,
        reads_only: bool = False,
    ) -> Host:
        check_agents(agents)  # a wrong value leaves no database behind
        declared = await resolve_config(config, assistant=not agents)
        check = capabilities is None and check_providers
        if check:
            # The configured agents' providers' packages, before the database is created
            # or migrated. The Python agents' shorthand providers and the cores' are
            # checked once composed: a core is live only in a database that exists.
            await anyio.to_thread.run_sync(check_provider_extras, declared)
        # Composing never changes [host]: its telemetry is the declared one.
        telemetry = declared.host.telemetry
        # Before anything is created: tracing asked for without the otel extra is refused.
        # Off the event loop: the first use imports the SDK and starts its export thread.
        tracing = await anyio.to_thread.run_sync(
            functools.partial(
                open_tracing,
                telemetry.traces,
                endpoint=telemetry.endpoint,
                service_name=telemetry.service_name,
            )
        )
        # A Python agent whose code a configured agent could rewrite: refused before the
        # database is made (again once composed: an Agent Core may write elsewhere).
        await anyio.to_thread.run_sync(check_agent_code, declared, agents)
        store: RuntimeStore | None = None
        try:
            # The store before the cores: it records which revision of each core is live.
            store = await open_configured_store(declared)
            # Each Agent Core at its live revision; one that is not available is a warning.
            composed, cores, core_warnings = await compose_cores(declared, store.cores)
            resolved, instances, channel_warnings = compose_agents(
                composed, agents, serves_channels=require_channels
            )
            if check:
                # The default sources import each provider kind's package: one missing is
                # refused here, before any turn, not as each of its agent's turns failing.
                await anyio.to_thread.run_sync(check_provider_extras, resolved)
            warnings = (
                *upgrade_notices(store),
                *await _prepare_workspaces(resolved),
                *core_warnings,
                *channel_warnings,
            )
            # Once the workspaces exist: none an agent writes may hold a Python agent's code.
            await anyio.to_thread.run_sync(check_agent_code, resolved, agents)
        except BaseException:
            with anyio.CancelScope(shield=True):
                try:
                    if store is not None:
                        await store.aclose()
                finally:
                    if tracing is not None:
                        await tracing.aclose()
            raise
        owner: LeaseOwner | None = None
        try:
            authority = AuthorityResolver.bind(store)
            # Turns report to their generation's observer themselves (PinnedCore.observer);
            # the bus serves this Host's subscribers (CLI, notebook) across generations,
            # and its tracing.
            events = EventBus(
                forward=[
                    *([tracing.observer] if tracing is not None else []),
                    *([observer] if observer is not None else []),
                ]
            )
            # One identity for this Host's durable leases (turns and compaction); reading
            # the process start time touches /proc, so off the event loop.
            owner = await anyio.to_thread.run_sync(LeaseOwner.current, new_id("host"))
            if capabilities is None:
                await load_channel_adapters(resolved)
            caps = with_agents(
                capabilities
                or DefaultCapabilities.from_config(
                    resolved, store=store, require_channels=require_channels
                ),
                resolved,
                agents,
                instances,
            )
            host = cls(
                config=resolved,
                store=store,
                authority=authority,
                capabilities=caps,
                events=events,
                lease_owner=owner,
                approver=approver,
                warnings=warnings,
                tracing=tracing,
                agents=agents,
                cores=cores,
                declared=declared,
                supplied=capabilities,
                check_providers=check_providers,
                require_channels=require_channels,
            )
            if reads_only:
                store.limit_waits(0)
            else:
                await host.turns.recover()
                # Background terminal runs a dead Host left "running" become "orphaned".
                await host.processes.recover()
        except BaseException:
            if owner is not None:
                owner.retire()
            with anyio.CancelScope(shield=True):
                try:
                    await store.aclose()
                finally:
                    if tracing is not None:
                        await tracing.aclose()
            raise
        return host

    @property
    def generation(self) -> int:
        return self._generation.number

    # -- Agent Core revisions: promote, rollback (docs/revisions.md) --------------------

    @property
    def cores(self) -> CoreRegistry:
        """Status, log, diff, promote, rollback and history of this Host's Agent Cores.

        Built over the current configuration's ``[cores]``. A move drops that
        core's session approvals and applies a new generation at the new
        live revision (running turns finish on theirs). The test gate runs a
        candidate's suite in the bubblewrap sandbox of agent processes.
        """
        from hostkit.cores import CoreRegistry  # dulwich loads with the first core command

        return CoreRegistry(
            self.store,
            core_locations(self.declared_config),
            cores_root=self.declared_config.cores_root,
            validate=self._validate_core,
            build_tools=self._build_core_tools,
            on_moved=self._core_moved,
            closing=self._closing,
            sandbox=core_test_sandbox(self.declared_config),
        )

    def _closing(self) -> bool:
        """aclose began (a method, so a check after an await reads it again)."""
        return self._closed

    async def _validate_core(self, core: LoadedCore) -> None:
        compile_core(self.declared_config, core)

    async def _build_core_tools(self, core: LoadedCore) -> None:
        """Build a candidate revision's tools as its generation would (the promotion's
        or rollback's tools gate): a ``ConfigError`` when they cannot be, so it never
        goes live. ``aclose`` cancels it: ``TurnRejected``, no verdict (nothing recorded)."""
        agent = compile_core(self.declared_config, core)
        async with self._held() as current:
            agents = FrozenMap({**current.config.agents, core.core_id: agent})
            config = current.config.model_copy(update={"agents": agents})
            # The current generation's sources, not closed with the candidate's (which
            # holds no package: the tools discovered stay cached for the apply).
            candidate = self._new_generation(
                0, config, current.capabilities, supplied=current.capabilities
            )
            try:
                with self._build_scope() as scope:
                    await candidate.build_tools(
                        [core.core_id], fatal=[core.core_id], closing=self._closing
                    )
            finally:
                await uninterrupted(self._discard(candidate))
        if scope.cancelled_caught:
            raise TurnRejected(f"the Host is closing: core {core.core_id!r} did not move")

    @contextlib.contextmanager
    def _build_scope(self, deadline_s: float = math.inf) -> Iterator[anyio.CancelScope]:
        """The cancel scope of a tools build, ``deadline_s`` long, that ``aclose`` cancels
        (at once when the close already began) and then waits for."""
        ended = anyio.Event()
        with anyio.CancelScope(deadline=anyio.current_time() + deadline_s) as scope:
            self._building[scope] = ended
            try:
                if self._closing():
                    scope.cancel()
                yield scope
            finally:
                del self._building[scope]
                ended.set()

    async def _core_moved(self, core_id: str, revision: str) -> None:
        self._approval_runtime.invalidate(core_id=core_id)
        # The store recorded this end for every other Host: read past it, so an answer
        # given for the new revision is kept here.
        await self._approval_runtime.refresh()
        if self._closed:
            return  # recorded: the next open composes the new revision
        try:
            await self.apply_config(self.declared_config)
        except TurnRejected:
            if not self._closing():
                raise

    # -- CoreResolver (TurnExecution pins cores through the Host) ---------------------

    async def pin(self, core_id: str, revision: str | None) -> PinnedCore:
        name = _name(core_id)
        if name is None:
            raise InvalidTurnRequest(f"core_id must be an agent's name, not {_kind(core_id)}")
        wanted = None if revision is None else _name(revision)
        if revision is not None and wanted is None:
            raise InvalidTurnRequest(f"revision must be None or a revision, not {_kind(revision)}")
        if self._closed:
            raise TurnRejected("the Host is closed")
        generation = self._generation
        try:
            return await generation.pin(name, wanted)
        except BaseException:
            # The failed pin dropped its count: if an apply replaced the generation while
            # it pinned, it may have been the last one.
            await uninterrupted(self._close_if_idle(generation))
            raise

    async def release(self, core: PinnedCore) -> None:
        if not isinstance(core, PinnedCore):
            raise InvalidValue(f"release takes what pin returned, not {_kind(core)}")
        for generation in (self._generation, *self._retired):
            if generation.number == core.generation:
                await generation.release()
                await self._close_if_idle(generation)
                return

    async def _close_if_idle(self, generation: Generation) -> None:
        """Close a replaced generation once its last pin or hold is dropped: a turn ended,
        a pin failed, a send ended. (One replaced with none is closed by the apply itself.)"""
        if generation.idle and generation in self._retired:
            self._retired.remove(generation)
            # The turn's result is already durable: a failing source close is the Host's
            # problem to log, not the caller's exception.
            await self._close_generation(generation)

    async def apply_config(
        self,
        config: HostConfig,
        *,
        capabilities: RuntimeCapabilities | None = None,
        require_cores: Collection[str] = (),
    ) -> int:
        """Make ``config`` the next generation; running turns keep the one they started with.

        The Host's Python agents join ``config`` as they did at open, and its
        Agent Cores are loaded at their live refs now: applying the same
        configuration after a promotion builds a generation on the new revision.
        A core that does not load is left out (not available), except one of
        ``require_cores``: its ``ConfigError`` is raised and nothing is applied
        (a reload applies every core it checked or nothing).

        Settings the Host read only when it opened (all of ``[store]``, and
        ``[host]`` but ``workspace`` and ``limits``) take effect when it is
        reopened. A ``config`` that moves the state (the store, the artifact root,
        the cores' directory) is a ``ConfigError`` naming them, and nothing is
        applied; one that changes another (the waits, the session lease, the
        artifact reserve, telemetry) is applied with the values the Host opened
        with, which ``host.config`` shows, and a warning.
        """
        if self._closed:
            raise TurnRejected("the Host is closed")
        if not isinstance(config, HostConfig):
            raise ConfigError("apply_config takes a HostConfig (parse_config or load_config)")
        if not is_names(require_cores, limit=200, items=1_000):
            raise ConfigError("require_cores must be a list of core ids")
        if capabilities is not None and not isinstance(capabilities, RuntimeCapabilities):
            raise InvalidValue(
                f"capabilities must be a RuntimeCapabilities or None, not {_kind(capabilities)}"
            )
        require_cores = tuple(str.__str__(core_id) for core_id in require_cores)
        effective = _check_open_settings(self.config, config)
        # One apply at a time, from reading the live revisions to installing: an apply
        # that read them before a promotion cannot install after the promotion's own.
        async with self._apply_lock:
            return await self._apply(effective, capabilities, require_cores, declared=config)

    async def _apply(
        self,
        config: HostConfig,
        capabilities: RuntimeCapabilities | None,
        require_cores: Collection[str],
        *,
        declared: HostConfig,
    ) -> int:
        try:
            composed, cores, core_warnings = await compose_cores(
                config, self.store.cores, required=require_cores
            )
            config, instances, channel_warnings = compose_agents(
                composed, self.agents, serves_channels=self._require_channels
            )
            workspace_warnings = (*await _prepare_workspaces(config), *channel_warnings)
            # As at open: nothing is applied that lets an agent rewrite a Python agent.
            await anyio.to_thread.run_sync(check_agent_code, config, self.agents)
        except StoreClosed:
            await self._refuse_closed(capabilities)
        if self._closed:
            # aclose ran meanwhile and closes the generations it finds: install nothing.
            await self._refuse_closed(capabilities)
        if capabilities is None and self._supplied is None and self._check_providers:
            # As at open: nothing is applied when a provider's package is missing.
            await anyio.to_thread.run_sync(check_provider_extras, config)
            # Nor when a provider this apply brings in lacks its key (unlike open: every
            # turn on it would be refused until the file is edited again).
            check_changed_provider_keys(config, self.config)
            if self._closing():
                await self._refuse_closed(capabilities)
        supplied = capabilities or self._supplied
        if supplied is None:
            await load_channel_adapters(config)
        caps = with_agents(
            supplied
            or DefaultCapabilities.from_config(
                config, store=self.store, require_channels=self._require_channels
            ),
            config,
            self.agents,
            instances,
        )
        previous = self._generation
        generation = self._new_generation(
            previous.number + 1,
            config,
            caps,
            cores=cores,
            unavailable=unavailable_reasons(config, core_warnings),
            supplied=supplied,
        )
        await self._build_changed_tools(
            previous, generation, authority_changed=capabilities is not None
        )
        if self._closing():
            # aclose ran while the tools were built: install nothing.
            await uninterrupted(self._discard(generation))
            await self._refuse_closed(capabilities)
        self._supplied = supplied
        self.warnings = (*workspace_warnings, *core_warnings)
        self._generation = generation
        self.config = config
        self.declared_config = declared
        # Retired before any await: a turn of ``previous`` that ends meanwhile must find it
        # to release its pin (else it stays open for good), and so must ``aclose``.
        previous.retired = True
        self._retired.append(previous)
        # The rest finishes what is installed, also when the caller is cancelled.
        await uninterrupted(self._retired_whole(previous, config, capabilities is not None))
        # An outage's backlog goes to a changed provider now, not after its backoff.
        changed = (
            tuple(config.agents)
            if capabilities is not None
            else _provider_changed(previous.config, config)
        )
        if changed:
            for worker in list(self._workers):
                await worker.providers_changed(changed)
        return self._generation.number

    async def _build_changed_tools(
        self, previous: Generation, generation: Generation, *, authority_changed: bool
    ) -> None:
        """Build, before ``generation`` replaces ``previous``, the tools of every agent that is
        new or changed (all of them when their authority may have).

        Strict only for what this configuration wrote: a ``ConfigError`` of an agent
        that is new or changed in it (not a core whose live revision moved: that move is
        recorded, refusing the apply would not undo it) closes ``generation`` and
        applies nothing, so ``previous`` keeps serving; so does one of an agent rebuilt
        only because its authority may have changed (new sources, a section outside
        ``[agents]``) that ``previous`` serves: this apply broke it. Any other agent
        that cannot serve (broken before) is installed unavailable with its reason.
        Cancellable (aclose cancels it; nothing is installed) and bounded by
        ``BUILD_TOOLS_DEADLINE_S``.
        """
        before, after = previous.config, generation.config
        rebuilt = _authority_changed(before, after, authority_changed)
        changed = [
            agent
            for agent in after.agents
            if agent not in before.agents or previous.revision(agent) != generation.revision(agent)
        ]
        # A declared core's revision is its live ref's: a move recorded, not written here.
        fatal = {
            agent for agent in changed if agent not in after.cores or agent not in before.cores
        }

        async def served(agent: str) -> bool:
            # Unchanged itself: broken by this apply only if the previous generation serves it.
            return agent not in changed and await previous.serves(agent)

        try:
            with self._build_scope(BUILD_TOOLS_DEADLINE_S) as scope:
                await generation.build_tools(
                    after.agents if rebuilt else changed,
                    fatal=fatal,
                    served=served,
                    closing=self._closing,
                )
        except BaseException:
            await uninterrupted(self._discard(generation))
            raise
        if scope.cancelled_caught and not self._closing():
            _log.warning(
                "generation %d: building the tools took over %s s; the rest are built at "
                "their agents' first turns",
                generation.number,
                BUILD_TOOLS_DEADLINE_S,
            )

    async def _discard(self, generation: Generation) -> None:
        """Close a generation that was never installed; the sources handed in stay the
        caller's, as when any other check refuses an apply."""
        try:
            await generation.aclose()
        except Exception:
            _log.exception("closing the refused generation %s failed", generation.number)

    async def _retired_whole(
        self, previous: Generation, config: HostConfig, authority_changed: bool
    ) -> None:
        try:
            await self._retire(previous, config, authority_changed=authority_changed)
        except HostkitError as exc:
            # The new generation is installed and serves: the apply succeeded, and a
            # caller told otherwise would retry a change already made (a reload "failed"
            # while it serves). Only the stored records of dropped MCP declarations stay.
            _log.warning(
                "generation %d applied; cleaning up after generation %d failed (records "
                "of MCP servers no longer declared may stay): %s",
                self._generation.number,
                previous.number,
                exc.message,
            )
        finally:
            await self._close_if_idle(previous)

    async def _retire(
        self, previous: Generation, config: HostConfig, *, authority_changed: bool
    ) -> None:
        """What replacing ``previous`` with the current generation ends: session approvals
        given under it, and MCP connections and records of declarations it had."""
        # A changed (or removed) agent's session approvals were given for another revision.
        # New capability sources, or a change outside the agents' own sections, may change
        # what any agent is granted: its authority changed, so every agent's approvals go
        # (a later switch back must not revive them).
        authority_changed = _authority_changed(previous.config, config, authority_changed)
        for agent in previous.config.agents:
            if (
                authority_changed
                or agent not in config.agents
                or previous.revision(agent) != self._generation.revision(agent)
            ):
                self._approval_runtime.invalidate(core_id=agent)
        # A removed or changed declaration's connections close in every session now.
        await self.mcp.prune(_declared_mcp(config))
        for agent in previous.config.agents:
            await self.store.mcp_servers.forget_mcp_servers(
                agent, config.agents[agent].mcp if agent in config.agents else ()
            )

    async def _refuse_closed(self, capabilities: RuntimeCapabilities | None) -> NoReturn:
        """The Host closed during an apply: the sources handed to it are closed, nothing is
        installed (``TurnRejected``)."""
        if capabilities is not None and capabilities is not self._supplied:
            with anyio.CancelScope(shield=True):
                try:
                    await capabilities.aclose()
                except Exception:
                    _log.exception("closing the capability sources of a refused apply failed")
        raise TurnRejected("the Host is closed")

    # -- live reload (docs/generations.md) --------------------------------------------

    async def reload(self, *, read_timeout_s: float = 30.0) -> ReloadOutcome:
        """Re-read what the Host was opened from; apply a new generation if anything changed.

        The file (``config.source``; a configuration built in code is reused as
        it is) is read off the event loop, each core's live revision is read
        from the store (a promotion by another process counts), and
        ``apply_config`` runs only when the configuration's content or a core's
        live commit differs from what the current generation was built from;
        running turns finish on theirs. A configuration that fails validation
        (TOML, schema, a core's ``agent.yaml``, an unknown provider) or moves the
        Host's state (see ``apply_config``) changes nothing: the
        outcome is ``rejected`` with the bounded reason, also logged. So does an
        error no check foresaw while applying (its traceback logged too): it never
        reaches the caller or the watcher as an exception.
        Reloads run one at a time; reading is bounded by ``read_timeout_s``; a
        cancelled reload installs the new generation whole or not at all (only
        building the tools, before installing, is cut). The Host closing
        meanwhile rejects the reload (nothing is installed).
        """
        if self._closed:
            raise TurnRejected("the Host is closed")
        if not is_seconds(read_timeout_s, high=3_600):
            raise ConfigError("read_timeout_s must be in (0, 3600] seconds")
        async with self._reload_lock:
            try:
                outcome = await self._reload(read_timeout_s)
            except (StoreClosed, TurnRejected):
                if not self._closing():
                    raise
                outcome = rejected(self._generation.number, "the Host is closing")
        if outcome.rejected:
            _log.warning("%s", outcome)
        elif outcome.applied:
            _log.info("%s", outcome)
        return outcome

    async def _reload(self, read_timeout_s: float) -> ReloadOutcome:
        declared, number = self.declared_config, self._generation.number
        try:
            with anyio.fail_after(read_timeout_s):
                config = declared
                if declared.source is not None:
                    config = await anyio.to_thread.run_sync(
                        load_config, declared.source, abandon_on_cancel=True
                    )
                live = await live_revisions(config, self.store.cores)
                built = {core_id: core.revision for core_id, core in self._generation.cores.items()}
                changes = (*config_changes(declared, config), *core_changes(built, live))
                if not changes:
                    return ReloadOutcome(number, False)
                # Strict, unlike open: a live revision that does not load rejects it all.
                await check_cores(config, live, self.store.cores)
        except ConfigError as exc:
            return rejected(number, exc.message)
        except TimeoutError:
            return rejected(number, f"reading the configuration took over {read_timeout_s} s")
        except HostkitError:
            raise  # a runtime failure (the store), not the configuration's
        except Exception as exc:
            return _unexpected(exc, number)
        try:
            # Cancellable until it installs (then finished whole): a shutdown does not wait
            # for the new agents' tools to be discovered, and installs nothing.
            # The live revisions are read again: one moved to a broken commit since the check
            # rejects the reload instead of leaving its core out.
            checked = [core_id for core_id, sha in live.items() if sha is not None]
            waiting = set(reopen_changes(self.config, config))
            number = await self.apply_config(config, require_cores=checked)
        except ConfigError as exc:
            return rejected(number, exc.message)
        except HostkitError:
            raise
        except Exception as exc:
            # The generation that serves now: the apply may have failed after installing.
            return _unexpected(exc, self._generation.number)
        changes = tuple(
            f"{change} (when the Host reopens)" if change in waiting else change
            for change in changes
        )
        return ReloadOutcome(number, True, None, changes)

    # -- embedder conveniences -------------------------------------------------------

    async def run_turn(
        self,
        agent: str,
        message: str,
        *,
        conversation: str | None = None,
        principal: str = "local",
        channel: str = "embedder",
    ) -> str:
        """Run one turn in ``conversation`` and return the answer text.

        The default conversation is the agent's own (``default`` for the
        ``assistant``, ``default/<agent>`` for another), as the CLI's is
        ``terminal``/``terminal/<agent>``: two agents never read each other's
        transcript unless the caller names one conversation for both.
        Raises ``TurnNotCompleted`` (with the result) for any other outcome.
        """
        name = _name(agent)
        if name is None:
            raise InvalidValue(
                f"agent must be the name of one of this Host's agents, not {_kind(agent)}"
            )
        key = conversation
        if key is None:
            key = "default" if name == "assistant" else f"default/{name}"
        try:
            facts = ConversationFacts(
                channel=channel, conversation_key=key, principal_key=principal
            )
        except InvalidValue as exc:
            if conversation is None and str(exc).startswith("conversation_key "):
                # The default conversation is named after the agent: no agent has such a name.
                raise InvalidValue("agent must be the name of one of this Host's agents") from None
            raise _in_parameters(exc) from None
        result = await self.turns.run(
            TurnRequest(input=message, principal=facts, request_id=new_id("req"), core_id=name)
        )
        if result.outcome != "completed":
            raise TurnNotCompleted(result)
        return result.text

    def inbox_worker(
        self,
        *,
        agent: str | None = None,
        route: Route | None = None,
        inbox: ChannelInbox | None = None,
        **options: Any,
    ) -> InboxWorker:
        """A worker that answers ``inbox`` (default: ``self.inbox``) with this Host's turns.

        ``async with host.inbox_worker() as worker:`` serves in the background
        until the block ends; ``await worker.run()`` serves in your own task
        group; ``await worker.drain()`` answers what is due now and returns
        (``StoreError`` if its claims keep failing: the messages stay due).
        ``route`` maps a channel instance id to the agent that answers it
        (default: the ``agent`` of its ``[channels.<id>]`` table, else
        ``agent``, ``assistant`` when not given; one given must name one of
        the Host's agents: ``InvalidValue`` otherwise). A channel configured
        under ``[channels]`` (read from the current configuration at each
        inbound) gets a reply route: its turns'
        answers and approval prompts become outbox intents for delivery; other
        channels' turns write none. Command inbounds (``approve CODE``) answer
        the sender's pending approval; the sender of a message the channel
        accepted without its text is told it could not be read. ``options`` are ``InboxWorker``'s
        (``concurrency``, ``idle_poll_s``, ``grace_s``, ``reply_route``,
        ``run_command``, ...). Closing the Host stops its workers first: no
        new claims, a grace period for the turns in flight, every claim still
        held released.
        """
        if self._closed:
            raise StoreClosed()
        if route is not None and not callable(route):
            raise InvalidValue(f"route must be a function of a channel id, not {_kind(route)}")
        if inbox is not None and not isinstance(inbox, ChannelInbox):
            raise InvalidValue(f"inbox must be a ChannelInbox, not {_kind(inbox)}")
        if agent is None:
            agent = "assistant"  # a channel without an agent of its own; unchecked
        else:
            agent = self._check_default_agent(agent, known=route is None)
        options.setdefault(
            "reply_route", lambda envelope: reply_route(self.config.channels, envelope)
        )
        options.setdefault("run_command", self._commands.run)
        options.setdefault("tell_unread", self._commands.tell_unread)
        options.setdefault("tell_dropped", self._commands.tell_dropped)
        worker = InboxWorker(
            inbox or self.inbox,
            self._inbound.run,
            route=route or functools.partial(self._channel_agent, agent),
            find_turn=self._inbound.find,
            **options,
        )
        self._workers.add(worker)
        return worker

    def _check_default_agent(self, agent: object, *, known: bool) -> str:
        """The agent that answers a channel with none of its own must exist now (when
        ``known``): a typo would otherwise reach no agent, and dead-letter every such inbound."""
        name = _name(agent)
        if name is None:
            raise InvalidValue(
                f"agent must be the name of one of this Host's agents, not {_kind(agent)}"
            )
        agents = sorted(self.config.agents)
        if known and name not in agents:
            raise InvalidValue(unknown_agent(name, agents))
        return name

    def _channel_agent(self, default: str, channel: str) -> str:
        """The agent that answers ``channel``: its ``[channels.<id>]`` agent, else ``default``."""
        configured = self.config.channels.get(channel)
        return default if configured is None else configured.agent

    def delivery_runtime(self, **options: Any) -> DeliveryRuntime:
        """A runtime that delivers this Host's outbox through its configured channels.

        Each attempt looks the route's channel alias up in the *current*
        generation (a config apply changes the adapter for later attempts;
        an attempt already sending holds its generation, which closes after
        the send; the route a turn captured never changes; an alias no
        generation configures fails closed as ``no_channel``). Policy and concurrency
        come from ``[serve]``; ``options`` are ``DeliveryRuntime``'s
        (``policy``, ``concurrency``, ``idle_poll_s``, ``grace_s``, ``clock``,
        ...). ``async with host.delivery_runtime():`` serves in the
        background; closing the Host stops it first (grace, claims released).
        """
        if self._closed:
            raise StoreClosed()
        serve = self.config.serve
        options.setdefault(
            "policy",
            DeliveryPolicy(
                max_attempts=serve.delivery_max_attempts,
                backoff_s=serve.delivery_backoff_s,
                backoff_max_s=max(serve.delivery_backoff_max_s, serve.delivery_backoff_s),
            ),
        )
        options.setdefault("concurrency", serve.delivery_concurrency)
        runtime = DeliveryRuntime(self.store.delivery, self._outbound_channel, **options)
        self._deliveries.add(runtime)
        return runtime

    def _outbound_channel(self, alias: str) -> OutboundChannel | None:
        """``alias``'s adapter in the current generation, looked up at each attempt; its
        send holds that generation (a reload meanwhile closes it after the send).

        A closing Host raises ``ChannelsClosing``, never None: its alias is still
        configured, and None dead-lettered the answer (``no_channel``) at once.
        """
        if self._closed:
            raise ChannelsClosing()
        if self._generation.capabilities.channels.channel(alias) is None:
            return None
        return HeldChannel(alias, self._held)

    @contextlib.asynccontextmanager
    async def _held(self) -> AsyncIterator[Generation]:
        """The current generation, held as a turn's pin holds it while the block uses it
        outside a turn (a channel send, a catalog read): a reload meanwhile closes it
        only after the block ends, not under the use (an HTTP client closed under a POST
        the platform already took made the retry post it twice)."""
        if self._closed:
            raise TurnRejected("the Host is closed")
        generation = self._generation
        generation.hold()  # before any await: the apply that replaces it sees the hold
        try:
            yield generation
        finally:
            await uninterrupted(self._release_held(generation))

    async def _release_held(self, generation: Generation) -> None:
        await generation.release()
        await self._close_if_idle(generation)

    async def _stop_deliveries(self) -> None:
        """Wind every delivery runtime down together (each bounded by its own grace)."""
        async with anyio.create_task_group() as group:
            for runtime in list(self._deliveries):
                group.start_soon(runtime.aclose)

    def serve(self, **options: Any) -> HostDaemon:
        """This Host as a daemon: webhooks, pollers and inbox workers under one supervisor.

        ``await host.serve(port=0).run()`` serves until its shutdown;
        ``async with host.serve() as daemon:`` serves in the background
        (``daemon.url``, ``await daemon.status()``). ``options`` are
        ``HostDaemon``'s (``listen``, ``port``, ``env``, ``policy``). A secret
        variable a channel names but the environment lacks is a ``ConfigError``
        here, before anything starts (docs/service.md).
        """
        # The daemon loads here, not with every command line that opens a Host; the
        # stack it serves on (uvicorn, Starlette, httpx) when it binds, off the loop.
        from hostkit.host._serve import HostDaemon

        if self._closed:
            raise StoreClosed()
        # What passes on: HostDaemon's keyword parameters.
        accepted = frozenset(inspect.signature(HostDaemon.__init__).parameters) - {"self", "host"}
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise InvalidValue(
                f"unknown serve option {bounded(', '.join(unknown), 100)}; "
                f"the options are {', '.join(sorted(accepted))}"
            )
        return HostDaemon(self, **options)

    async def _stop_workers(self) -> None:
        """Wind every inbox worker down together (each bounded by its own grace)."""
        async with anyio.create_task_group() as group:
            for worker in list(self._workers):
                group.start_soon(worker.aclose)

    async def tool_catalog(self, agent: str, *, session_id: str | None = None) -> ToolCatalog:
        """``agent``'s tools as a new turn would be offered them, each with its source.

        With ``session_id``, the tools of that session's live MCP connections
        join; every other declared server is listed with its last stored
        state. A read: nothing connects, nothing starts. An unknown ``agent``
        is ``InvalidValue``.
        """
        if self._closed:
            raise StoreClosed()
        async with self._held() as generation:
            return await tool_catalog(
                generation, self.mcp, self.store, agent, session_id=session_id
            )

    async def _summarizer(self, context: TurnExecutionContext) -> Summarizer | None:
        """The summarizer of the turn's agent in the turn's generation."""
        generation = self._generation_of(context.generation)
        return None if generation is None else await generation.summarizer(context.core_id)

    async def _approval_fingerprint(self, approval: PendingApproval) -> str | None:
        """What the approval's effect fingerprints to now ("" when it is no longer offered;
        None when only its continuation can tell: an MCP tool without a connection here).

        ``ApprovalRefused`` (``unavailable``) when this Host cannot run the agent that
        asked: not configured here (a CLI opened without its ``--agent``), or its
        provider is out. That says nothing about the approval, which stays pending.
        """
        try:
            core = await self.pin(approval.core_id, None)
        except TurnRejected as exc:
            agent = approval.core_id
            if agent not in self.config.agents:
                # Not "did you mean" another agent: the asking agent is the one to run.
                detail = (
                    f"agent {agent!r} asked for it and this Host does not run it; nothing "
                    f"was recorded: answer it where {agent!r} runs (defined in Python: "
                    f"--agent module:attribute of the Agent named {agent!r})"
                )
            else:
                detail = (
                    f"this Host cannot run agent {agent!r} now ({exc.reason}); nothing was recorded"
                )
            raise ApprovalRefused(approval.approval_id, "unavailable", detail) from exc
        try:
            generation = self._generation_of(core.generation)
            if generation is None:
                return ""
            return await generation.approval_fingerprint(core, approval.effect, approval.session_id)
        finally:
            await self.release(core)

    def _generation_of(self, number: int) -> Generation | None:
        """The generation numbered ``number``, current or retired but still in use."""
        return next((g for g in (self._generation, *self._retired) if g.number == number), None)

    async def operator(
        self, operator_id: str, *, reason: str, audit_best_effort: bool = False
    ) -> PrincipalScope:
        """An audited operator scope, valid until this Host closes.

        ``audit_best_effort`` (an operator's view on a Host opened ``reads_only``):
        an audit record the store cannot write now (its write lock held, the disk
        full) is logged as a warning instead of refusing the scope.
        """
        if self._closed:
            raise StoreClosed()
        # Plain copies (the issuer checks their length and text): a subclass's own methods
        # never run there.
        name, why = (_name(value) or value for value in (operator_id, reason))
        return await self._issuer.issue(name, reason=why, audit_best_effort=audit_best_effort)

    async def aclose(self) -> None:
        """Stop: cancel running turns, revoke operator authority, close generations and store.

        Inbox workers and delivery runtimes stop claiming first, before any
        lookup sees the Host closed (a claim that comes back is released, its
        attempt not spent). Each step runs even when an earlier one raises (an
        exit stack, last pushed first): prompts withdrawn, inbox workers wound down (their
        turns get the workers' grace, their claims are released), turns
        ended, every process tree any generation started ended (grandchildren
        too), operator authority revoked, generations closed, context
        decisions still held written, then the store; last, this Host's lease owner
        retired (a turn it could not end, a Host opened again in this process takes
        over at once). Their waits for another process's lock end
        ``CLOSE_LOCK_WAIT_S`` after the close began.
        """
        if self._closed:
            return
        # Before anything sees the Host closed: a worker or runtime that then finds a
        # claim (one under way now) hands it back unstarted instead of failing it.
        for worker in self._workers:
            worker.stop()
        for runtime in self._deliveries:
            runtime.stop()
        self._closed = True
        for building in self._building:
            building.cancel()  # its apply installs nothing, its core move records nothing
        self.store.limit_waits(CLOSE_LOCK_WAIT_S)
        # Uninterrupted: a cancelled caller must not leave sources or child processes open.
        await uninterrupted(self._close())

    async def _close(self) -> None:
        """The steps of ``aclose``, last pushed first."""
        async with contextlib.AsyncExitStack() as stack:
            # Last, once nothing of this Host runs: a lease it could not end (the store
            # failed) is then a dead owner's to a Host opened again in this process.
            stack.callback(self._lease_owner.retire)
            stack.push_async_callback(self.store.aclose)
            if self.tracing is not None:
                # After the turns ended: their spans are exported before the Host is gone.
                stack.push_async_callback(self.tracing.aclose)
            stack.push_async_callback(self.context.aclose)
            stack.push_async_callback(self._close_supplied)
            stack.push_async_callback(self._close_generations)
            stack.push_async_callback(self._builds_ended)
            stack.push_async_callback(self.authority.aclose)
            stack.push_async_callback(self.processes.aclose)
            stack.push_async_callback(self.mcp.aclose)
            stack.push_async_callback(self.turns.shutdown)
            stack.push_async_callback(self._stop_deliveries)
            stack.push_async_callback(self._stop_workers)
            stack.callback(self._approval_runtime.close)

    async def _builds_ended(self) -> None:
        """Wait for the tools builds ``aclose`` cancelled to end, and their discovery
        children with them (bounded: ``APPLY_CLOSE_WAIT_S``)."""
        with anyio.move_on_after(APPLY_CLOSE_WAIT_S) as waited:
            for ended in list(self._building.values()):
                await ended.wait()
        if waited.cancelled_caught:
            _log.warning("a tools build outlasted %s s; closing anyway", APPLY_CLOSE_WAIT_S)

    async def _close_generations(self) -> None:
        """Close every generation, after an apply in progress finished (bounded wait).

        The apply sees the Host closed and installs nothing; one that already
        installed has its generation closed here, found after the wait.
        """
        held = False
        with anyio.move_on_after(APPLY_CLOSE_WAIT_S):
            await self._apply_lock.acquire()
            held = True
        if not held:
            _log.warning("a configuration apply outlasted %s s; closing anyway", APPLY_CLOSE_WAIT_S)
        try:
            for generation in (*self._retired, self._generation):
                await self._close_generation(generation)
        finally:
            if held:
                self._apply_lock.release()

    async def _close_generation(self, generation: Generation) -> None:
        """Close a generation no turn uses, and supplied sources nothing uses any more."""
        try:
            await generation.aclose()
        except Exception:
            _log.exception("closing generation %s failed", generation.number)
        supplied = generation.supplied
        if (
            supplied is None
            or supplied is self._supplied
            or any(g.supplied is supplied for g in (self._generation, *self._retired))
        ):
            return
        try:
            await supplied.aclose()
        except Exception:
            _log.exception(
                "closing the capability sources of generation %s failed", generation.number
            )

    async def _close_supplied(self) -> None:
        if self._supplied is not None:
            try:
                await self._supplied.aclose()
            except Exception:
                _log.exception("closing the supplied capability sources failed")


def _declared_mcp(config: HostConfig) -> set[tuple[str, str, str]]:
    """(agent, server, declaration digest) of every MCP server ``config`` declares."""
    return {
        (agent, name, settings.declaration(name).digest())
        for agent, agent_config in config.agents.items()
        for name, settings in agent_config.mcp.items()
    }


def _authority_changed(previous: HostConfig, config: HostConfig, supplied: bool) -> bool:
    """Whether what any agent is granted may differ from ``previous``: new capability
    sources were ``supplied``, or something outside the agents' own sections changed."""
    return supplied or _outside_agents(previous) != _outside_agents(config)


def _provider_changed(previous: HostConfig, config: HostConfig) -> tuple[str, ...]:
    """The agents whose model provider ``config`` changed: another provider, or its
    ``[providers.<name>]`` section edited (a fixed base URL, a key, a model)."""
    return tuple(
        name
        for name, agent in config.agents.items()
        if (before := previous.agents.get(name)) is not None
        and (
            before.provider != agent.provider
            or previous.providers.get(before.provider) != config.providers.get(agent.provider)
        )
    )


def _outside_agents(config: HostConfig) -> dict[str, object]:
    """The configuration apart from the agents (each agent's own part is its revision)."""
    # Relative paths (workspaces, sandbox roots) resolve against base_dir.
    return {
        **config.model_dump(mode="json", exclude={"agents"}),
        "base_dir": str(config.base_dir),
    }


async def _prepare_workspaces(config: HostConfig) -> tuple[str, ...]:
    """Create missing agent workspaces; log (and return) each that cannot be, every
    overlap with Host state and every secret held for terminal.run that no program is
    listed for: the start-up warnings a front end shows.

    The cores' extraction root is created too (when cores are configured): a
    sandbox masks the Host's state only where it exists, and a revision
    directory an agent planted there before the first extraction would be
    taken for the extracted core.
    """
    missing: list[str] = []
    if config.cores:
        try:
            await anyio.Path(config.cores_root).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            missing.append(f"cannot create {config.cores_root}: {exc.strerror or exc}")
    for workspace in dict.fromkeys(config.workspace_of(agent) for agent in config.agents):
        try:
            await anyio.Path(workspace).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # Not fatal: the file tools report an unavailable root if it stays missing.
            missing.append(
                f"cannot create the workspace {workspace}: {exc.strerror or exc}; "
                "the agents' file and terminal tools are unavailable until it exists"
            )
    overlaps = await anyio.to_thread.run_sync(state_overlaps, config)
    warnings = (*missing, *overlaps, *unlisted_secrets(config))
    for line in warnings:
        _log.warning("%s", line)
    return warnings


async def resolve_config(
    config: HostConfig | str | Path | None, *, assistant: bool = True
) -> HostConfig:
    """``config`` as a HostConfig; None is the default one (``assistant``: with its agent)."""
    if isinstance(config, HostConfig):
        return config
    if isinstance(config, str):
        config = str.__str__(config)  # a subclass's own methods never run in the loader
    if config is None:
        return default_config(base_dir=Path(await anyio.Path.cwd()), assistant=assistant)
    if not isinstance(config, str | os.PathLike):
        raise ConfigError("config must be a HostConfig, a path to hostkit.toml, or None")
    return await anyio.to_thread.run_sync(load_config, config)


def _check_open_settings(current: HostConfig, config: HostConfig) -> HostConfig:
    """``config`` as a new generation runs it: with what the Host read when it opened.

    A change of where the state is (the store, ``[host] artifacts``, the cores'
    directory) is refused whole, never half applied (files.* protecting a new
    artifact root while terminal output still goes to the old one, every write going
    to the old store while the CLI reads the new). Any other open-time change (the
    approval wait, the session lease, tracing, ...) waits for the next open: the
    generation keeps the opened value (``host.config`` says it), and a warning says so.
    """
    changed = reopen_changes(current, config)
    split = split_state(changed)
    if split:
        error = ConfigError(
            f"{', '.join(split)} changed: read only when the Host opens, so this takes "
            "effect when the Host is reopened (restart hostkit serve); the current "
            "configuration stays"
        )
        error.key = split[0]
        raise error
    if changed:
        _log.warning(
            "%s changed: read only when the Host opens; the Host keeps the value it opened "
            "with until it is reopened (restart hostkit serve)",
            ", ".join(changed),
        )
    return with_opened(config, current)


def _unexpected(exc: Exception, generation: int) -> ReloadOutcome:
    """A reload that failed with an error no check foresaw (a bug, or input a validator
    missed): rejected, with its traceback logged, never raised into the watcher, whose
    restart would take the bad file for its baseline and never report it."""
    _log.error("applying the configuration failed unexpectedly", exc_info=exc)
    return rejected(
        generation, f"the configuration could not be applied ({type(exc).__name__}: {exc})"
    )


def _name(value: object) -> str | None:
    """A name argument (an agent, a revision) as a plain ``str``, None when it is no ``str``.

    Any text is taken: an unknown name is refused by the check that knows which there
    are, and says so. A subclass's own ``__eq__``, ``__hash__`` or ``__repr__`` never runs.
    """
    return str.__str__(value) if isinstance(value, str) else None


def _kind(value: object) -> str:
    """What a wrong-typed argument is, for its error: its type's name, never its repr
    (which may be huge, raise, or recurse without end)."""
    return bounded(type(value).__name__, 60)


# run_turn's parameters by the ConversationFacts field each fills.
_RUN_TURN_PARAMETERS = (("conversation_key", "conversation"), ("principal_key", "principal"))


def _in_parameters(error: InvalidValue) -> InvalidValue:
    """``error`` naming ``run_turn``'s parameter, not the field it fills."""
    message = str(error)
    for field, parameter in _RUN_TURN_PARAMETERS:
        if message.startswith(f"{field} "):
            return InvalidValue(parameter + message[len(field) :])
    return error


def _check_open(capabilities: object, approver: object, agents: object, observer: object) -> None:
    """What ``Host.open`` was handed, checked before anything opens: a wrong value is an
    ``InvalidValue`` now, not an ``AttributeError`` at the first turn or at close."""
    if capabilities is not None and not isinstance(capabilities, RuntimeCapabilities):
        raise InvalidValue(
            "capabilities must be a RuntimeCapabilities (hostkit.testing.capabilities builds "
            f"one), not {type(capabilities).__name__}"
        )
    if approver is not None and not callable(getattr(approver, "decide", None)):
        raise InvalidValue(
            "approver must be an ApprovalProvider (an object with an async decide(request)), "
            f"not {type(approver).__name__}"
        )
    if isinstance(agents, str | bytes) or not isinstance(agents, Sequence):
        raise InvalidValue(
            f"agents must be a list of hostkit.Agent values, not {type(agents).__name__}"
        )
    if observer is not None and not callable(getattr(observer, "notify", None)):
        raise InvalidValue(
            "observer must be an Observer (an object with notify(event)), "
            f"not {type(observer).__name__}"
        )
