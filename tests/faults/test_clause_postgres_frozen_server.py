"""Clause: a frozen PostgreSQL server holds no deadline of the Host.

A frozen server (every server process stopped with SIGSTOP) keeps its
connections open and answers nothing: no client socket timeout and no
server-side ``statement_timeout`` ever fires. Every wait on it is still
bounded: a store call ends at its caller's deadline, and under
``limit_waits`` (a closing owner) at the limit whatever shields its caller
holds; closing the store ends at once; ``hostkit serve`` answers a webhook it
cannot store with 503 (and ``Retry-After``) within its accept timeout, and a
SIGTERM ends the process within its drain deadline plus a few seconds, or,
while the Host still opens, within the seconds docs/service.md gives. Once
the server goes on, the same store works again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest

from hostkit.channels import sign_webhook
from hostkit.errors import StoreError, StoreOutcomeUnknown
from hostkit.host import Host, parse_config
from hostkit.store import RuntimeStore
from hostkit.store._pg_migrate import _MIGRATION_LOCK
from tests.contract.test_clause_cli_stop_signals import signal_hostkit
from tests.faults.test_clause_store_lock_held_elsewhere import PG_CONFIG
from tests.postgres import PostgresCluster

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COUNT = "SELECT COUNT(*) FROM sessions"
SECRET = "frozen-hook-secret-0123456789"
LISTENING = "hostkit serve: listening on "
DRAIN_S = 3.0
ACCEPT_TIMEOUT_S = 5.0  # the webhook app's own bound on storing an event
# A thread left by a caller that gave up waits at most about a second more (its slice of
# the pool's wait); the bound leaves room for a loaded machine and stays far below the
# connect timeout (30 s) those threads waited before.
CALLS_END_WITHIN_S = 10.0


@pytest.fixture
def frozen(own_cluster: PostgresCluster) -> Iterator[PostgresCluster]:
    """The cluster, thawed whatever the test did (it is stopped after)."""
    try:
        yield own_cluster
    finally:
        own_cluster.thaw()


def count(conn: object) -> int:
    return int(conn.execute(COUNT).fetchone()[0])  # type: ignore[attr-defined]


async def test_store_calls_to_a_frozen_server_end_at_their_deadlines(
    frozen: PostgresCluster,
) -> None:
    url = await frozen.create_database()
    store = await RuntimeStore.open_postgres(url)
    try:
        assert await store.read(count) == 0
        async with anyio.create_task_group() as group:  # two pooled connections
            for _ in range(2):
                group.start_soon(store.read, lambda conn: conn.execute("SELECT pg_sleep(0.3)"))  # type: ignore[attr-defined]
        frozen.freeze()
        # A caller's own deadline ends its wait (the connection is cut behind it).
        started = time.monotonic()
        with anyio.move_on_after(1.0) as waited:
            await store.read(count)
        assert waited.cancelled_caught
        assert time.monotonic() - started < 3.0
        # A closing owner's limit ends a shielded write too (on the other connection, in
        # its statement), typed and retryable (when its COMMIT may have gone out,
        # ``StoreOutcomeUnknown`` says so).
        store.limit_waits(1.0)
        started = time.monotonic()
        with anyio.CancelScope(shield=True), pytest.raises(StoreError) as caught:
            await store.write(lambda conn: conn.execute("DELETE FROM sessions"))  # type: ignore[attr-defined]
        assert time.monotonic() - started < 4.0
        assert caught.value.retryable
        # Cut before its COMMIT went out: nothing was stored, and the error says so.
        assert not isinstance(caught.value, StoreOutcomeUnknown)
    finally:
        started = time.monotonic()
        await store.aclose()
        closed_in = time.monotonic() - started
    assert closed_in < 5.0


def store_calls_in_threads() -> int:
    """How many threads of this process run a PostgreSQL store call now."""
    return sum(
        any(
            frame.f_code.co_name == "_run" and frame.f_code.co_filename.endswith("_pg.py")
            for frame, _ in traceback.walk_stack(top)
        )
        for top in sys._current_frames().values()
    )


async def store_calls_end_within(seconds: float) -> bool:
    """Whether every thread running a store call ends within ``seconds`` (polled)."""
    with anyio.move_on_after(seconds):
        # Threads of the store end on their own: there is no event to wait on.
        while store_calls_in_threads():  # noqa: ASYNC110
            await anyio.sleep(0.05)
        return True
    return False


async def test_a_stop_signal_while_the_host_opens_on_a_frozen_server_ends_it_within_seconds(
    tmp_path: Path, frozen: PostgresCluster
) -> None:
    """``hostkit run`` whose Host, opening, waits in a query (for another Host's upgrade)
    when the server freezes: SIGTERM ends it within about 4 s (docs/service.md), as
    when the server answers (1.3 s here). psycopg's own cancellation of the query (a
    cancel request on a new connection, then up to 5 s for the query) took 9 s: the
    opening asks for the cancellation for a second at most, then cuts its connection."""
    url = await frozen.create_database()
    await anyio.Path(tmp_path / "hostkit.toml").write_text(PG_CONFIG.format(url=url))
    waiters = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", [_MIGRATION_LOCK])

        async def waiting_then_frozen() -> None:
            with anyio.fail_after(60):
                while True:
                    row = await (await holder.execute(waiters)).fetchone()
                    if row is not None and row[0]:
                        break
                    await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(frozen.freeze)

        try:
            stopped = await signal_hostkit(
                ["run", "hello"], tmp_path, waiting_then_frozen, [signal.SIGTERM]
            )
        finally:
            frozen.thaw()
    assert stopped.code == 143, stopped
    assert stopped.took < 4.0, stopped.took
    assert "cancellation" not in stopped.err, "no cancel request was sent to wait for"
    line = (
        "interrupted while the Host was opening (its database busy or being upgraded): "
        "nothing was run"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert "Traceback" not in stopped.err


async def test_callers_that_gave_up_leave_no_thread_waiting_for_a_connection(
    frozen: PostgresCluster,
) -> None:
    """A renewal retried through an outage gives up again and again; the threads it
    leaves behind stop waiting for a connection about when their callers did, instead
    of piling up ahead of live callers until the connect timeout."""
    url = await frozen.create_database()
    async with await RuntimeStore.open_postgres(url, connect_timeout_s=30.0) as store:
        assert await store.read(count) == 0
        frozen.freeze()
        for _ in range(12):
            with anyio.move_on_after(0.2):
                await store.read(count)
        assert store_calls_in_threads() > 0  # the last ones still wait
        # Each stops a margin past its caller; before, each waited the connect timeout.
        assert await store_calls_end_within(CALLS_END_WITHIN_S)
        frozen.thaw()


async def test_callers_cancelled_without_a_deadline_leave_no_thread_waiting_for_a_connection(
    frozen: PostgresCluster,
) -> None:
    """A caller cancelled from outside (a task group's cancel, no deadline to go by): the
    thread it leaves waiting for a connection stops about a second later, not at the
    connect timeout."""
    url = await frozen.create_database()
    async with await RuntimeStore.open_postgres(url, connect_timeout_s=30.0) as store:
        assert await store.read(count) == 0
        frozen.freeze()
        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(store.read, count)
            await anyio.sleep(0.3)
            group.cancel_scope.cancel()
        assert store_calls_in_threads() > 0  # still waiting for the pool
        assert await store_calls_end_within(CALLS_END_WITHIN_S)
        frozen.thaw()


async def test_the_store_works_again_once_a_frozen_server_goes_on(
    frozen: PostgresCluster,
) -> None:
    url = await frozen.create_database()
    async with await RuntimeStore.open_postgres(url) as store:
        assert await store.read(count) == 0
        frozen.freeze()
        for _ in range(3):  # each cut connection is discarded, none comes back broken
            with anyio.move_on_after(0.5):
                await store.read(count)
        frozen.thaw()
        with anyio.fail_after(30):
            while True:
                try:
                    assert await store.read(count) == 0
                    break
                except StoreError:
                    await anyio.sleep(0.1)


CONFIG = """
[host]
workspace = "workspace"

[store]
url = "{url}"

[providers.scripted]
kind = "scripted"
script = [{{reply = "answered"}}]

[agents.assistant]
provider = "scripted"
memory = false

[channels.hooks]
kind = "webhook"
secret_env = "HOOK_SECRET"

[serve]
port = 0
drain_timeout_s = {drain}
"""


def signed(event_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": event_id, "sender": "u1", "conversation": "room", "text": "hi"}
    ).encode()
    headers = sign_webhook(SECRET, body, timestamp=int(time.time()))
    return body, {**headers, "content-type": "application/json"}


async def test_serve_answers_503_in_time_and_stops_in_time_on_a_frozen_server(
    tmp_path: Path, frozen: PostgresCluster
) -> None:
    url = await frozen.create_database()
    (tmp_path / "hostkit.toml").write_text(CONFIG.format(url=url, drain=DRAIN_S))
    env = {**os.environ, "HOOK_SECRET": SECRET}
    argv = [sys.executable, "-m", "hostkit", "serve", "-c", "hostkit.toml"]
    async with await anyio.open_process(
        argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        said: list[bytes] = []

        async def collect(stream: anyio.abc.ByteReceiveStream) -> None:
            async for chunk in stream:
                said.append(chunk)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(collect, process.stderr)
                seen = b""
                with anyio.fail_after(60):
                    while b"\n" not in seen:
                        seen += await process.stdout.receive()
                base = seen.decode().splitlines()[0].removeprefix(LISTENING).strip()
                async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                    body, headers = signed("evt-before")
                    stored = await client.post("/channels/hooks", content=body, headers=headers)
                    assert stored.status_code == 200, stored.text
                    frozen.freeze()
                    body, headers = signed("evt-frozen")
                    started = time.monotonic()
                    refused = await client.post("/channels/hooks", content=body, headers=headers)
                    answered_in = time.monotonic() - started
                    assert refused.status_code == 503
                    assert refused.headers["retry-after"] == "5"
                    assert answered_in < ACCEPT_TIMEOUT_S + 2.0, answered_in
                    assert (await client.get("/healthz")).status_code == 200
                process.send_signal(signal.SIGTERM)
                started = time.monotonic()
                with anyio.move_on_after(60):
                    await process.wait()
                stopped_in = time.monotonic() - started
                group.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()
    logs = b"".join(said).decode(errors="replace")
    assert stopped_in < DRAIN_S + 6.0, (stopped_in, logs[-3_000:])
    assert SECRET not in logs


async def test_a_daemon_stopped_on_a_host_that_lives_on_leaves_its_store_unbounded(
    tmp_path: Path, frozen: PostgresCluster
) -> None:
    """Only a daemon whose Host closes after it (``hostkit serve``) bounds the store's
    waits for good at its shutdown: a notebook's Host serves, stops serving, and its
    next store calls still wait as long as they need."""
    url = await frozen.create_database()
    config = parse_config(
        {
            "host": {"workspace": str(tmp_path / "ws")},
            "store": {"url": url},
            "serve": {"port": 0, "drain_timeout_s": 0.2},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        async with host.serve():
            pass
        await anyio.sleep(1.0)  # well past the drain deadline and its margin
        slept = await host.store.read(
            lambda conn: conn.execute("SELECT pg_sleep(1.0)").fetchone()  # type: ignore[attr-defined]
        )
        assert slept is not None
