"""Live config apply: what a reload did, and the watcher that asks for one.

``Host.reload()`` re-reads ``hostkit.toml`` and every core's live revision
(the store's record, so a promotion by another process counts) and applies
a new generation only when something changed; a configuration that fails
validation leaves the current generation serving. ``ConfigWatcher`` is the
daemon ``hostkit serve`` runs: it polls a cheap fingerprint of the same
inputs (the file's identity and size and modification time, hashed only when
those moved; each core's recorded live commit) and calls ``reload()`` when it
changes, or at once when ``trigger()`` is called (SIGHUP). A file seen
changing is applied only once it has settled (two polls agree on its
identity, size and modification time, or it was last modified at least one
interval ago), so an editor's in-place rewrite is not applied half-written.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from hostkit.errors import ConfigError, HostkitError, bounded
from hostkit.freeze import FrozenMap
from hostkit.host._config import MAX_CONFIG_BYTES, HostConfig
from hostkit.host._cores import compose_cores
from hostkit.store import CoreStore, RuntimeStore

__all__ = [
    "ConfigWatcher",
    "ReloadOutcome",
    "Reloadable",
    "check_cores",
    "config_changes",
    "core_changes",
    "live_revisions",
    "reopen_changes",
    "split_state",
    "with_opened",
]

_log = logging.getLogger("hostkit.host")
# A reason or change list is shown in logs and status lines: bounded like every error text.
_REASON_CHARS = 500
_MAX_CHANGES = 20
# One core's live-revision read: a wedged store must not stall the watcher forever.
CORE_READ_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    """What ``Host.reload()`` did.

    ``applied``: a new generation (``generation``) now serves new turns.
    Otherwise ``generation`` keeps serving and ``reason`` says why when the
    configuration was rejected (None: nothing changed). ``changes`` names what
    differed (``agents.assistant``, ``core 'x' moved 1a2b3c4d5e6f -> ...``).
    """

    generation: int
    applied: bool
    reason: str | None = None
    changes: tuple[str, ...] = ()

    @property
    def rejected(self) -> bool:
        """The new configuration failed validation; the old generation keeps serving."""
        return not self.applied and self.reason is not None

    def __str__(self) -> str:
        if self.applied:
            what = "; ".join(self.changes)
            return f"generation {self.generation} applied" + (f" ({what})" if what else "")
        if self.reason is not None:
            return f"config rejected: {self.reason}; generation {self.generation} keeps serving"
        return f"nothing changed; generation {self.generation} keeps serving"

    def _repr_html_(self) -> str:
        from html import escape

        colour = "#1a7f37" if self.applied else ("#cf222e" if self.rejected else "#57606a")
        return f'<div style="color:{colour}"><b>reload</b>: {escape(str(self))}</div>'


def rejected(generation: int, reason: str) -> ReloadOutcome:
    return ReloadOutcome(generation, False, bounded(reason, _REASON_CHARS))


def config_changes(old: HostConfig, new: HostConfig) -> tuple[str, ...]:
    """The keys one level under each top-level table that differ (``agents.assistant``,
    ``serve.port``); () when equal.

    Compared as validated values, so a comment or reordering changes nothing.
    """
    if old == new:
        return ()
    changes: list[str] = []
    if old.base_dir != new.base_dir or old.source != new.source:
        changes.append("the configuration file")
    before = old.model_dump(mode="json")
    after = new.model_dump(mode="json")
    for table in dict.fromkeys([*before, *after]):
        a, b = before.get(table), after.get(table)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changes.extend(
                f"{table}.{name}" for name in dict.fromkeys([*a, *b]) if a.get(name) != b.get(name)
            )
        else:
            changes.append(table)
    return _bounded_list(changes)


# The [host] settings each generation reads again: everything else in [host], and all of
# [store], is read once, when the Host opens (the store, the tracing, the approval and
# admission waits, the session lease, the artifact root and reserve and the state paths
# sandboxes mask). A new [host] setting is open-only until it is added here.
_LIVE_HOST_SETTINGS = frozenset({"workspace", "limits"})
# Paths: compared resolved, so a moved base_dir that moves them counts.
_HOST_PATHS = frozenset({"database", "artifacts", "cores_dir"})
_STORE_PATHS = frozenset({"backup_dir"})
# The SQLite file's settings; a PostgreSQL store ignores them.
_SQLITE_SETTINGS = frozenset({"database", "synchronous"})
# [store]'s PostgreSQL settings; a SQLite store ignores them.
_POSTGRES_SETTINGS = frozenset(
    {"pool_size", "connect_timeout_s", "statement_timeout_s", "max_clock_skew_s"}
)


# Open-time settings a new generation must not run beside: where the state is (the store,
# the artifact root the sandboxes mask, the cores' directory). The others (waits, the
# lease, the reserve, tracing, the PostgreSQL pool) wait for the next open: a generation
# runs with the values the Host opened with, and says so.
_SPLIT_STATE = frozenset(
    {"host.database", "host.synchronous", "host.artifacts", "host.cores_dir", "store.url"}
)


def reopen_changes(current: HostConfig, new: HostConfig) -> tuple[str, ...]:
    """The settings that differ between ``current`` and ``new`` and that the Host read only
    when it opened (``host.artifacts``, ``store.statement_timeout_s``, ...); () when none.
    """
    return _bounded_list(_open_changes(current, new))


def split_state(changes: Sequence[str]) -> tuple[str, ...]:
    """Of ``reopen_changes``, those a new generation cannot run with at all: applied, it
    would be half in force (files.* protecting a new artifact root while terminal output
    still goes to the old one, writes going to one store while readers open another)."""
    return tuple(change for change in changes if change in _SPLIT_STATE)


def with_opened(new: HostConfig, current: HostConfig) -> HostConfig:
    """``new`` with each open-time setting it changes back at ``current``'s value: what a
    new generation truly runs with until the Host is reopened."""
    updates: dict[str, dict[str, object]] = {}
    for change in _open_changes(current, new):
        table, name = change.split(".", 1)
        value = getattr(getattr(current, table), name)
        if name in (_HOST_PATHS if table == "host" else _STORE_PATHS):
            value = str(current.resolve(value))  # the same place, from new's base directory
        updates.setdefault(table, {})[name] = value
    if not updates:
        return new
    return new.model_copy(
        update={
            table: getattr(new, table).model_copy(update=fields)
            for table, fields in updates.items()
        }
    )


def _open_changes(current: HostConfig, new: HostConfig) -> list[str]:
    postgres = current.store.url is not None and new.store.url is not None
    sqlite = current.store.url is None and new.store.url is None
    host_skipped = _LIVE_HOST_SETTINGS | (_SQLITE_SETTINGS if postgres else frozenset())
    # A SQLite store reads none of [store]'s PostgreSQL settings: changing them waits for none.
    store_skipped = _POSTGRES_SETTINGS if sqlite else frozenset[str]()
    changes: list[str] = []
    for table, paths, skipped in (
        ("host", _HOST_PATHS, host_skipped),
        ("store", _STORE_PATHS, store_skipped),
    ):
        before, after = getattr(current, table), getattr(new, table)
        for name in type(before).model_fields:
            if name in skipped:
                continue
            a, b = getattr(before, name), getattr(after, name)
            if name in paths:
                a, b = current.resolve(a), new.resolve(b)
            if a != b:
                changes.append(f"{table}.{name}")
    return changes


def core_changes(
    applied: Mapping[str, str | None], live: Mapping[str, str | None]
) -> tuple[str, ...]:
    """One line per core whose live commit is not the one the generation was built from."""
    lines = [
        f"core {core_id!r} {_moved(applied.get(core_id), sha)}"
        for core_id, sha in live.items()
        if applied.get(core_id) != sha
    ]
    return _bounded_list(lines)


def _moved(old: str | None, new: str | None) -> str:
    if new is None:
        return "has no live revision"
    return f"moved {old[:12] if old else '(none)'} -> {new[:12]}"


def _bounded_list(items: list[str]) -> tuple[str, ...]:
    if len(items) <= _MAX_CHANGES:
        return tuple(items)
    return (*items[: _MAX_CHANGES - 1], f"{len(items) - _MAX_CHANGES + 1} more")


async def live_revisions(config: HostConfig, store: CoreStore) -> dict[str, str | None]:
    """Each configured core's live commit as the store recorded it (None: never promoted)."""
    revisions: dict[str, str | None] = {}
    for core_id in config.cores:
        with anyio.fail_after(CORE_READ_TIMEOUT_S):
            revisions[core_id] = await store.live_revision(core_id)
    return revisions


