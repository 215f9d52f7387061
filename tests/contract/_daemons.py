"""Test daemons for the supervisor clauses: scripted failures, recorded stops and ends."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from hostkit.daemon import DaemonStatus


class Scripted:
    """A daemon whose n-th run raises ``failures[n]`` right after starting (None: serves).

    ``log`` (shared between daemons) records "run:<name>", "stop:<name>" and
    "end:<name>"; ``started`` is set at every start. ``ignore_stop`` makes
    ``stop()`` a no-op, so only cancellation ends the run.
    """

    def __init__(
        self,
        name: str,
        log: list[str],
        *,
        failures: tuple[BaseException | None, ...] = (),
        ignore_stop: bool = False,
        returns: bool = False,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.failures = failures
        self.ignore_stop = ignore_stop
        self.returns = returns
        self.on_stop = on_stop
        self.runs = 0
        self.cancelled = 0
        self.started = anyio.Event()
        self._stop = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        self.runs += 1
        self.log.append(f"run:{self.name}")
        task_status.started()
        self.started.set()
        self.started = anyio.Event()
        index = self.runs - 1
        if index < len(self.failures) and self.failures[index] is not None:
            await anyio.lowlevel.checkpoint()
            raise self.failures[index]  # type: ignore[misc]
        if self.returns:
            return
        try:
            await self._stop.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.log.append(f"end:{self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop:{self.name}")
        if self.on_stop is not None:
            self.on_stop()
        if not self.ignore_stop:
            self._stop.set()


class Changes:
    """Every DaemonStatus a supervisor reported, and events to wait for a state."""

    def __init__(self) -> None:
        self.seen: list[DaemonStatus] = []
        self._waiters: list[tuple[str, str, anyio.Event]] = []

    def __call__(self, status: DaemonStatus) -> None:
        self.seen.append(status)
        for name, state, event in self._waiters:
            if status.name == name and status.state == state:
                event.set()

    async def wait_for(
        self, name: str, state: str, *, count: int = 1, timeout_s: float = 10
    ) -> None:
        """Until ``name`` has entered ``state`` ``count`` times."""
        with anyio.fail_after(timeout_s):
            while self.count(name, state) < count:
                event = anyio.Event()
                self._waiters.append((name, state, event))
                await event.wait()

    def count(self, name: str, state: str) -> int:
        return sum(1 for s in self.seen if s.name == name and s.state == state)

    def of(self, name: str) -> list[DaemonStatus]:
        return [s for s in self.seen if s.name == name]
