"""HostDaemon: a Host's channels, inbox workers and delivery under one supervisor.

The registry is built from the Host's current configuration, in dependency
order: "delivery" (the outbox to the platforms), "inbox" (turns for inbound
messages), "retention" (``ChannelInbox.prune``, then the attachments no turn
took and the terminal output past ``[host] artifact_retention_s``, every
``[serve] retention_interval_s``), one "poll:<id>" per Telegram
channel with ``inbound = "polling"``, with ``watch=True`` (``hostkit serve``)
"reload" (the ``ConfigWatcher``: a changed ``hostkit.toml`` or core ref, or
``reload_now()`` on SIGHUP, makes a new generation; docs/generations.md),
and "webhooks" (uvicorn serving
``hostkit.channels.ingress_app``; it lingers through a shutdown to answer
``/readyz``). A shutdown stops them in reverse: the webhook routes refuse
new requests and readiness goes 503, pollers stop, the inbox worker gives
its turns the drain time less delivery's share and releases its claims, then
delivery sends what became due (those turns' answers) in the rest of the
deadline: a send cut there spends its attempt (retried after the backoff,
never re-sent by this process), an unsent claim is released. Every terminal
turn wakes delivery at once (an answer waits for no idle poll).

Secrets are read from the environment here, when the daemon is made: a
missing variable is a ``ConfigError`` naming it before anything starts. What
serving runs on (uvicorn, Starlette, httpx) loads when the daemon binds, on a
worker thread: an embedding event loop (a notebook's kernel) does not stall
for its imports.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskStatus

from hostkit._background import Background
from hostkit._lazy import load_off_loop
from hostkit._store_health import StoreHealth
from hostkit.channels import short_secret
from hostkit.daemon import (
    DaemonExit,
    DaemonRegistry,
    DaemonStatus,
    RestartPolicy,
    Supervisor,
)
from hostkit.delivery import DeliveryRuntime
from hostkit.errors import ConfigError, InvalidValue, StoreError, TurnRejected
from hostkit.host._bus import EventBus
from hostkit.host._config import check_channel_agents
from hostkit.host._config_channels import ChannelConfig
from hostkit.host._defaults import channel_secret
from hostkit.host._reload import ConfigWatcher, ReloadOutcome
from hostkit.inbox import RetentionSweeper, TurnsEnded, outage_checks
from hostkit.types import is_seconds, is_text

if TYPE_CHECKING:
    from hostkit.channels import TelegramPoller
    from hostkit.host._host import Host
    from hostkit.host._serve_http import WebhookServer

__all__ = ["HostDaemon", "ServeStatus", "delivery_share"]

# The modules that bring uvicorn, Starlette and httpx, loaded when a daemon binds, and the
# one uvicorn's server loads as it starts (its config's lifespan = "off").
_SERVING_STACK = (
    "hostkit.host._serve_http",
    "hostkit.channels._app",
    "hostkit.channels._polling",
    "uvicorn.lifespan.off",
)

_log = logging.getLogger("hostkit.serve")
# Of the shutdown deadline, delivery keeps this fraction (at most _DELIVERY_SHARE_MAX_S
# seconds) for the answers of the turns the inbox drain let finish.
_DELIVERY_SHARE = 0.25
_DELIVERY_SHARE_MAX_S = 5.0
# Of what is left of the deadline when delivery stops, kept for recording cut-off sends.
_RECORD_MARGIN_S = 0.25
# The limit a shutdown puts on store waits, past its deadline (a call to a server that
# does not answer is cut half a second after the limit; closing the pool adds its joins).
_STORE_MARGIN_S = 1.0
_TERMINAL = frozenset(
    f"turn.{outcome}"
    for outcome in ("completed", "needs_user", "failed", "cancelled", "lost", "indeterminate")
)


def delivery_share(drain_timeout_s: float) -> float:
    """The part of ``drain_timeout_s`` kept for delivery after the inbox drained."""
    return min(_DELIVERY_SHARE_MAX_S, drain_timeout_s * _DELIVERY_SHARE)


@dataclass(frozen=True, slots=True)
class ServeStatus:
    """A live snapshot of a serving Host, for status lines and widgets.

    ``queued``: inbound messages waiting for a turn; ``running``: turns in
    flight in this process; ``delivered``: answers this process delivered
    (a failed turn's notice to its sender too); ``turns``: how this
    process's turns for inbound messages ended (how many without an answer:
    failed, lost, cut off; the last one's reason; whether the latest failed
    in a row, as through a provider outage); ``dead_letters``: inbound
    messages and answers given up on, all of them stored (they wait for an
    operator: ``hostkit inbox dlq``, ``hostkit delivery list``);
    ``troubled``: daemons in backoff or failed now; ``listening``: the
    webhook server's URL (the actual port when ``[serve] port = 0``), None
    before it is bound; ``generation``: the
    configuration generation new turns use; ``reload``: the last reload's
    outcome ("generation 3 applied (...)", "config rejected: ...; generation 2
    keeps serving"), None before one.
    """

    daemons: tuple[DaemonStatus, ...]
    queued: int
    running: int
    delivered: int
    dead_letters: int
    listening: str | None
    ready: bool
    generation: int = 1
    reload: ReloadOutcome | None = None
    turns: TurnsEnded = field(default_factory=TurnsEnded)

    @property
    def troubled(self) -> int:
        """How many daemons are in backoff or failed now."""
        return sum(1 for daemon in self.daemons if daemon.troubled)


class _Stoppable(Protocol):
    async def run(self, *, task_status: TaskStatus[None]) -> None: ...
    def stop(self) -> None: ...


class _Worker:
    """A daemon over a worker whose stop() is synchronous (InboxWorker, RetentionSweeper)."""

    def __init__(self, target: _Stoppable) -> None:
        self._target = target

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        await self._target.run(task_status=task_status)

    async def stop(self) -> None:
        self._target.stop()


class _Delivery:
    """The "delivery" daemon: after a graceful stop it delivers what is due, then ends.

    The inbox drains before delivery stops, so the answers of the turns it
    let finish are due now; what is left of the supervisor's deadline bounds
    the wind-down and this last pass (``stop(within_s=...)``), which never
    re-sends what was cut while stopping. While it runs, every terminal turn
    on the Host's event bus wakes the runtime.
    """

    def __init__(
        self, runtime: DeliveryRuntime, events: EventBus, time_left: Callable[[], float | None]
    ) -> None:
        self._runtime = runtime
        self._events = events
        self._time_left = time_left
        self._stopping = False

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        failure: Exception | None = None
        async with (
            self._events.subscribe(lambda event: event.kind in _TERMINAL) as ended,
            anyio.create_task_group() as group,
        ):
            group.start_soon(self._wake_on, ended)
            try:
                await self._runtime.run(task_status=task_status)
                if self._stopping:
                    await self._last_pass()
            except Exception as exc:
                # Raised after the group, so the supervisor sees the error itself.
                failure = exc
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _last_pass(self) -> None:
        """The drain after the stop; claims that kept failing are said here, since the
        supervisor reports no error of a daemon it is stopping."""
        try:
            await self._runtime.drain()
        except StoreError as exc:
            _log.warning("delivery's last pass before exiting: %s", exc.message)

    async def _wake_on(self, ended: Any) -> None:
        async for _ in ended:
            self._runtime.wake()

    async def stop(self) -> None:
        self._stopping = True
        left = self._time_left()
        if left is not None:
            # Cut sends early enough to record their outcome before the supervisor cancels.
            left = max(0.0, left - min(_RECORD_MARGIN_S, left / 4))
        self._runtime.stop(within_s=left)


class HostDaemon(Background):
    """``hostkit serve`` for one Host: ``exit = await host.serve().run()``.

    ``listen``/``port`` override ``[serve]``; ``env`` is where secrets are
    read (default ``os.environ``); ``watch`` adds the "reload" daemon (a
    changed configuration or core ref applies a new generation; the
    listener, the webhook routes and the pollers stay as they started).
    ``run()`` binds the listener (a ``ConfigError`` if it cannot), then
    supervises until ``shutdown()`` or
    ``request_shutdown()`` (bounded by ``[serve] drain_timeout_s`` unless
    given) and returns the ``DaemonExit``. ``async with host.serve() as d:``
    runs it in the background and shuts it down at the end of the block.
    ``closing_host`` says the Host is closed once this daemon stops
    (``hostkit serve``): its shutdown then bounds every store wait by the
    drain deadline, for good (``limit_waits``), so a frozen or unreachable
    database cannot hold the drain; a daemon on a Host that lives on (a
    notebook's) leaves the store's waits as they are.
    """

    def __init__(
        self,
        host: Host,
        *,
        listen: str | None = None,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        policy: RestartPolicy | None = None,
        on_change: Callable[[DaemonStatus], None] | None = None,
        watch: bool = False,
        closing_host: bool = False,
    ) -> None:
        # A Host opened to serve no channel only warned of a channel whose agent it lacks
        # (``check_channel_agents``): serving that channel would fail every message.
        check_channel_agents(host.config)
        serve = host.config.serve
        self.host = host
        self._closing_host = closing_host
        self.listen = serve.listen if listen is None else listen
        self.port = serve.port if port is None else port
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise InvalidValue("port must be an integer")
        if not 0 <= self.port <= 65_535:
            raise InvalidValue("port must be between 0 and 65535")
        if not is_text(self.listen, limit=255) or not self.listen.isascii():
            raise InvalidValue("listen must be a host name or address (ASCII, 1-255 characters)")
        self.drain_timeout_s = serve.drain_timeout_s
        environment = os.environ if env is None else env
        channels = host.config.channels
        self._secrets = {
            cid: _env(environment, cid, "secret_env", c.secret_env)
            for cid, c in channels.items()
            if c.inbound == "webhook"
        }
        self._tokens = {
            cid: _env(environment, cid, "token_env", c.token_env)
            for cid, c in channels.items()
            if c.inbound == "polling"
        }
        # Every store user of this serve reports here; /readyz and /healthz read it.
        self.store_health = StoreHealth()
        self.worker = host.inbox_worker(
            route=self._channel_agent,
            store_health=self.store_health,
            concurrency=serve.inbox_concurrency,
            grace_s=serve.drain_timeout_s - delivery_share(serve.drain_timeout_s),
        )
        self.delivery = host.delivery_runtime(
            grace_s=serve.drain_timeout_s, store_health=self.store_health
        )
        self._channels: dict[str, ChannelConfig] = dict(channels)
        self._environment = environment
        # Each webhook route's settings and secret as of a generation: a reload's allow
        # list or secret_env counts at the next request (the routes are the start's).
        self._webhooks: dict[str, tuple[ChannelConfig, str] | None] = {
            cid: (channels[cid], secret) for cid, secret in self._secrets.items()
        }
        self._webhooks_of = host.generation
        self.retention = RetentionSweeper(
            host.inbox,
            interval_s=serve.retention_interval_s,
            reclaim=lambda limit: host.attachments.reclaim(limit=limit),
            artifacts=lambda limit: host.artifacts.reclaim(limit=limit),
            outbox=host.store.delivery,
        )
        self._policy = policy
        self._on_change = on_change
        # Polls [serve] reload_interval_s of whatever generation is current.
        self.watcher = ConfigWatcher(host, on_outcome=_restart_note) if watch else None
        self._server: WebhookServer | None = None
        self.supervisor: Supervisor | None = None
        # A shutdown asked for before run() made the supervisor (a signal during start-up).
        self._early: tuple[str, float | None] | None = None

    # -- observation ------------------------------------------------------------------

    @property
    def url(self) -> str | None:
        """``http://host:port`` the webhook server listens on (None until ``run`` bound it)."""
        return None if self._server is None else self._server.url

    @property
    def ready(self) -> bool:
        return self.supervisor is not None and self.supervisor.ready

    @property
    def stopping(self) -> bool:
        """Whether the graceful shutdown has begun."""
        return self.supervisor is not None and self.supervisor.stopping

    def statuses(self) -> tuple[DaemonStatus, ...]:
        return () if self.supervisor is None else self.supervisor.statuses()

    async def status(self) -> ServeStatus:
        """A snapshot: daemon states, the figures, the listening URL."""
        # Polled every half second on the Host's one reader: index reads of the backlog
        # and the dead letters, never the per-status counts over the whole history.
        inbox = await self.host.inbox.backlog()
        outbox_dead = await self.host.store.delivery.dead_letters()
        daemons = self.statuses()
        return ServeStatus(
            daemons=daemons,
            queued=inbox.ready,
            running=self.worker.in_flight,
            delivered=self.delivery.delivered,
            dead_letters=inbox.dead_lettered + outbox_dead,
            listening=self.url,
            ready=self.ready,
            generation=self.host.generation,
            reload=None if self.watcher is None else self.watcher.last,
            turns=self.worker.turns.snapshot(),
        )

    def _time_left(self) -> float | None:
        return None if self.supervisor is None else self.supervisor.time_left()

    def _readiness(self) -> tuple[bool, Mapping[str, Any]]:
        """Ready while every daemon runs. Failing turns are said in ``checks["turns"]``,
        agents whose provider is unreachable in ``checks["providers"]``, but leave it
        ready: a provider outage fails every Host alike, and taking them all out of
        rotation would refuse the messages they still store for later."""
        checks: dict[str, Any] = {d.name: d.state for d in self.statuses()}
        if (turns := self.worker.turns.snapshot().check()) is not None:
            checks["turns"] = turns
        # An agent's provider found unreachable: its messages wait (the same reasoning).
        now = self.worker.inbox.now()
        if outages := self.worker.outages.views(now):
            checks["providers"] = outage_checks(outages, now)
        return self.ready, checks

    # -- control ----------------------------------------------------------------------

    async def bind(self) -> str:
        """Bind the listening socket now (idempotent); the URL it listens on.

        ``ConfigError`` (``serve.listen``) when the address cannot be bound.
        Call it before opening a task group to get that error plainly; ``run``
        binds if this was not called.
        """
        if self._server is None:
            await load_off_loop(*_SERVING_STACK)
            from hostkit.host._serve_http import DrainGate, WebhookServer, bind_listener

            sock = bind_listener(self.listen, self.port)
            self._server = WebhookServer(DrainGate(self._app()), sock)
        return self._server.url

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> DaemonExit:
        """Bind, supervise until a shutdown, return how it ended (``task_status``: started)."""
        if self.supervisor is not None:
            raise InvalidValue("a HostDaemon runs once; make a new one with host.serve()")
        await self.bind()
        server = self._server
        assert server is not None  # bound just above
        try:
            self.supervisor = Supervisor(
                self._registry(server), policy=self._policy, on_change=self._on_change
            )
            if self._early is not None:
                self.request_shutdown(reason=self._early[0], deadline_s=self._early[1])
            return await self.supervisor.run(task_status=task_status)
        finally:
            server.close()

    def reload_now(self) -> None:
        """Reload the configuration at once (SIGHUP; safe from a signal-watching task).

        The watcher does it in its own task, so reloads never overlap; the
        outcome is logged and shown by ``status().reload``. A daemon made
        without ``watch=True`` has no watcher: ``InvalidValue`` (call
        ``host.reload()`` instead).
        """
        if self.watcher is None:
            raise InvalidValue("this daemon does not watch its configuration: use host.reload()")
        self.watcher.trigger()

    def request_shutdown(
        self, *, reason: str = "shutdown", deadline_s: float | None = None
    ) -> None:
        """Begin the graceful shutdown (safe from a signal-watching task, also before ``run``)."""
        if self.supervisor is None:
            # Checked now, as the supervisor would: not later, when run() starts.
            if deadline_s is not None and not is_seconds(deadline_s, high=86_400, zero=True):
                raise InvalidValue("deadline_s must be a number of seconds from 0 to 86400")
            self._early = self._early or (reason, deadline_s)
            return
        deadline = self.drain_timeout_s if deadline_s is None else deadline_s
        self.supervisor.request_shutdown(deadline_s=deadline, reason=reason)
        if self._closing_host:
            # Every store wait ends by the deadline (plus a margin to record what was
            # cut), shields or not: a frozen database must not hold the drain past it.
            self.host.store.limit_waits(deadline + _STORE_MARGIN_S)

    async def shutdown(
        self, *, reason: str = "shutdown", deadline_s: float | None = None
    ) -> DaemonExit:
        """Shut down gracefully and wait for the end; the ``DaemonExit``."""
        if self.supervisor is None:
            raise InvalidValue("the daemon is not running")
        return await self.supervisor.shutdown(
            self.drain_timeout_s if deadline_s is None else deadline_s, reason=reason
        )

    def _end_background(self) -> None:
        if self.supervisor is not None and not self.supervisor.stopping:
            self.request_shutdown(reason="the serving block ended")

    # -- composition ------------------------------------------------------------------

    def _channel_agent(self, channel: str) -> str:
        """The agent of ``channel`` in the current generation. Everything this daemon takes
        in comes from a configured channel: one a reload removed answers nothing (its
        messages are dead-lettered), never by some default agent with other tools."""
        configured = self.host.config.channels.get(channel)
        if configured is None:
            raise TurnRejected(
                f"channel {channel!r} is no longer configured: its messages are not answered"
            )
        return configured.agent

    def _app(self) -> Any:
        from hostkit.channels import ingress_app

        return ingress_app(
            {cid: c for cid, c in self._channels.items() if c.inbound == "webhook"},
            self.host.inbox,
            secrets=self._secrets,
            on_accept=self.worker.wake,
            readiness=self._readiness,
            current=self._webhook,
            store_health=self.store_health,
        )

    def _webhook(self, channel_id: str) -> tuple[ChannelConfig, str] | None:
        """A webhook route's settings and secret in the current generation; None (404,
        nothing stored) once the channel is removed or takes no webhooks. A channel whose
        new secret cannot be read keeps its last good settings and secret."""
        if self.host.generation != self._webhooks_of:
            self._webhooks_of = self.host.generation
            channels = self.host.config.channels
            for cid in list(self._webhooks):
                config = channels.get(cid)
                if config is None or config.inbound != "webhook":
                    self._webhooks[cid] = None
                    continue
                try:
                    secret = _env(self._environment, cid, "secret_env", config.secret_env)
                    if (problem := short_secret(secret)) is not None:
                        raise ConfigError(f"its secret {problem}")
                except ConfigError as exc:
                    _log.warning("channel %s keeps its last settings and secret: %s", cid, exc)
                    continue
                self._webhooks[cid] = (config, secret)
        return self._webhooks.get(channel_id)

    def _pollers(self) -> list[TelegramPoller]:
        """One poller per channel with ``inbound = "polling"`` (its token read at start)."""
        from hostkit.channels import TelegramPoller

        return [
            TelegramPoller(
                cid,
                self._channels[cid],
                self.host.inbox,
                token=token,
                on_accept=self.worker.wake,
                store_health=self.store_health,
            )
            for cid, token in self._tokens.items()
        ]

    def _registry(self, server: WebhookServer) -> DaemonRegistry:
        registry = DaemonRegistry()
        registry.register("delivery", _Delivery(self.delivery, self.host.events, self._time_left))
        registry.register("inbox", _Worker(self.worker))
        registry.register("retention", _Worker(self.retention))
        for poller in self._pollers():
            registry.register(f"poll:{poller.channel_id}", poller.run)
        if self.watcher is not None:
            # Stopped right after the webhooks: no generation is applied during the drain.
            registry.register("reload", self.watcher)
        registry.register("webhooks", server, linger=True)
        return registry


def _restart_note(outcome: ReloadOutcome) -> None:
    """Say so when an applied change needs a restart to reach what the daemon built at start."""
    if outcome.applied and any(
        change.startswith(("serve.", "channels.")) and change != "serve.reload_interval_s"
        for change in outcome.changes
    ):
        _log.warning(
            "[channels] changes reach new webhooks, turns and deliveries now; the listener, "
            "webhook routes, pollers and the other [serve] settings change when hostkit "
            "serve restarts"
        )


def _env(environment: Mapping[str, str], channel_id: str, key: str, name: str | None) -> str:
    """The secret in environment variable ``name``; ``ConfigError`` naming it when unset,
    in the words the Host's channels use for their own secrets."""
    return channel_secret(environment, name, f"channels.{channel_id}.{key}")
