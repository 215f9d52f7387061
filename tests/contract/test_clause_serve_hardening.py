"""Serve clause: one misbehaving part never takes ``hostkit serve`` down or lets it grow unbounded.

A daemon that calls ``sys.exit`` (uvicorn does when it cannot start) is
that daemon's failure (backoff, restart), not the supervisor's; the status
line survives a store error (it shows the last figures, marked stale); the
webhook listener closes a connection that never finishes its request head
and answers 503 beyond its connection limit; the log queue is bounded and
says how many records it dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import queue
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
import uvicorn
from rich.console import Console
from uvicorn.server import ServerState

from hostkit.channels import sign_webhook
from hostkit.cli import _serve as cli_serve
from hostkit.cli._interrupt import CommandStop, SignalStop, stoppable
from hostkit.cli._serve_logs import DroppingQueueHandler
from hostkit.daemon import DaemonRegistry, DaemonStatus, RestartPolicy, Supervisor
from hostkit.errors import StoreError
from hostkit.host import HostDaemon, ServeStatus, _serve_http
from tests.contract._daemons import Changes, Scripted
from tests.contract.test_clause_serve_daemon import ENV, SECRET, SlowModel, serving

pytestmark = pytest.mark.anyio

FAST = RestartPolicy(initial_s=0.01, max_s=0.05, factor=2.0, healthy_after_s=60.0)


async def test_a_daemon_calling_sys_exit_is_restarted_not_the_process() -> None:
    log: list[str] = []
    exiting = Scripted("exiting", log, failures=(SystemExit(3), None))
    steady = Scripted("steady", log)
    registry = DaemonRegistry()
    registry.register("steady", steady)
    registry.register("exiting", exiting)
    changes = Changes()
    supervisor = Supervisor(registry, policy=FAST, on_change=changes)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await changes.wait_for("exiting", "running", count=2)
        status = supervisor.status("exiting")
        assert status.restarts == 1
        assert status.last_error is not None
        assert status.last_error.startswith("SystemExit")
        assert supervisor.status("steady").state == "running"
        exit_ = await supervisor.shutdown(5)
    assert exit_.code == 0


class FlakyStatus(HostDaemon):
    """A serving daemon whose status reads fail after the first (a busy store)."""

    reads = 0
    failed_twice = anyio.Event()

    async def status(self) -> ServeStatus:
        FlakyStatus.reads += 1
        if FlakyStatus.reads > 3:
            FlakyStatus.failed_twice.set()
        if FlakyStatus.reads > 1:
            raise StoreError("the database is busy")
        return await super().status()


async def test_the_status_line_survives_a_store_error_and_shows_stale_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_serve, "STATUS_INTERVAL_S", 0.02)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    async with serving(tmp_path, SlowModel()) as (host, daemon, _):
        FlakyStatus.failed_twice = anyio.Event()
        flaky = FlakyStatus(host, env=ENV)
        flaky.supervisor = daemon.supervisor
        async with anyio.create_task_group() as group:
            group.start_soon(cli_serve.StatusLine(flaky, console).run)
            with anyio.fail_after(5):
                await FlakyStatus.failed_twice.wait()
            group.cancel_scope.cancel()
    assert "(stale)" in out.getvalue()
    assert "queued 0" in out.getvalue()


async def test_a_connection_that_never_finishes_its_head_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_serve_http._HeadTimeout, "header_timeout_s", 0.3)
    async with serving(tmp_path, SlowModel()) as (_, daemon, _receiver):
        assert daemon.url is not None
        host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
        stream = await anyio.connect_tcp(host, int(port))
        async with stream:
            await stream.send(b"POST /channels/hooks HTTP/1.1\r\nHost: x\r\n")
            with anyio.fail_after(3):
                await _until_closed(stream)
        # A complete request on a fresh connection is still served.
        async with httpx.AsyncClient(base_url=daemon.url) as client:
            assert (await client.get("/healthz")).status_code == 200


async def test_the_listen_backlog_stays_small(tmp_path: Path) -> None:
    """asyncio tries that many accepts per readiness, each failing and logged at the
    descriptor limit: uvicorn's default 2,048 replaced the socket's own at its listen()."""
    ss = await anyio.run_process(["ss", "-V"], check=False)
    if ss.returncode != 0:
        pytest.skip("no ss here to read a listening socket's backlog")
    async with serving(tmp_path, SlowModel()) as (_, daemon, _receiver):
        assert daemon.url is not None
        port = daemon.url.rsplit(":", 1)[1]
        listed = await anyio.run_process(["ss", "-ltnH", f"sport = :{port}"])
    rows = [row.split() for row in listed.stdout.decode().splitlines() if row.strip()]
    # Listening rows: State Recv-Q Send-Q (the backlog) Local Peer.
    assert rows, listed.stdout
    assert {row[2] for row in rows} == {str(_serve_http._BACKLOG)}, rows
    assert _serve_http._BACKLOG <= 128


async def _until_closed(stream: anyio.abc.ByteStream) -> None:
    """Read until the server closes the connection (it sends nothing first)."""
    try:
        while True:
            assert await stream.receive() == b"", "the server answered a partial head"
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return


async def test_idle_connections_make_room_and_busy_ones_beyond_the_limit_get_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections opened only to sit idle (no request head) cannot fill the limit: at
    the limit, the one waiting longest for its head is closed for the newcomer, so
    /healthz and platform events are still answered. Connections with a request in
    flight are never closed for that, and past the limit a request gets 503."""
    monkeypatch.setattr(_serve_http, "MAX_CONNECTIONS", 3)
    async with serving(tmp_path, SlowModel()) as (_, daemon, _receiver):
        assert daemon.url is not None
        host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
        idle = [await anyio.connect_tcp(host, int(port)) for _ in range(6)]
        try:
            async with httpx.AsyncClient(base_url=daemon.url) as client:
                assert (await client.get("/healthz")).status_code == 200
            with anyio.fail_after(5):
                await _until_closed(idle[0])  # the longest-idle ones made room
            # Two requests in flight (signed heads, bodies still arriving), one more request.
            body = b"{" + b" " * 3999
            signed = sign_webhook(SECRET, body, timestamp=int(time.time()))
            head = "".join(f"{name}: {value}\r\n" for name, value in signed.items())
            request = (
                f"POST /channels/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n{head}\r\n"
            )
            busy = [await anyio.connect_tcp(host, int(port)) for _ in range(2)]
            for stream in busy:
                await stream.send(request.encode() + body[:100])
            await anyio.sleep(0.2)
            async with httpx.AsyncClient(base_url=daemon.url) as client:
                assert (await client.get("/healthz")).status_code == 503
            for stream in busy:
                await stream.aclose()
        finally:
            for stream in idle:
                await stream.aclose()