async def check_cores(config: HostConfig, live: Mapping[str, str | None], store: CoreStore) -> None:
    """``ConfigError`` naming the core when a live revision does not load or compile.

    A core never promoted is left out: it is not available, as at open.
    """
    for core_id, sha in live.items():
        if sha is None or core_id not in config.cores:
            continue
        only = config.model_copy(update={"cores": FrozenMap({core_id: config.cores[core_id]})})
        try:
            await compose_cores(only, store, strict=True)
        except ConfigError as exc:
            prefix = f"core {core_id!r}"
            message = exc.message if exc.message.startswith(prefix) else f"{prefix}: {exc.message}"
            raise ConfigError(message) from None


class Reloadable(Protocol):
    """What the watcher needs of a Host: its configuration, its store and ``reload()``."""

    @property
    def config(self) -> HostConfig: ...

    @property
    def store(self) -> RuntimeStore: ...

    async def reload(self) -> ReloadOutcome: ...


@dataclass(frozen=True, slots=True)
class _Fingerprint:
    """The cheap view of a reload's inputs: the file's hash and the recorded live revisions.

    ``stat`` (inode, size, mtime_ns) only says when the file must be hashed again:
    it takes no part in the comparison, so touching the file reloads nothing.
    """

    digest: str | None
    cores: tuple[tuple[str, str | None], ...]
    stat: tuple[int, int, int] | None = field(default=None, compare=False)


