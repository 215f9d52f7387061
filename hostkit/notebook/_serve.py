"""``await nb.serve()``: the Host's daemon on the kernel's own loop, with a live status widget.

The daemon (``Host.serve``: webhooks, inbox worker, delivery, pollers under
one supervisor) runs as a task on the loop the kernel already runs, so the
turns it starts share the loop with the notebook's own cells: no thread, no
second loop. ``ServeMonitor`` draws the daemon's ``ServeStatus`` (daemons
and their states; queued, running, delivered, dead letters; turns that ended
without an answer, once there are any) and refreshes it on
a bounded interval, and at once when a daemon changes state, while the
daemon runs; it stops with the daemon. ``ServeHandle.stop`` drains: the
webhook server stops accepting, turns in flight get the drain time, leases
are released, and the widget shows the last state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import ipywidgets as widgets
from anyio.abc import TaskStatus

from hostkit.daemon import DaemonExit, DaemonStatus
from hostkit.errors import HostkitError, InvalidValue, UserError, bounded
from hostkit.host import Host, HostDaemon, ServeStatus
from hostkit.inspect import one_line
from hostkit.notebook._inspector_html import esc, panel_html, row_html, table_html, title_html
from hostkit.notebook._inspectors import _Inspector
from hostkit.notebook._theme import ERROR, MUTED

__all__ = ["ServeHandle", "ServeMonitor"]

# Bounds of the widget's refresh interval; the deadline of one refresh and of start-up.
MIN_EVERY_S = 0.05
MAX_EVERY_S = 60.0
TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
_ERROR_CHARS = 160
_DAEMON_COLUMNS = ("daemon", "state", "restarts", "last error")


class ServeMonitor(_Inspector):
    """Daemons with their states, and queued / running / delivered / dead letters, kept current.

    ``read`` is the daemon's ``status()``. ``watch()`` refreshes every
    ``every_s`` seconds (and when ``poke()`` says a daemon changed) in a task
    on the loop the monitor was built on, until ``stop()``; each read has a
    deadline, and a failed read is shown, not raised.
    """

    _watch: asyncio.Task[None] | None = None

    def __init__(self, read: Callable[[], Awaitable[ServeStatus]], status: ServeStatus) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise UserError(
                "a ServeMonitor must be built on a running event loop "
                "(in a notebook cell or async code)"
            ) from exc
        self._read = read
        self._changed = asyncio.Event()
        self.summary = widgets.HTML("")
        self.error = ""
        self.refreshes = 0
        super().__init__(children=[self.summary])
        self._show(status)

    async def refresh(self) -> ServeStatus:
        """Read the status again and redraw (``TimeoutError`` past ``TIMEOUT_S``)."""
        with anyio.fail_after(TIMEOUT_S):
            status = await self._read()
        self.error = ""
        self._show(status)
        return status

    def poke(self) -> None:
        """A daemon changed state: the watcher refreshes now instead of at its next tick."""
        self._changed.set()

    def watch(self, every_s: float = 1.0) -> asyncio.Task[None]:
        """Refresh every ``every_s`` seconds until ``stop()`` (a second ``watch`` replaces it)."""
        every = interval(every_s)
        self.stop()
        self._watch = self._loop.create_task(self._watching(every))
        return self._watch

    def stop(self) -> None:
        """End ``watch()``'s refreshes; the widget keeps what it showed last."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    @property
    def watching(self) -> bool:
        return self._watch is not None and not self._watch.done()

    async def _watching(self, every_s: float) -> None:
        while True:
            with anyio.move_on_after(every_s):
                await self._changed.wait()
            self._changed.clear()
            try:
                await self.refresh()
            except Exception as exc:  # shown; the widget must outlive a failed read
                self.error = _error_text(exc)
                self._show(self.model)

    def _show(self, status: ServeStatus) -> None:
        self.model = status
        self.refreshes += 1
        self.refreshed_at = time.time()
        self.summary.value = _status_html(status, self.error)

    def close(self) -> None:
        self.stop()
        super().close()

    def html(self) -> str:
        return str(self.summary.value)

    def text(self) -> str:
        status = self.model
        lines = [
            f"hostkit serve: {_where(status)}",
            f"queued {status.queued}, running {status.running}, delivered {status.delivered},"
            f" dead letters {status.dead_letters}",
        ]
        rows = [_DAEMON_COLUMNS, *(_daemon_cells(d) for d in status.daemons)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(_DAEMON_COLUMNS))]
        lines.extend(
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )
        if (turns := status.turns.check()) is not None:
            lines.append(f"turns {one_line(turns, _ERROR_CHARS)}")
        if self.error:
            lines.append(f"refresh failed: {one_line(self.error, _ERROR_CHARS)}")
        return "\n".join(lines)


def interval(every_s: object) -> float:
    """``every_s`` if it is a refresh interval within the bounds, else ``InvalidValue``."""
    if (
        isinstance(every_s, bool)
        or not isinstance(every_s, int | float)
        or not MIN_EVERY_S <= every_s <= MAX_EVERY_S
    ):
        raise InvalidValue(f"every_s must be between {MIN_EVERY_S} and {MAX_EVERY_S:g} seconds")
    return float(every_s)


