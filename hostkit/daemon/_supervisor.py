"""Supervisor: one task group runs the registry's daemons, restarts failures, stops in order.

Each daemon gets a supervising loop: start it, and when it raises or returns
without being asked to stop, record the failure, wait the policy's backoff
and start it again (a ``HostkitError`` that is not ``retryable`` leaves it
``failed``: a restart cannot help). ``shutdown``
stops the daemons in reverse registration order, each ``stop()`` and the end
of its ``run()`` bounded by what is left of one deadline; a daemon still
running at the deadline is cancelled (``DaemonExit.cut`` names it).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from hostkit.daemon._policy import RestartPolicy
from hostkit.daemon._registry import DaemonRegistry, Registered
from hostkit.daemon._status import DaemonExit, DaemonState, DaemonStatus
from hostkit.errors import HostkitError, InvalidValue, bounded, unbounded_message

__all__ = ["Supervisor", "run"]

_log = logging.getLogger("hostkit.daemon")
_ERROR_CHARS = 300
_MAX_DEADLINE_S = 86_400.0
Clock = Callable[[], float]


@dataclass(eq=False)
class _Slot:
    """The supervisor's mutable record of one daemon (read out as a DaemonStatus)."""

    entry: Registered
    state: DaemonState = "starting"
    restarts: int = 0
    failures: int = 0
    last_error: str | None = None
    since: float = 0.0
    next_restart_at: float | None = None
    running_since: float | None = None
    resolved: bool = False
    scope: anyio.CancelScope | None = None
    # Set once a shutdown asked this daemon to stop (it also cuts a backoff short).
    stop_asked: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


class _Started(TaskStatus[None]):
    """The ``task_status`` a daemon gets: ``started()`` marks it running."""

    def __init__(self, supervisor: Supervisor, slot: _Slot) -> None:
        self._supervisor = supervisor
        self._slot = slot

    def started(self, value: None = None) -> None:
        slot = self._slot
        if slot.state == "starting":
            slot.running_since = self._supervisor._clock()
            self._supervisor._enter(slot, "running")
            self._supervisor._resolved(slot)


