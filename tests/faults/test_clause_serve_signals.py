"""Serve clause: ``hostkit serve`` as a real process, stopped by signals.

SIGTERM with a turn in flight: readiness turns 503 and new webhooks are
refused at once, while the listener still answers; the turn finishes (the
model, a loopback OpenAI-compatible server, is held until the test lets it
answer), its inbound is completed, nothing stays claimed, and the process
exits 0. A second SIGTERM during the drain exits at once with 128 + 15 and
says so. Logs are JSON lines on stderr (it is not a terminal) and never
carry the webhook secret. A first SIGTERM/SIGINT while the Host still opens
(another process holds the database's write lock through its migration or
recovery) ends the opening within seconds: one line, exit 0, nothing served
or written; SIGHUP then changes nothing, and a second signal exits at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
from anyio.abc import Process
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hostkit.channels import sign_webhook
from hostkit.store import MIGRATIONS, SCHEMA_VERSION, RuntimeStore
from tests.contract.test_clause_cli_stop_signals import signal_hostkit
from tests.faults.test_clause_store_lock_held_elsewhere import host_opening, lock_held_elsewhere
from tests.wire import openai_chat as wire_openai

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "hook-secret-Qw8-do-not-log"
LISTENING = "hostkit serve: listening on "
CONFIG = """
[host]
database = "state/hostkit.db"
workspace = "workspace"

[providers.gated]
kind = "openai"
base_url = "{model_url}/v1"
model = "gated"
api_key_env = "GATED_KEY"

[agents.assistant]
provider = "gated"

[channels.hooks]
kind = "webhook"
secret_env = "HOOK_SECRET"