class _Socket(asyncio.Transport):
    """A connection's transport as the protocol sees it (a test adapter: no socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8787), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True  # its loss is reported later (never, here)

    def write(self, data: Any) -> None:
        """Nothing reaches a peer."""

    def pause_reading(self) -> None:
        """Nothing to pause."""

    def resume_reading(self) -> None:
        """Nothing to resume."""


async def test_connections_closed_to_make_room_stop_counting_at_once() -> None:
    """A flood of idle connections (thousands a second): each one arriving at the limit
    closes the longest-waiting one, whose loss uvicorn hears of only in a later callback.
    Counted until then, hundreds of closing connections made a real request's
    connection get uvicorn's 503 "Exceeded concurrency limit". They leave the count when
    closed: a request on the newest connection always finds room."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        """Never called: no request arrives."""

    config = uvicorn.Config(app, limit_concurrency=3, http=_serve_http._HeadTimeout)
    config.load()
    state = ServerState()
    for _ in range(50):  # no loss is reported meanwhile, as in a flood
        protocol = _serve_http._HeadTimeout(config=config, server_state=state, app_state={})
        protocol.connection_made(_Socket())
        assert len(state.connections) < 3  # uvicorn's own check: a request is served
        assert protocol in state.connections


def test_the_log_queue_is_bounded_and_counts_what_it_dropped() -> None:
    records: queue.Queue[logging.LogRecord] = queue.Queue(3)
    handler = DroppingQueueHandler(records)
    logger = logging.getLogger("hostkit.test.bounded")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for n in range(10):
            logger.warning("record %d", n)
        assert handler.dropped == 7
        assert records.qsize() == 3
        for _ in range(3):
            records.get_nowait()
        logger.warning("after")
    finally:
        logger.removeHandler(handler)
    notice, after = records.get_nowait(), records.get_nowait()
    assert notice.getMessage() == "7 log records were dropped (the log writer fell behind)"
    assert after.getMessage() == "after"


async def test_the_status_line_is_put_away_when_the_shutdown_begins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain logs follow the shutdown's start: a status line still drawn would go on
    saying "running" above them, and glue itself to their first line."""
    monkeypatch.setattr(cli_serve, "STATUS_INTERVAL_S", 0.02)
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    async with serving(tmp_path, SlowModel()) as (_, daemon, _):
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(cli_serve.StatusLine(daemon, console).run)
                await anyio.sleep(0.1)
                daemon.request_shutdown(reason="test")
                # The line's run returns by itself: the group ends without a cancel.
    assert daemon.stopping


async def test_a_signal_puts_the_status_line_away_before_the_shutdown_logs() -> None:
    """The first SIGTERM/SIGINT erases the line first, then asks for the shutdown (whose
    first log line would otherwise be glued to the line being erased)."""
    happened: list[str] = []

    class Daemon:
        def request_shutdown(self, *, reason: str) -> None:
            happened.append(f"shutdown: {reason}")

    async def one_signal() -> AsyncIterator[int]:
        yield signal.SIGTERM

    watch = cli_serve._SignalWatch()
    watch.attach(Daemon())  # type: ignore[arg-type]
    watch.before_shutdown = lambda: happened.append("put away")
    await watch.run(one_signal())
    assert happened == ["put away", "shutdown: SIGTERM received"]