class Supervisor:
    """Runs a ``DaemonRegistry`` until ``shutdown``: ``exit = await Supervisor(reg).run()``.

    ``statuses()`` and ``ready`` are live views for status lines and
    ``/readyz``: ready means every daemon is running and no shutdown began.
    ``clock`` (monotonic seconds) times backoffs, healthy runs and the
    shutdown deadline; ``wall_clock`` stamps ``since``/``next_restart_at``.
    ``on_change`` hears every state change as it happens (a status line, a
    test); it must not block or raise. A supervisor runs once.
    """

    def __init__(
        self,
        registry: DaemonRegistry,
        *,
        policy: RestartPolicy | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        on_change: Callable[[DaemonStatus], None] | None = None,
    ) -> None:
        if not isinstance(registry, DaemonRegistry):
            raise InvalidValue("Supervisor needs a DaemonRegistry")
        self.policy = policy or RestartPolicy()
        self._clock = clock
        self._wall = wall_clock
        self._on_change = on_change
        now = wall_clock()
        self._slots = [_Slot(entry, since=now) for entry in registry.entries()]
        self._by_name = {slot.entry.name: slot for slot in self._slots}
        self._first_round = anyio.Event()
        self._shutdown = anyio.Event()
        self._finished = anyio.Event()
        self._deadline_s = 30.0
        # self._clock() by which the shutdown must be over (set when it begins)
        self._deadline_at: float | None = None
        self._reason = "shutdown"
        self._code = 0
        self._ran = False
        self._exit: DaemonExit | None = None
        self._check_first_round()

    # -- observation ------------------------------------------------------------------

    def statuses(self) -> tuple[DaemonStatus, ...]:
        """Every daemon's status, in registration order."""
        return tuple(self._status(slot) for slot in self._slots)

    def status(self, name: str) -> DaemonStatus:
        slot = self._by_name.get(name)
        if slot is None:
            raise InvalidValue(f"no daemon named {bounded(name, 60)!r}")
        return self._status(slot)

    @property
    def ready(self) -> bool:
        """Every daemon running and no shutdown begun (what ``/readyz`` answers)."""
        return not self.stopping and all(slot.state == "running" for slot in self._slots)

    @property
    def stopping(self) -> bool:
        return self._shutdown.is_set()

    def time_left(self) -> float | None:
        """Seconds left of the shutdown deadline (None while no shutdown has begun).

        A daemon's ``stop()`` reads it to fit its own wind-down inside the deadline.
        """
        if self._deadline_at is None:
            return None
        return max(0.0, self._deadline_at - self._clock())

    @property
    def exit(self) -> DaemonExit | None:
        """How the run ended (None while it runs)."""
        return self._exit

    # -- control ----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> DaemonExit:
        """Run every daemon until a shutdown ends them; return how it ended.

        ``task_status.started()`` follows each daemon's first start (running,
        or failed into backoff). Cancelling ``run`` cancels every daemon at
        once (each winds down as its own cancellation handling says).
        """
        if self._ran:
            raise InvalidValue("a Supervisor runs once; make a new one")
        self._ran = True
        try:
            async with anyio.create_task_group() as group:
                for slot in self._slots:
                    group.start_soon(self._supervise, slot, name=f"daemon {slot.entry.name}")
                await self._first_round.wait()
                task_status.started()
                await self._shutdown.wait()
                exit_ = await self._stop_all()
                group.cancel_scope.cancel()
        finally:
            self._finished.set()
        self._exit = exit_
        _log.info("supervisor stopped: %s", exit_.reason)
        return exit_

    def request_shutdown(self, *, deadline_s: float = 30.0, reason: str = "shutdown") -> None:
        """Begin a graceful shutdown (safe from a signal-handling task); the first one counts."""
        if self._shutdown.is_set():
            return
        if (
            isinstance(deadline_s, bool)
            or not isinstance(deadline_s, int | float)
            or not math.isfinite(deadline_s)
            or not 0 <= deadline_s <= _MAX_DEADLINE_S
        ):
            raise InvalidValue(f"deadline_s must be between 0 and {_MAX_DEADLINE_S:g} seconds")
        self._deadline_s = float(deadline_s)
        self._deadline_at = self._clock() + self._deadline_s
        self._reason = bounded(reason, 200)
        _log.info("shutdown requested (%s), deadline %.1fs", self._reason, self._deadline_s)
        self._shutdown.set()
        # A daemon still starting must not hold the shutdown up.
        self._first_round.set()

    async def shutdown(self, deadline_s: float = 30.0, *, reason: str = "shutdown") -> DaemonExit:
        """``request_shutdown`` and wait until ``run`` has ended; its ``DaemonExit``."""
        self.request_shutdown(deadline_s=deadline_s, reason=reason)
        if not self._ran:
            self._exit = DaemonExit(0, f"{self._reason}: never started")
            return self._exit
        await self._finished.wait()
        return self._exit or DaemonExit(1, f"{self._reason}: the supervisor was cancelled")

    # -- one daemon -------------------------------------------------------------------

    async def _supervise(self, slot: _Slot) -> None:
        try:
            while not slot.stop_asked.is_set():
                error = await self._attempt(slot)
                if slot.stop_asked.is_set():
                    break
                text = _error_text(error)
                if isinstance(error, HostkitError) and not error.retryable:
                    slot.last_error = text
                    self._enter(slot, "failed")
                    _log.error("daemon %s failed and stays down: %s", slot.entry.name, text)
                    self._resolved(slot)
                    self._check_all_failed()
                    return
                await self._backoff(slot, text)
            self._enter(slot, "stopped")
        finally:
            slot.done.set()

    async def _attempt(self, slot: _Slot) -> BaseException | None:
        """One start of the daemon: the exception it ended with (None: it returned).

        ``SystemExit`` and ``KeyboardInterrupt`` raised by a daemon (uvicorn calls
        ``sys.exit`` when it cannot start) are that daemon's failure, not the
        process's; cancellation is never caught here.
        """
        self._enter(slot, "starting")
        slot.running_since = None
        try:
            with anyio.CancelScope() as scope:
                slot.scope = scope
                await slot.entry.daemon.run(task_status=_Started(self, slot))
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            return exc
        finally:
            slot.scope = None
        return None

    async def _backoff(self, slot: _Slot, text: str) -> None:
        healthy = (
            slot.running_since is not None
            and self._clock() - slot.running_since >= self.policy.healthy_after_s
        )
        slot.failures = 1 if healthy else slot.failures + 1
        slot.restarts += 1
        delay = self.policy.delay(slot.failures)
        slot.last_error = text
        slot.next_restart_at = self._wall() + delay
        self._enter(slot, "backoff")
        _log.warning(
            "daemon %s ended (%s); restart %d in %.2fs",
            slot.entry.name,
            text,
            slot.restarts,
            delay,
        )
        self._resolved(slot)
        with anyio.move_on_after(delay):
            await slot.stop_asked.wait()
        slot.next_restart_at = None

    # -- shutdown ---------------------------------------------------------------------

    async def _stop_all(self) -> DaemonExit:
        deadline = self._deadline_at if self._deadline_at is not None else self._clock()
        cut: list[str] = []
        for slot in reversed(self._slots):
            await self._stop_one(slot, deadline, cut, wait=not slot.entry.linger)
        for slot in reversed(self._slots):
            if slot.entry.linger and not slot.done.is_set():
                # Its stop() already ran: nothing is in flight, it only answers probes.
                self._cancel(slot)
                await slot.done.wait()
        reason = self._reason
        if cut:
            reason += f"; cut at the {self._deadline_s:g}s deadline: {', '.join(cut)}"
        return DaemonExit(self._code, reason, tuple(cut))

    async def _stop_one(self, slot: _Slot, deadline: float, cut: list[str], *, wait: bool) -> None:
        slot.stop_asked.set()
        if slot.scope is not None and slot.state in ("starting", "running"):
            self._enter(slot, "stopping")
            with anyio.move_on_after(max(0.0, deadline - self._clock())):
                try:
                    await slot.entry.daemon.stop()
                except Exception as exc:
                    _log.warning("daemon %s: stop failed: %s", slot.entry.name, _error_text(exc))
        if not wait:
            return
        with anyio.move_on_after(max(0.0, deadline - self._clock())):
            await slot.done.wait()
        if not slot.done.is_set():
            cut.append(slot.entry.name)
            _log.warning("daemon %s did not stop by the deadline: cancelled", slot.entry.name)
            self._cancel(slot)
            await slot.done.wait()

    @staticmethod
    def _cancel(slot: _Slot) -> None:
        if slot.scope is not None:
            slot.scope.cancel()

    # -- bookkeeping ------------------------------------------------------------------

    def _enter(self, slot: _Slot, state: DaemonState) -> None:
        if slot.state != state:
            slot.state = state
            slot.since = self._wall()
            _log.info("daemon %s: %s", slot.entry.name, state)
            if self._on_change is not None:
                self._on_change(self._status(slot))

    def _resolved(self, slot: _Slot) -> None:
        if not slot.resolved:
            slot.resolved = True
            self._check_first_round()

    def _check_first_round(self) -> None:
        if all(slot.resolved for slot in self._slots):
            self._first_round.set()

    def _check_all_failed(self) -> None:
        if self._slots and all(slot.state == "failed" for slot in self._slots):
            self._code = 1
            self.request_shutdown(deadline_s=0, reason="every daemon failed")

    @staticmethod
    def _status(slot: _Slot) -> DaemonStatus:
        return DaemonStatus(
            name=slot.entry.name,
            state=slot.state,
            restarts=slot.restarts,
            last_error=slot.last_error,
            since=slot.since,
            next_restart_at=slot.next_restart_at,
        )


def _error_text(error: BaseException | None) -> str:
    if error is None:
        return "returned without being asked to stop"
    return bounded(f"{type(error).__name__}: {unbounded_message(error)}", _ERROR_CHARS)


async def run(registry: DaemonRegistry, *, policy: RestartPolicy | None = None) -> DaemonExit:
    """Supervise ``registry`` until a shutdown (or cancellation) ends it.

    The contract's ``run(runtime)``: with no handle to ask for a shutdown,
    this runs until cancelled; use ``Supervisor`` to stop it gracefully.
    """
    return await Supervisor(registry, policy=policy).run()