[serve]
port = 0
drain_timeout_s = 30
"""


@dataclass
class GatedModel:
    """A loopback chat-completions server that answers only once ``release`` is set."""

    url: str = ""
    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def complete(self, request: Request) -> Response:
        await request.body()
        self.entered.set()
        await self.release.wait()
        events = wire_openai.sse(
            [
                wire_openai.chunk(role="assistant"),
                wire_openai.chunk(content="drained answer"),
                wire_openai.chunk(finish_reason="stop"),
                wire_openai.chunk(usage_block=wire_openai.usage(20, 5)),
            ]
        )
        return StreamingResponse(iter(events), media_type="text/event-stream")


@asynccontextmanager
async def gated_model() -> AsyncIterator[GatedModel]:
    model = GatedModel()
    app = Starlette(routes=[Route("/v1/chat/completions", model.complete, methods=["POST"])])
    sock = socket.create_server(("127.0.0.1", 0))
    model.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        try:
            yield model
        finally:
            model.release.set()
            server.should_exit = True


@dataclass
class Serving:
    process: Process
    url: str
    stderr: list[str]


@asynccontextmanager
async def hostkit_serve(tmp_path: Path, model: GatedModel) -> AsyncIterator[Serving]:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG.format(model_url=model.url))
    env = {**os.environ, "HOOK_SECRET": SECRET, "GATED_KEY": "sk-test-gated"}
    argv = [sys.executable, "-m", "hostkit", "serve", "-c", "hostkit.toml"]
    async with await anyio.open_process(
        argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        lines: list[str] = []

        async def collect(stream: anyio.abc.ByteReceiveStream) -> None:
            async for chunk in stream:
                lines.append(chunk.decode(errors="replace"))

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(collect, process.stderr)
                seen = b""
                with anyio.fail_after(60):
                    while b"\n" not in seen:
                        seen += await process.stdout.receive()
                first = seen.decode().splitlines()[0]
                assert first.startswith(LISTENING), first
                yield Serving(process, first.removeprefix(LISTENING).strip(), lines)
        finally:
            if process.returncode is None:
                process.kill()


def _signed(event_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": event_id, "sender": "u1", "conversation": "room", "text": text}
    ).encode()
    return body, {
        **sign_webhook(SECRET, body, timestamp=int(time.time())),
        "content-type": "application/json",
    }


async def _until_not_ready(client: httpx.AsyncClient) -> httpx.Response:
    with anyio.fail_after(10):
        for _ in range(1_000):
            ready = await client.get("/readyz")
            if ready.status_code == 503:
                return ready
            await anyio.sleep(0.02)
    raise AssertionError("readiness never went 503")


def _rows(database: Path) -> tuple[list[str], list[str]]:
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        inbox = [r[0] for r in db.execute("SELECT state FROM inbox")]
        turns = [r[0] for r in db.execute("SELECT status FROM turns")]
    return inbox, turns


async def test_sigterm_refuses_new_work_drains_the_turn_and_exits_0(tmp_path: Path) -> None:
    async with gated_model() as model, hostkit_serve(tmp_path, model) as serving:
        async with httpx.AsyncClient(base_url=serving.url, timeout=10) as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            body, headers = _signed("evt-1", "hello")
            accepted = await client.post("/channels/hooks", content=body, headers=headers)
            assert accepted.status_code == 200, accepted.text
            with anyio.fail_after(30):
                await model.entered.wait()
            serving.process.send_signal(signal.SIGTERM)
            draining = await _until_not_ready(client)
            assert draining.json()["status"] == "not ready"
            assert (await client.get("/healthz")).status_code == 200
            body, headers = _signed("evt-2", "too late")
            refused = await client.post("/channels/hooks", content=body, headers=headers)
            assert refused.status_code == 503
            model.release.set()
        with anyio.fail_after(30):
            code = await serving.process.wait()
    assert code == 0, "".join(serving.stderr)[-2_000:]
    inbox, turns = await anyio.to_thread.run_sync(_rows, tmp_path / "state" / "hostkit.db")
    # The turn in flight finished and its inbound is completed; the late one never got in.
    assert inbox == ["completed"]
    assert turns == ["completed"]
    logs = "".join(serving.stderr)
    assert "no [channels] are configured" not in logs
    records = [json.loads(line) for line in logs.splitlines() if line.strip()]
    assert {"ts", "level", "logger", "msg", "fields"} <= set(records[0])
    assert any(r["msg"] == "shutdown requested (SIGTERM received), deadline 30.0s" for r in records)
    assert SECRET not in logs


async def test_a_second_sigterm_exits_at_once(tmp_path: Path) -> None:
    async with gated_model() as model, hostkit_serve(tmp_path, model) as serving:
        async with httpx.AsyncClient(base_url=serving.url, timeout=10) as client:
            body, headers = _signed("evt-1", "hello")
            assert (
                await client.post("/channels/hooks", content=body, headers=headers)
            ).status_code == 200
            with anyio.fail_after(30):
                await model.entered.wait()
            serving.process.send_signal(signal.SIGTERM)
            await _until_not_ready(client)
        # The turn is still held by the model: only the second signal can end the process.
        serving.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            code = await serving.process.wait()
        assert not model.release.is_set()
    assert code == 128 + signal.SIGTERM
    assert "second SIGTERM: exiting at once without draining" in "".join(serving.stderr)


async def test_serving_no_channel_says_once_that_nothing_can_arrive(tmp_path: Path) -> None:
    """Health and readiness answer, so the daemon looks fine: one log record says no
    message can arrive; a daemon with a channel says nothing of the kind."""
    without = CONFIG.split("[channels.hooks]", 1)[0] + "[serve]\nport = 0\n"
    await anyio.Path(tmp_path / "hostkit.toml").write_text(without.format(model_url="http://x"))
    argv = [sys.executable, "-m", "hostkit", "serve", "--log-format", "json"]
    env = {**os.environ, "GATED_KEY": "sk-test-gated"}
    async with await anyio.open_process(
        argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        said = b""
        try:
            with anyio.fail_after(60):
                while b"no [channels] are configured" not in said:
                    said += await process.stderr.receive()
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
    (record,) = [json.loads(line) for line in said.decode().splitlines() if "channels" in line]
    assert record["level"] == "warning"
    assert record["logger"] == "hostkit.serve"  # a public name, as docs/service.md lists
    assert "no message can arrive" in record["msg"]


# The line a first signal while the Host opens prints, once.
UNOPENED = (
    "interrupted while the Host was opening (its database busy or being upgraded): "
    "nothing was served"
)
# From the signal to the exit: 3 s of lock waits; without the stop, the opening waits the
# store's whole lock timeout (30 s) and ``docker stop`` kills it after 10 s.
OPENING_BOUND_S = 10.0


def _schema(database: Path) -> tuple[int, list[str]]:
    """The database's schema version and its turns' states (none before the schema has
    its turns)."""
    with closing(sqlite3.connect(database)) as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        turns = [r[0] for r in db.execute("SELECT status FROM turns")] if "turns" in tables else []
    return version, turns


@pytest.mark.parametrize(
    ("version", "signals", "status"),
    [
        (1, [signal.SIGTERM], 0),
        (SCHEMA_VERSION, [signal.SIGTERM], 0),
        (SCHEMA_VERSION, [signal.SIGINT], 0),
        (SCHEMA_VERSION, [signal.SIGHUP, signal.SIGTERM], 0),
        (SCHEMA_VERSION, [signal.SIGTERM, signal.SIGTERM], 128 + signal.SIGTERM),
    ],
    ids=["upgrade-term", "recovery-term", "recovery-int", "hup-then-term", "second-term"],
)
async def test_a_signal_while_the_host_opens_under_another_processs_lock_ends_the_opening(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: int,
    signals: list[signal.Signals],
    status: int,
) -> None:
    """``docker stop`` or ``systemctl stop`` while ``serve``'s Host waits for another
    process's write lock (its upgrade of an older database, its recovery of a current
    one) ends it within seconds, not after the store's 30 s lock timeout: one line, exit
    0 (a stop asked for, nothing to drain), nothing served or written. SIGHUP while it
    opens is ignored (the configuration is being read anyway); a second signal exits at
    once with 128 + its number."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        CONFIG.format(model_url="http://127.0.0.1:9")
    )
    database = tmp_path / "state" / "hostkit.db"
    await anyio.Path(database.parent).mkdir()
    await (await RuntimeStore.open(database, migrations=MIGRATIONS[:version])).aclose()
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    async with lock_held_elsewhere(database):
        stopped = await signal_hostkit(
            ["serve", "-c", "hostkit.toml"], tmp_path, host_opening(tmp_path, database), signals
        )
    assert stopped.code == status, stopped
    assert stopped.took < OPENING_BOUND_S, stopped.took
    assert LISTENING not in stopped.out
    assert "Traceback" not in stopped.err
    if status == 0:
        assert stopped.err.count(UNOPENED) == 1, stopped.err
    else:
        assert "second SIGTERM: exiting at once" in stopped.err, stopped.err
    # Not upgraded, nothing recovered or accepted: the file is as it was.
    assert await anyio.to_thread.run_sync(_schema, database) == (version, [])
