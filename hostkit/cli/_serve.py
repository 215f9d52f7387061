"""``hostkit serve``: run the Host's daemon until SIGTERM/SIGINT.

The first signal begins the graceful shutdown: webhooks are refused and
``/readyz`` turns 503, pollers stop, turns in flight get ``[serve]
drain_timeout_s`` to finish, every claim still held is released, and the
process exits 0. A second signal exits at once (status 128 + the signal
number), saying which signal it was, also while the Host closes after the
drain; what was held is then recovered by lease expiry. A first signal while
the Host still opens (a migration or recovery waiting for another process's
write lock, a PostgreSQL connect) ends the opening as it ends ``hostkit
run``'s (its lock waits cut to 3 s), says so in one line, and exits 0 with
nothing served (SIGHUP then changes nothing). Once serving, SIGHUP reloads
``hostkit.toml`` and the cores' live refs at once, unless it comes because the
terminal the process started on closed (``hostkit._hangup``): that one is the first
stop signal, drained the same way, and the log says the terminal closed. The
"reload" daemon also
polls them every ``[serve] reload_interval_s`` (docs/generations.md). Either
logs "generation N applied" or "config rejected: <reason>; generation N keeps
serving". An address that
cannot be bound is one error line (exit 2), before anything starts. On
start one line on stdout says where it listens (``hostkit serve: listening
on http://HOST:PORT``); logs go to stderr: JSON lines with
``--log-format json`` or when stderr is not a terminal, else readable lines
under a live status line. At start the soft open-file limit is raised to
the hard one (one info line): each connection, database file and child
process holds descriptors. A daemon thread watches the event loop and
warns when blocking code stalls it (``hostkit.cli._loop_watch``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import signal
import sys
from collections.abc import AsyncIterator, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer
from anyio.abc import TaskStatus
from rich.console import Console
from rich.live import Live
from rich.text import Text

from hostkit._hangup import Terminal
from hostkit.cli._common import (
    EXIT_OK,
    ConfigOption,
    console,
    fail,
    open_host,
    project_config,
    python_agent,
    run_command,
)
from hostkit.cli._interrupt import SignalStop, command_stop
from hostkit.cli._loop_watch import watching_the_loop
from hostkit.cli._serve_logs import LogFormat, serve_logging
from hostkit.daemon import DaemonExit
from hostkit.errors import ConfigError, HostkitError
from hostkit.host import Agent
from hostkit.inspect import one_line
from hostkit.types import plural

if TYPE_CHECKING:
    from hostkit.host import HostDaemon, ServeStatus

__all__ = ["StatusLine", "raise_open_file_limit", "serve", "status_text"]

LISTENING = "hostkit serve: listening on {url}"
_log = logging.getLogger("hostkit.serve")
NO_CHANNELS = (
    "no [channels] are configured, so no message can arrive; "
    "/healthz and /readyz answer (docs/channels.md says how to add a channel)"
)
# How often the terminal status line is redrawn.
STATUS_INTERVAL_S = 0.5
# A status read slower than this shows the last figures (marked stale) instead.
STATUS_TIMEOUT_S = 2.0
# The last turn failure the status line quotes, at most (the end of a row is what is cut).
_LAST_FAILURE_CHARS = 80
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Started without one, no SIGHUP means a closed terminal: each is a reload.
_NO_TERMINAL = Terminal(attached=False)
# How often a daemon started on a terminal looks whether it is still there, and how long
# after finding it gone a SIGHUP still counts as its hang-up.
_TERMINAL_PROBE_S = 2.0
_HANGUP_GRACE_S = 1.0


def log_format_of(choice: LogChoice | None, *, terminal: bool) -> LogFormat:
    """An explicit ``--log-format`` wins; the default follows stderr (a terminal reads text)."""
    if choice is None:
        return "text" if terminal else "json"
    return "json" if choice is LogChoice.json else "text"


class LogChoice(StrEnum):
    """``--log-format``."""

    text = "text"
    json = "json"


def serve(
    config: ConfigOption = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65_535, help="port (default: \\[serve] port; 0: any)")
    ] = None,
    listen: Annotated[
        str | None, typer.Option(help="address to listen on (default: \\[serve] listen)")
    ] = None,
    log_format: Annotated[
        LogChoice | None,
        typer.Option(
            "--log-format", help="text or json (default: json unless stderr is a terminal)"
        ),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            help="module:attribute of a hostkit.Agent to serve beside the file's agents "
            "(repeatable; a channel may name it)",
        ),
    ] = None,
) -> None:
    """Serve channels: webhooks, polling, inbox workers, answer delivery (docs/service.md).

    SIGTERM or SIGINT drains and exits 0 (while the Host still opens: stops the
    opening, exits 0); a second one exits at once. SIGHUP reloads the
    configuration (a new generation for new turns); closing the terminal it
    runs in stops it as SIGTERM does.
    """
    started_on = Terminal.at_start()
    terminal = _stderr_is_a_terminal()
    chosen = log_format_of(log_format, terminal=terminal)
    live = chosen == "text" and terminal
    for reference in agent or ():
        if ":" not in reference:
            raise fail(ConfigError(f"--agent {reference[:200]!r}: name it as module:attribute"))
    agents = tuple(found for reference in agent or () for found in python_agent(reference))
    with serve_logging(chosen, console):
        raise_open_file_limit()
        run_command(lambda: _serve(config, listen, port, agents, live=live, started_on=started_on))


async def _serve(
    config: Path | None,
    listen: str | None,
    port: int | None,
    agents: tuple[Agent, ...],
    *,
    live: bool,
    started_on: Terminal,
) -> int:
    with watching_the_loop(), anyio.open_signal_receiver(*_SIGNALS) as signals:
        watch = _SignalWatch(terminal=started_on)
        if started_on.hung_up():
            # It hung up while the command loaded, when SIGHUP was still ignored
            # (hostkit._launch): its SIGHUP was lost, the terminal is gone all the same.
            watch.received(signal.SIGHUP)
        code = 1
        async with anyio.create_task_group() as outer:
            # The watcher outlives the daemon: a second signal while the Host closes
            # (turns cut, tracing flushed) still exits at once.
            outer.start_soon(watch.run, signals)
            try:
                code = await _serve_host(config, listen, port, agents, live=live, watch=watch)
            finally:
                outer.cancel_scope.cancel()
    return code


async def _serve_host(
    config: Path | None,
    listen: str | None,
    port: int | None,
    agents: tuple[Agent, ...],
    *,
    live: bool,
    watch: _SignalWatch,
) -> int:
    # A daemon serves a project's channels: from the wrong directory it would create a
    # database and serve a default agent nobody can reach.
    found = await project_config(config, nothing="no project to serve here")
    async with open_host(
        found,
        agents=agents,
        print_warnings=False,
        require_channels=True,
        stop=watch.stop_the_opening(),
    ) as host:
        daemon = host.serve(listen=listen, port=port, watch=True, closing_host=True)
        # Bound before any task group: a port in use is one ConfigError, not a group.
        await daemon.bind()
        watch.attach(daemon)
        ended: list[DaemonExit] = []
        async with anyio.create_task_group() as group:

            async def serve_daemon(*, task_status: TaskStatus[None]) -> None:
                ended.append(await daemon.run(task_status=task_status))
                group.cancel_scope.cancel()

            await group.start(serve_daemon)
            settle_heap()
            sys.stdout.write(LISTENING.format(url=daemon.url) + "\n")
            sys.stdout.flush()
            if not host.config.channels:
                # Health and readiness answer, but nothing can arrive: say so once.
                _log.warning(NO_CHANNELS)
            if live:
                status_line = StatusLine(daemon, console)
                watch.before_shutdown = status_line.put_away
                group.start_soon(status_line.run)
    return ended[0].code if ended else 1


def raise_open_file_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, saying so in one info line.

    A soft limit of 1,024 (or a container's 64) is reached by a few hundred idle
    connections; past it every accept fails until one closes.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return  # already as high as it goes (an unlimited hard limit is no number to set)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:
        _log.info("open-file limit stays %d: %s", soft, exc)
        return
    _log.info("open-file limit raised from %d to %d (the hard limit)", soft, hard)


def settle_heap() -> None:
    """Move everything alive once the daemon listens out of the collector's scans.

    What is alive then (imported modules, the configuration, the open Host)
    lives as long as the process. Left in the oldest generation, every full
    collection walks all of it again: a pause of about 100 ms for all turns in
    flight, every few seconds under load (bench/turn_bench.py). Frozen, a full
    collection walks only what the turns created since.
    """
    gc.collect()
    gc.freeze()


class _SignalWatch:
    """First SIGTERM/SIGINT: graceful shutdown, or, while the Host still opens, the end
    of the opening (``stop_the_opening``: a migration waiting for another process's lock
    would otherwise outlast a service manager's stop timeout); the second: exit at
    once, whatever is running (the opening, the drain, the Host closing). SIGHUP: reload
    now (before the daemon exists there is nothing to reload: the configuration is
    being read anyway), unless the terminal the process started on hung up: then it
    is a first stop signal. A hang-up may bring several SIGHUPs (the kernel's to the
    session's leader, the shell's to its jobs), none of them a second request: any
    SIGHUP once stopping changes nothing."""

    def __init__(self, *, terminal: Terminal = _NO_TERMINAL) -> None:
        self._terminal = terminal
        self._daemon: HostDaemon | None = None
        self._first: int | None = None
        self._reason = ""
        self._opening: SignalStop | None = None
        # Called as the graceful shutdown is asked for, before it logs (the status line).
        self.before_shutdown: Callable[[], None] | None = None

    def stop_the_opening(self) -> SignalStop | None:
        """The stop a first signal hands on until the daemon is attached, for the Host's
        opening (None outside ``run_command``: the signal is then remembered for the
        daemon). A signal already received (the project was being found) stops it now."""
        self._opening = command_stop(status=EXIT_OK, unopened="nothing was served")
        if self._opening is not None and self._first is not None:
            self._opening.stop(self._first)
        return self._opening

    def attach(self, daemon: HostDaemon) -> None:
        self._daemon = daemon
        if self._first is not None:
            daemon.request_shutdown(reason=self._reason)

    async def run(self, signals: AsyncIterator[int]) -> None:
        async with anyio.create_task_group() as probing:
            if self._terminal.attached:
                probing.start_soon(self._notice_the_terminal_gone)
            async for number in signals:
                self.received(number)
            probing.cancel_scope.cancel()

    async def _notice_the_terminal_gone(self) -> None:
        """A terminal gone with no hang-up reaching this process (a background job whose
        shell exited) leaves it detached: a later SIGHUP is a reload, as under nohup.

        A hang-up's own SIGHUP comes as the terminal goes, so one that comes within
        ``_HANGUP_GRACE_S`` of finding it gone still stops the daemon.
        """
        while not self._terminal.hung_up():  # noqa: ASYNC110 (no event: a poll of the kernel's)
            await anyio.sleep(_TERMINAL_PROBE_S)
        await anyio.sleep(_HANGUP_GRACE_S)
        if self._first is None:
            self._terminal = _NO_TERMINAL

    def received(self, number: int) -> None:
        """Act on signal ``number``: reload, stop, or exit at once."""
        name = signal.Signals(number).name
        reason = f"{name} received"
        if number == signal.SIGHUP:
            if self._first is not None:
                return
            if not self._terminal.hung_up():
                if self._daemon is not None:
                    self._daemon.reload_now()
                return
            reason += ": the terminal closed"
        if self._first is not None:
            sys.stderr.write(
                f"hostkit serve: second {name}: exiting at once without draining "
                f"(status {128 + number})\n"
            )
            sys.stderr.flush()
            os._exit(128 + number)
        self._first, self._reason = number, reason
        if self.before_shutdown is not None:
            self.before_shutdown()
        if self._daemon is not None:
            self._daemon.request_shutdown(reason=reason)
        elif self._opening is not None:
            self._opening.stop(number)


class StatusLine:
    """The live status line under the log: one row, redrawn every ``STATUS_INTERVAL_S``.

    Put away (``put_away``) the moment the shutdown begins, before the drain's
    first log line: a line still drawn would go on saying "running" above them,
    and a log line written while it is erased would be glued to it.
    """

    def __init__(self, daemon: HostDaemon, out: Console) -> None:
        self._daemon = daemon
        self._out = out
        self._live = Live(console=out, auto_refresh=False, transient=True)
        self._away = anyio.Event()

    def put_away(self) -> None:
        """Erase the line now and draw it no more (safe to call twice, or before ``run``)."""
        if not self._away.is_set():
            self._away.set()
            # The terminal may be what went away (it closed: SIGHUP): erasing the line then
            # fails once, and the stream writes to the null device from then on (_stdio).
            with contextlib.suppress(OSError):
                self._live.stop()

    async def run(self) -> None:
        last: ServeStatus | None = None
        self._live.start()
        try:
            while not (self._away.is_set() or self._daemon.stopping):
                stale = False
                try:
                    with anyio.fail_after(STATUS_TIMEOUT_S):
                        last = await self._daemon.status()
                except (HostkitError, TimeoutError):
                    # The store is busy or failing: serving goes on; show what was last known.
                    stale = True
                if last is not None and not self._away.is_set():
                    text = status_text(last, stale=stale, width=self._out.width)
                    self._live.update(text, refresh=True)
                with anyio.move_on_after(STATUS_INTERVAL_S):
                    await self._away.wait()
        finally:
            self.put_away()


def status_text(status: ServeStatus, *, stale: bool = False, width: int | None = None) -> Text:
    """The terminal status line: the figures, then the daemons (``stale``: the figures could
    not be read this time and are the last known ones). One row: cut at ``width``.

    What matters most comes first, as the end is what a narrow terminal cuts:
    the figures, the daemons that do not run (named, with their state), the
    generation once a reload changed it, then how many daemons run.
    """
    line = Text(no_wrap=True, overflow="ellipsis")
    if stale:
        line.append("(stale) ", style="dim")
    line.append(
        f"queued {status.queued} · running {status.running} · delivered {status.delivered}",
        style="bold",
    )
    line.append(" · ", style="bold")
    line.append(
        f"dead letters {status.dead_letters}",
        style="bold" if status.dead_letters == 0 else "bold yellow",
    )
    turns = status.turns
    if turns.failed:
        # Failure notices count as delivered: only this says the turns fail (a provider
        # outage). Red while the latest failed in a row, with why; yellow once answered.
        line.append(" · ", style="bold")
        failed = f"failed {turns.failed}"
        if turns.failing and turns.last_failure:
            failed += f" (last: {one_line(turns.last_failure, _LAST_FAILURE_CHARS)})"
        line.append(failed, style="bold red" if turns.failing else "bold yellow")
    for daemon in status.daemons:
        if daemon.state != "running":
            line.append(f"  {daemon.name} ", style="dim")
            line.append(daemon.state, style="bold red" if daemon.troubled else "yellow")
    rejected = status.reload is not None and status.reload.rejected
    if status.generation > 1 or rejected:
        line.append(f"  generation {status.generation}", style="bold")
    if rejected:
        line.append(" (config rejected)", style="bold red")
    running = sum(1 for daemon in status.daemons if daemon.state == "running")
    if running:
        line.append(f"  {plural(running, 'daemon')} running", style="green")
    if width is not None:
        line.truncate(width, overflow="ellipsis")
    return line


def _stderr_is_a_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (OSError, ValueError):
        return False