async def test_a_status_line_put_away_stops_at_once_and_draws_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_serve, "STATUS_INTERVAL_S", 30.0)  # only put_away can end it
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    async with serving(tmp_path, SlowModel()) as (_, daemon, _):
        line = cli_serve.StatusLine(daemon, console)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(line.run)
                await anyio.sleep(0.3)
                line.put_away()
                drawn = out.getvalue()
        line.put_away()  # twice: nothing more
        assert out.getvalue() == drawn
    assert "dead letters 0" in drawn


def test_the_status_line_is_one_row_of_at_most_the_terminal_width() -> None:
    """One row whatever the terminal's width, what matters first (a narrow terminal cuts
    the end): the figures, a daemon that does not run, then the count of those that do.
    Dead letters are stored, not a failure now: yellow, not red."""
    running = tuple(DaemonStatus(name, "running") for name in ("delivery", "inbox", "webhooks"))
    troubled = DaemonStatus("poll:tg", "backoff", restarts=3)
    status = ServeStatus(
        daemons=(*running, troubled),
        queued=12,
        running=3,
        delivered=1_200,
        dead_letters=2,
        listening="http://127.0.0.1:8080",
        ready=True,
        generation=1,
    )
    assert status.troubled == 1  # counted from the daemons' states
    text = cli_serve.status_text(status, width=80)
    assert text.plain == (
        "queued 12 · running 3 · delivered 1200 · dead letters 2  poll:tg backoff  3 dae…"
    )
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    with console.capture() as captured:
        console.print(text)
    assert captured.get().count("\n") == 1  # one row, not wrapped
    styles = {text.plain[span.start : span.end]: str(span.style) for span in text.spans}
    assert styles["dead letters 2"] == "bold yellow"
    assert styles["backoff"] == "bold red"
    # All is well, at the first generation: it fits 80 columns whole.
    healthy = cli_serve.status_text(
        dataclasses.replace(status, dead_letters=0, daemons=running), width=80
    )
    assert healthy.plain == (
        "queued 12 · running 3 · delivered 1200 · dead letters 0  3 daemons running"
    )
    reloaded = cli_serve.status_text(dataclasses.replace(status, generation=4), width=200)
    assert reloaded.plain.endswith("poll:tg backoff  generation 4  3 daemons running")


async def test_a_pipelined_request_in_flight_is_never_taken_for_an_idle_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client may send its next request right behind the first (HTTP/1.1 pipelining):
    once the first is answered, the second is in flight, not a connection waiting for a
    head, and connections arriving at the limit never close it."""
    monkeypatch.setattr(_serve_http, "MAX_CONNECTIONS", 4)
    async with serving(tmp_path, SlowModel()) as (_, daemon, _receiver):
        assert daemon.url is not None
        host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
        body = json.dumps({"event_id": "p1", "sender": "u1", "conversation": "room", "text": "hi"})
        signed = sign_webhook(SECRET, body.encode(), timestamp=int(time.time()))
        head = "".join(f"{name}: {value}\r\n" for name, value in signed.items())
        second = (
            "POST /channels/hooks HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            f"{head}Content-Length: {len(body)}\r\n\r\n"
        )
        async with await anyio.connect_tcp(host, int(port)) as pipe:
            await pipe.send(f"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n{second}{body[:10]}".encode())
            with anyio.fail_after(5):
                assert (await pipe.receive()).startswith(b"HTTP/1.1 200")
            idle = [await anyio.connect_tcp(host, int(port)) for _ in range(6)]
            await anyio.sleep(0.2)
            await pipe.send(body[10:].encode())
            with anyio.fail_after(5):
                answer = await pipe.receive()
            for stream in idle:
                await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:60]


async def test_a_signal_while_the_project_is_found_stops_the_opening_as_it_begins() -> None:
    """A first SIGTERM that came before the Host began to open (the project was being
    found) is not kept for a daemon that would come only once the opening ended: handing
    the opening its stop ends it at once, its lock waits already limited, and the command
    exits 0 (a stop asked for, nothing served)."""
    command = CommandStop()
    handed: list[SignalStop | None] = []

    async def one_signal() -> AsyncIterator[int]:
        yield signal.SIGTERM

    async def serve_opening() -> None:
        watch = cli_serve._SignalWatch()
        await watch.run(one_signal())
        handed.append(watch.stop_the_opening())
        await anyio.sleep(30)  # the opening's first wait: cancelled at once

    task = asyncio.create_task(stoppable(serve_opening, command))
    with anyio.fail_after(5), pytest.raises(asyncio.CancelledError):
        await task
    (stop,) = handed
    assert stop is not None
    assert stop.waits.until is not None
    assert stop.signal == signal.SIGTERM
    assert command.status == 0
