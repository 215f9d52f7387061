"""The ingress app on a real uvicorn server on 127.0.0.1, and channel tables for tests.

``serve_ingress`` binds a free port before uvicorn starts (requests wait in
the backlog instead of racing startup) and yields the base URL; the inbox is
whatever the test gives it (a real SQLite store in the contract tests).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn

from hostkit.channels import ingress_app
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox

__all__ = ["NOW", "SECRETS", "channels", "serve_ingress", "to_json"]

# A fixed "now" for the app's clock: signatures are made at it, replays measured from it.
NOW = 1_700_000_000
SECRETS = {
    "hooks": "hook-secret-Kq2-7f3a",
    "slack-acme": "slack-signing-Zx9-c41e",
    "tg": "tg-secret-Mn4-92bd",
}


def channels(**overrides: Mapping[str, Any]) -> dict[str, ChannelConfig]:
    """One channel of each kind (ids hooks, slack-acme, tg); ``overrides`` per id."""
    tables: dict[str, dict[str, Any]] = {
        "hooks": {"kind": "webhook", "secret_env": "HOOK_SECRET"},
        "slack-acme": {
            "kind": "slack",
            "secret_env": "SLACK_SECRET",
            "token_env": "SLACK_TOKEN",
            "allow": ["*"],
        },
        "tg": {
            "kind": "telegram",
            "secret_env": "TG_SECRET",
            "token_env": "TG_TOKEN",
            "allow": ["*"],
        },
    }
    for name, extra in overrides.items():
        tables[name.replace("_", "-")] = {**tables.get(name.replace("_", "-"), {}), **extra}
    return {name: ChannelConfig(**table) for name, table in tables.items()}


def to_json(value: Any) -> bytes:
    return json.dumps(value).encode()


@asynccontextmanager
async def serve_ingress(
    inbox: ChannelInbox,
    *,
    configs: Mapping[str, ChannelConfig] | None = None,
    secrets: Mapping[str, str] | None = None,
    clock: Callable[[], float] = lambda: float(NOW),
    **options: Any,
) -> AsyncIterator[str]:
    """Serve ``ingress_app`` on 127.0.0.1 (a free port) until the block exits; yields its URL."""
    app = ingress_app(
        configs if configs is not None else channels(),
        inbox,
        secrets=secrets if secrets is not None else SECRETS,
        clock=clock,
        **options,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5.0,
        )
    )
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [sock])
        try:
            yield url
        finally:
            server.should_exit = True