class ServeHandle:
    """What ``nb.serve()`` returns: the listening ``url``, the ``daemon`` and its ``monitor``.

    ``await handle.stop()`` (what ``nb.stop_serving()`` calls) drains and
    stops the daemon; a second call returns the same ``DaemonExit``.
    """

    def __init__(self, daemon: HostDaemon, task: asyncio.Task[DaemonExit]) -> None:
        self.daemon = daemon
        self.url = daemon.url or ""
        self.monitor: ServeMonitor | None = None
        self.exit: DaemonExit | None = None
        self._task = task

    @classmethod
    async def start(cls, host: Host, *, every_s: float = 1.0, **options: Any) -> ServeHandle:
        """``host.serve(**options)`` as a task on the running loop, once every daemon started.

        A daemon that cannot start (the port is taken, a secret is unset) is
        raised here, and nothing keeps running.
        """
        every = interval(every_s)  # checked before anything starts
        monitor: list[ServeMonitor] = []
        told = options.pop("on_change", None)

        def changed(status: DaemonStatus) -> None:
            if monitor:
                monitor[0].poke()
            if told is not None:
                told(status)

        daemon = host.serve(on_change=changed, **options)
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        task = loop.create_task(daemon.run(task_status=_Started(started)))
        await _first_start(daemon, task, started)
        handle = cls(daemon, task)
        try:
            with anyio.fail_after(TIMEOUT_S):
                first = await daemon.status()
            handle.monitor = ServeMonitor(daemon.status, first)
        except BaseException:
            await handle.stop()
            raise
        monitor.append(handle.monitor)
        handle.monitor.watch(every)
        return handle

    @property
    def running(self) -> bool:
        return not self._task.done()

    async def status(self) -> ServeStatus:
        """The daemon's status now (the widget shows it too)."""
        if self.monitor is None:
            return await self.daemon.status()
        return await self.monitor.refresh()

    async def stop(self, *, deadline_s: float | None = None) -> DaemonExit:
        """Drain and stop (bounded by ``deadline_s``, default ``[serve] drain_timeout_s``)."""
        if self.exit is None:
            if not self._task.done():
                self.daemon.request_shutdown(reason="nb.stop_serving()", deadline_s=deadline_s)
            self.exit = await self._task
            if self.monitor is not None:
                self.monitor.stop()
                try:
                    await self.monitor.refresh()
                except Exception as exc:  # the store may be closing: keep the last view
                    self.monitor.error = _error_text(exc)
        return self.exit

    def __repr__(self) -> str:
        return f"ServeHandle({self.url}, {'serving' if self.running else 'stopped'})"


class _Started(TaskStatus[None]):
    """``task_status`` for a run started as a plain task: resolves a future."""

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def started(self, value: None = None) -> None:
        if not self._future.done():
            self._future.set_result(None)


async def _first_start(
    daemon: HostDaemon, task: asyncio.Task[DaemonExit], started: asyncio.Future[None]
) -> None:
    """Wait for the first start; a run that ended or hung first is raised, nothing left over."""
    either: set[asyncio.Future[Any]] = {task, started}
    await asyncio.wait(either, timeout=START_TIMEOUT_S, return_when="FIRST_COMPLETED")
    if started.done():
        return
    if task.done():
        task.result()  # the start-up's own error (a taken port, an unset secret)
        raise UserError("the daemon ended before it started")
    daemon.request_shutdown(reason="start-up timed out", deadline_s=1.0)
    with anyio.move_on_after(5.0):
        await asyncio.wait({task})
    task.cancel()
    raise UserError(f"the daemon did not start within {START_TIMEOUT_S:g} s")


def _where(status: ServeStatus) -> str:
    if status.daemons and all(d.state == "stopped" for d in status.daemons):
        return f"stopped (it listened on {status.listening})" if status.listening else "stopped"
    state = "ready" if status.ready else "not ready"
    return f"listening on {status.listening} ({state})" if status.listening else "not listening"


def _daemon_cells(status: DaemonStatus) -> tuple[str, str, str, str]:
    return (
        status.name,
        status.state,
        str(status.restarts),
        one_line(status.last_error or "", _ERROR_CHARS),
    )


def _status_html(status: ServeStatus, error: str) -> str:
    parts = [
        title_html(
            "hostkit serve",
            ("queued", str(status.queued)),
            ("running", str(status.running)),
            ("delivered", str(status.delivered)),
            ("dead letters", str(status.dead_letters)),
        ),
        f"<div style='color:{MUTED}'>{esc(_where(status))}</div>",
    ]
    body = "".join(
        _error_row(cells) if d.troubled else row_html(*cells)
        for d in status.daemons
        for cells in (_daemon_cells(d),)
    )
    parts.append(table_html(_DAEMON_COLUMNS, body))
    if (turns := status.turns.check()) is not None:
        # Failure notices count as delivered: this line says the turns fail.
        color = ERROR if status.turns.failing else MUTED
        parts.append(f"<div style='color:{color}'>turns {esc(one_line(turns, _ERROR_CHARS))}</div>")
    if error:
        parts.append(f"<div style='color:{ERROR}'>refresh failed: {esc(error)}</div>")
    return panel_html(*parts)


def _error_row(cells: tuple[str, ...]) -> str:
    return "<tr>" + "".join(f"<td style='color:{ERROR}'>{esc(c)}</td>" for c in cells) + "</tr>"


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, HostkitError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    return bounded(str(exc) or type(exc).__name__, 300)
