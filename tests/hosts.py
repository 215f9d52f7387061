"""Test Hosts: a real Host on a real SQLite file, with scripted models and test sources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from hostkit.effects import AuthoredTool
from hostkit.host import Host, HostConfig, RuntimeCapabilities, parse_config
from hostkit.providers import ModelProvider
from hostkit.testing import capabilities
from hostkit.types import ConversationFacts, TurnRequest, new_id


def config(
    tmp_path: Path,
    *,
    agents: Sequence[str] = ("assistant",),
    policy: Mapping[str, Any] | None = None,
    max_steps: int = 8,
    memory: bool = False,
    secrets: Sequence[str] = (),
) -> HostConfig:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                name: {
                    "provider": "test",
                    "policy": dict(policy or {"allow": ["*"]}),
                    "max_steps": max_steps,
                    "memory": memory,
                    **({"secrets": list(secrets)} if secrets else {}),
                }
                for name in agents
            },
        },
        base_dir=tmp_path,
    )


async def child_store_url(tmp_path: Path, store_adapter: str) -> str:
    """The ``[store] url`` of a child Host process sharing this test's store (``config``'s
    ``tmp_path / "hostkit.db"``): "" on the sqlite leg, where the child opens that file,
    else the PostgreSQL database this process's ``RuntimeStore.open`` of the file opens
    (the password comes from ``PGPASSWORD``, which the child inherits)."""
    if store_adapter != "postgres":
        return ""
    from tests.postgres import active_cluster

    return await active_cluster().database_for(tmp_path / "hostkit.db")


@asynccontextmanager
async def open_host(
    tmp_path: Path,
    provider: ModelProvider | Mapping[str, ModelProvider],
    *,
    tools: Sequence[AuthoredTool] = (),
    caps: RuntimeCapabilities | None = None,
    **options: Any,
) -> AsyncIterator[Host]:
    async with Host.open(
        config(tmp_path, **options), capabilities=caps or capabilities(provider, tools=tools)
    ) as host:
        yield host


def request(
    text: str = "hello",
    *,
    conversation: str = "c1",
    principal: str = "alice",
    request_id: str | None = None,
    **fields: Any,
) -> TurnRequest:
    return TurnRequest(
        input=text,
        principal=ConversationFacts(
            channel="test", conversation_key=conversation, principal_key=principal
        ),
        request_id=request_id or new_id("req"),
        **fields,
    )


async def event_kinds(host: Host, turn_id: str) -> list[str]:
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT kind FROM turn_events WHERE turn_id = ? ORDER BY seq", [turn_id]
        ).fetchall()
    )
    return [row[0] for row in rows]


async def turn_rows(host: Host) -> list[tuple[str, str]]:
    return await host.store.read(
        lambda c: c.execute("SELECT turn_id, status FROM turns ORDER BY id").fetchall()
    )
