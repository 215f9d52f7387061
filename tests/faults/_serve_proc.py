"""A real ``hostkit serve`` subprocess for the end-to-end and load tests.

``write_config`` writes a ``hostkit.toml`` (a scripted provider, channels
pointing at loopback fakes, ``[serve] port = 0``); ``serving`` starts
``python -m hostkit serve`` with the channel secrets in its environment only,
waits for its one "listening on" line, keeps draining its output (a full
pipe would stall it), and kills it if the test leaves it running. Database
reads go through a read-only connection in a worker thread.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx
from anyio.abc import ByteReceiveStream, Process

from hostkit.channels import sign_slack, sign_webhook

SLACK = "slack-acme"
HOOK = "hook-load"
SLACK_SECRET = "e2e-slack-signing-secret"
SLACK_TOKEN = "xoxb-e2e-bot-token"
HOOK_SECRET = "e2e-hook-signing-secret"
SECRETS = {
    "E2E_SLACK_SECRET": SLACK_SECRET,
    "E2E_SLACK_TOKEN": SLACK_TOKEN,
    "E2E_HOOK_SECRET": HOOK_SECRET,
}
LISTENING = "hostkit serve: listening on "
START_TIMEOUT_S = 30.0


def _toml(value: Any) -> str:
    """A TOML value for the small shapes these configs use (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    raise TypeError(f"no TOML for {type(value).__name__}")


def write_config(
    root: Path,
    *,
    script: Sequence[Mapping[str, Any]],
    channels: Mapping[str, Mapping[str, Any]],
    serve: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
) -> Path:
    """``root/hostkit.toml``: one scripted agent ``assistant`` answering ``channels``."""
    tables: dict[str, Mapping[str, Any]] = {
        "host": {"database": str(root / "hostkit.db"), "workspace": str(root / "ws")},
        "providers.test": {"kind": "scripted", "script": list(script)},
        "agents.assistant": {"provider": "test", "memory": False, **(agent or {})},
        **{f"channels.{name}": table for name, table in channels.items()},
        "serve": {"listen": "127.0.0.1", "port": 0, **(serve or {})},
    }
    lines: list[str] = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml(value)}" for key, value in table.items())
        lines.append("")
    path = root / "hostkit.toml"
    path.write_text("\n".join(lines))
    return path


def slack_channel(api_base: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "slack",
        "secret_env": "E2E_SLACK_SECRET",
        "token_env": "E2E_SLACK_TOKEN",
        "api_base": api_base,
        "allow": ["*"],
        **extra,
    }


def hook_channel(deliver_url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "webhook", "secret_env": "E2E_HOOK_SECRET", "deliver_url": deliver_url, **extra}


@dataclass
class Served:
    """A running ``hostkit serve``: its URL, process and the output it wrote so far."""

    url: str
    process: Process
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "".join(self.stdout) + "".join(self.stderr)

    def signal(self, number: signal.Signals) -> None:
        self.process.send_signal(number)

    async def exit_code(self, timeout_s: float) -> int:
        with anyio.fail_after(timeout_s):
            return await self.process.wait()


async def _drain(stream: ByteReceiveStream | None, into: list[str]) -> None:
    if stream is None:
        return
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        async for chunk in stream:
            into.append(chunk.decode("utf-8", "replace"))


@asynccontextmanager
async def serving(
    config: Path,
    *,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    cwd: Path | None = None,
) -> AsyncIterator[Served]:
    """``hostkit serve --config config --port 0 [args]`` (in ``cwd``), until the block ends
    (then SIGKILL if alive)."""
    argv = [sys.executable, "-m", "hostkit", "serve", "--config", str(config), "--port", "0"]
    argv += ["--log-format", "json", *args]
    environment = {**os.environ, **SECRETS, **(env or {})}
    process = await anyio.open_process(argv, env=environment, cwd=cwd)
    served = Served("", process)
    try:
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(_drain, process.stdout, served.stdout)
            pumps.start_soon(_drain, process.stderr, served.stderr)
            with anyio.fail_after(START_TIMEOUT_S):
                while LISTENING not in "".join(served.stdout):
                    if process.returncode is not None:
                        raise AssertionError(f"hostkit serve exited: {served.output()[-2000:]}")
                    await anyio.sleep(0.02)
            line = "".join(served.stdout).split(LISTENING, 1)[1]
            served.url = line.split()[0].rstrip("/")
            try:
                yield served
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.move_on_after(10, shield=True):
                    await process.wait()
                pumps.cancel_scope.cancel()
    finally:
        with suppress(ProcessLookupError):
            if process.returncode is None:
                process.kill()
        await process.aclose()


# -- platform requests ------------------------------------------------------------------


def slack_event(
    event_id: str, text: str, *, user: str = "U1", channel: str = "C1", team: str = "T1"
) -> bytes:
    return json.dumps(
        {
            "type": "event_callback",
            "team_id": team,
            "event_id": event_id,
            "event": {
                "type": "message",
                "channel": channel,
                "user": user,
                "text": text,
                "ts": f"{time.time():.6f}",
            },
        }
    ).encode()


def slack_button(
    value: str, *, trigger: str, user: str = "U1", channel: str = "C1", team: str = "T1"
) -> bytes:
    """A Slack interactivity request: a block_actions press of a button whose value is given."""
    payload = {
        "type": "block_actions",
        "trigger_id": trigger,
        "team": {"id": team},
        "user": {"id": user, "team_id": team},
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel},
        "actions": [{"type": "button", "value": value, "action_ts": f"{time.time():.6f}"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


async def post_slack(
    client: httpx.AsyncClient, url: str, body: bytes, *, retry_num: int | None = None
) -> httpx.Response:
    """A Slack Events API (JSON) or interactivity (form) request, signed like Slack does;
    retries carry X-Slack-Retry-*."""
    form = body.startswith(b"payload=")
    headers = {
        **sign_slack(SLACK_SECRET, body, timestamp=int(time.time())),
        "content-type": "application/x-www-form-urlencoded" if form else "application/json",
    }
    if retry_num is not None:
        headers["x-slack-retry-num"] = str(retry_num)
        headers["x-slack-retry-reason"] = "http_timeout"
    return await client.post(f"{url}/channels/{SLACK}", content=body, headers=headers)


def hook_event(event_id: str, text: str, *, sender: str = "s1", conversation: str = "c1") -> bytes:
    return json.dumps(
        {"event_id": event_id, "sender": sender, "conversation": conversation, "text": text}
    ).encode()


async def post_hook(client: httpx.AsyncClient, url: str, body: bytes) -> httpx.Response:
    headers = {
        **sign_webhook(HOOK_SECRET, body, timestamp=int(time.time())),
        "content-type": "application/json",
    }
    return await client.post(f"{url}/channels/{HOOK}", content=body, headers=headers)


# -- the database, read only ---------------------------------------------------------------


def _query(database: Path, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    if not database.exists():
        return []
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as conn:
        return [tuple(row) for row in conn.execute(sql, list(params)).fetchall()]


async def query(database: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return await anyio.to_thread.run_sync(_query, database, sql, params)


async def eventually(
    check: Callable[[], Awaitable[bool]], *, what: str, timeout_s: float = 20.0
) -> None:
    """Poll ``check`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.05)