class ConfigWatcher:
    """A daemon: every ``reload_interval_s`` (``[serve]``, read at each wait; 0 = only
    ``trigger()``), compare a fingerprint of the configuration file and every core's
    recorded live revision with the last one and ``reload()`` the Host when it changed.

    A changed file is reloaded once it settled: the previous poll saw the same
    (inode, size, mtime_ns), or its mtime is at least one interval old (``clock``,
    epoch seconds, tells). ``trigger()`` (SIGHUP) reloads at the next moment,
    changed or not, settled or not. Every step
    has a deadline (``step_timeout_s``); a failure is logged and the watcher goes
    on: it is never fatal to serving. ``last`` is the latest reload's outcome;
    ``on_outcome`` hears each one (a status line); it must not block or raise.
    """

    def __init__(
        self,
        host: Reloadable,
        *,
        interval_s: float | None = None,
        step_timeout_s: float = 30.0,
        on_outcome: Callable[[ReloadOutcome], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._host = host
        self._clock = clock
        # The file's (inode, size, mtime_ns) at the previous poll: a change is settled
        # when two polls agree.
        self._polled: tuple[int, int, int] | None = None
        self._interval_s = interval_s
        self.step_timeout_s = step_timeout_s
        self._on_outcome = on_outcome
        self._wake = anyio.Event()
        self._forced = False
        self._stopping = False
        self._seen: _Fingerprint | None = None
        self._problem: str | None = None
        self.last: ReloadOutcome | None = None

    @property
    def interval_s(self) -> float:
        """The poll interval now: the one given, else the current ``[serve] reload_interval_s``."""
        if self._interval_s is not None:
            return self._interval_s
        return self._host.config.serve.reload_interval_s

    def trigger(self) -> None:
        """Reload as soon as the watcher runs next (safe from a signal-handling task)."""
        self._forced = True
        self._wake.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll until ``stop()``: the first fingerprint is the baseline, taken before ready."""
        self._seen = await self._fingerprint_or_none(None)
        self._polled = None if self._seen is None else self._seen.stat
        task_status.started()
        while not self._stopping:
            interval = self.interval_s
            with anyio.move_on_after(interval if interval > 0 else math.inf):
                await self._wake.wait()
            if not self._stopping:  # stop() wakes the wait too
                self._wake = anyio.Event()
                await self.check()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def check(self) -> ReloadOutcome | None:
        """One poll: reload when the fingerprint moved (or a trigger asked); None otherwise.

        Never raises but for cancellation: a failed read or reload is logged.
        """
        forced, self._forced = self._forced, False
        now = await self._fingerprint_or_none(self._seen)
        polled, self._polled = self._polled, None if now is None else now.stat
        if not forced and (now is None or now == self._seen):
            return None
        if not forced and now is not None and not self._settled(now, polled):
            return None  # written right now: the next poll sees whether it goes on
        # Remembered before the reload: a rejected file is not retried until it changes.
        self._seen = now if now is not None else self._seen
        try:
            with anyio.fail_after(self.step_timeout_s):
                outcome = await self._host.reload()
        except (HostkitError, TimeoutError, OSError) as exc:
            _log.warning("reload failed: %s", _reason(exc))
            return None
        except Exception as exc:
            # A bug, not a configuration: logged whole, and the watcher goes on (restarted,
            # it would take the file that caused it for its baseline and never report it).
            _log.error(
                "reload failed unexpectedly: %s: %s", type(exc).__name__, _reason(exc), exc_info=exc
            )
            return None
        self.last = outcome
        if forced and not outcome.applied and not outcome.rejected:
            # Asked for (SIGHUP): the operator hears the answer even when it is "nothing".
            _log.info("%s", outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        return outcome

    def _settled(self, now: _Fingerprint, polled: tuple[int, int, int] | None) -> bool:
        """The file is not being written: unchanged, or the same as at the previous poll,
        or last modified at least one interval ago."""
        seen = self._seen
        if (seen is not None and now.digest == seen.digest) or now.stat is None:
            return True
        if now.stat == polled:
            return True
        return self._clock() - now.stat[2] / 1e9 >= max(self.interval_s, 0.0) > 0

    async def _fingerprint_or_none(self, previous: _Fingerprint | None) -> _Fingerprint | None:
        try:
            with anyio.fail_after(self.step_timeout_s):
                fingerprint = await self._fingerprint(previous)
            self._problem = None
            return fingerprint
        except Exception as exc:  # never fatal to the watcher (see check)
            problem = f"cannot check the configuration for changes: {_reason(exc)}"
            if problem != self._problem:  # once per problem, not once per poll
                _log.warning("%s", problem)
            self._problem = problem
            return None

    async def _fingerprint(self, previous: _Fingerprint | None) -> _Fingerprint:
        config = self._host.config
        stat: tuple[int, int, int] | None = None
        digest: str | None = None
        if config.source is not None:
            stat, digest = await anyio.to_thread.run_sync(
                _file_state,
                config.source,
                previous.stat if previous else None,
                previous.digest if previous else None,
                abandon_on_cancel=True,
            )
        cores: list[tuple[str, str | None]] = []
        store = self._host.store.cores
        for core_id in sorted(config.cores):
            # One indexed read per core: a promotion recorded by another process counts.
            with anyio.fail_after(CORE_READ_TIMEOUT_S):
                cores.append((core_id, await store.live_revision(core_id)))
        return _Fingerprint(digest, tuple(cores), stat)


def _file_state(
    path: Path, seen: tuple[int, int, int] | None, digest: str | None
) -> tuple[tuple[int, int, int] | None, str | None]:
    """(inode, size, mtime_ns) and the content hash, hashed again only when those moved.

    A missing, oversized or irregular file is a state of its own (the reload that
    follows says what is wrong); nothing but a regular file is read, and a FIFO is
    never waited on (opened non-blocking, checked by fstat).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, None
    try:
        info = os.fstat(fd)
        stat = (info.st_ino, info.st_size, info.st_mtime_ns)
        if stat == seen:
            return stat, digest
        if not S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
            return stat, None
        hasher, left = hashlib.sha256(), MAX_CONFIG_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(64 * 1024, left))):
            hasher.update(chunk)
            left -= len(chunk)
        return stat, hasher.hexdigest()
    finally:
        os.close(fd)


def _reason(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, HostkitError) else (str(exc) or type(exc).__name__)
    return bounded(text, _REASON_CHARS)
