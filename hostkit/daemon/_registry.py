"""DaemonRegistry: the named daemons one supervisor runs, in dependency order."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio
from anyio.abc import TaskStatus

from hostkit.errors import InvalidValue

__all__ = ["MAX_DAEMONS", "Daemon", "DaemonRegistry", "Registered", "RunFunction"]

MAX_DAEMONS = 256
# "webhooks", "inbox", "poll:telegram-main": a channel id may follow a prefix.
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}(?::[A-Za-z0-9][A-Za-z0-9_.-]{0,99})?$")


@runtime_checkable
class Daemon(Protocol):
    """A long-running part of the process that the supervisor starts, watches and stops.

    ``run`` serves until it is cancelled or stopped; it calls
    ``task_status.started()`` once it is ready (the supervisor reports
    ``running`` from then on). Raising or returning while no stop was asked
    for is a failure: the supervisor restarts it after a backoff. A
    ``HostkitError`` whose ``retryable`` is False (a ``ConfigError``, a
    refused bot token) marks it ``failed`` instead: a restart cannot help.

    ``stop`` asks for a graceful end: stop taking new work, finish (or hand
    back) what is held, then ``run`` returns. The supervisor bounds both by
    the shutdown deadline and cancels ``run`` when the deadline passes.
    """

    async def run(self, *, task_status: TaskStatus[None]) -> None: ...

    async def stop(self) -> None: ...


class RunFunction(Protocol):
    """A daemon as one async function: stopping it cancels it."""

    def __call__(self, *, task_status: TaskStatus[None]) -> Awaitable[None]: ...


class _FunctionDaemon:
    """Adapts a ``RunFunction``: its graceful stop is cancellation."""

    def __init__(self, function: RunFunction) -> None:
        self._function = function
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    async def run(self, *, task_status: TaskStatus[None]) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._stopped:
                scope.cancel()
            try:
                await self._function(task_status=task_status)
            finally:
                self._scope = None

    async def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()


@dataclass(frozen=True, slots=True)
class Registered:
    """One registration: the daemon, its name, and whether it lingers through a shutdown.

    A lingering daemon (an HTTP listener answering readiness probes) gets its
    ``stop()`` in its turn, but is cancelled only after every other daemon
    ended, so the probes see the drain happen.
    """

    name: str
    daemon: Daemon
    linger: bool = False


class DaemonRegistry:
    """Named daemons in dependency order: register what others feed into first.

    The supervisor starts them in registration order and stops them in the
    reverse order, so a producer (the webhook server) stops before the
    consumers it feeds (inbox workers, then delivery) drain. Names are
    unique: lower-case words, optionally ``prefix:<channel id>``.
    """

    def __init__(self) -> None:
        self._entries: dict[str, Registered] = {}

    def register(
        self, name: str, daemon: Daemon | RunFunction, *, linger: bool = False
    ) -> Registered:
        """Add ``daemon`` under ``name``; ``InvalidValue`` for a bad or taken name."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            shown = name[:40] if isinstance(name, str) else type(name).__name__
            raise InvalidValue(
                f"daemon name {shown!r} must be a lower-case word (a-z 0-9 _ -), "
                "optionally followed by ':<channel id>'"
            )
        if name in self._entries:
            raise InvalidValue(f"a daemon named {name!r} is already registered")
        if len(self._entries) >= MAX_DAEMONS:
            raise InvalidValue(f"at most {MAX_DAEMONS} daemons per registry")
        if not isinstance(linger, bool):
            raise InvalidValue("linger must be a bool")
        if isinstance(daemon, Daemon):
            adapted: Daemon = daemon
        elif callable(daemon):
            adapted = _FunctionDaemon(daemon)
        else:
            raise InvalidValue(f"daemon {name!r} must have run() and stop(), or be a callable")
        entry = Registered(name, adapted, linger)
        self._entries[name] = entry
        return entry

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> tuple[Registered, ...]:
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Registered]:
        return iter(self.entries())
