"""The inbox adapters the ChannelInbox contract suite runs against, behind one fixture shape.

Every ``test_clause_inbox_*`` test takes an adapter name from ``ADAPTERS``
and opens ``open_inbox(name, tmp_path, **ChannelInbox options)``; nothing
else in a test knows which adapter it runs on. The clock is a
``ManualClock`` (moved by the test, never slept on) unless a test passes its
own. "sqlite" and "postgres" are ``ChannelInbox.on_store`` over a fresh
RuntimeStore of that adapter (``_store_adapters.open_store``).

Operator scopes: ``requeue`` needs a scope the inbox verifies. The SQL
inboxes verify against their own store (``ChannelInbox.on_store``). The
in-memory inbox has no store of its own, and on its own only checks that
the scope's authority is ``operator``; here it is given the ``verify_scope``
of a real store whose AuthorityResolver issues the suite's operator scope, so
a forged or foreign scope is refused on both adapters alike.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostkit.authority import AuthorityResolver
from hostkit.inbox import ChannelInbox
from hostkit.inbox._memory import MemoryInboxStore
from hostkit.store import InboxStore
from hostkit.types import InboundEnvelope, PrincipalScope, SourceCheckpoint
from tests.contract._store_adapters import open_store

__all__ = [
    "ADAPTERS",
    "InboxUnderTest",
    "ManualClock",
    "envelope",
    "open_inbox",
]

ADAPTERS = ("memory", "sqlite", "postgres")
# A start far from zero, so "now minus a retention period" stays a plausible time.
_START = 1_700_000_000.0

# (inbound id, actor, reason) of every requeue, oldest first.
AuditRows = tuple[tuple[str, str, str], ...]


class ManualClock:
    """Wall-clock seconds that move only when a test says so."""

    def __init__(self, start: float = _START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class InboxUnderTest:
    """A fresh inbox on adapter ``name``, its clock, an operator scope and adapter hooks."""

    name: str
    inbox: ChannelInbox
    # The raw adapter under ``inbox`` (for the argument checks ChannelInbox also makes).
    store: InboxStore
    clock: ManualClock
    operator: PrincipalScope
    # Another ChannelInbox (another worker) over the same rows and clock.
    another: Callable[..., ChannelInbox]
    requeue_audit: Callable[[], Awaitable[AuditRows]]


def envelope(
    key: str,
    channel: str = "telegram.support",
    *,
    payload: str = "hello",
    conversation: str | None = None,
    checkpoint: SourceCheckpoint | None = None,
    **fields: Any,
) -> InboundEnvelope:
    """An authenticated test event with platform event key ``key``, alone in its
    conversation unless ``conversation`` names one (a conversation's inbounds are
    claimed one at a time)."""
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=key,
        conversation_key=conversation or f"chat-{key}",
        principal_key=fields.pop("principal_key", "user-1"),
        authenticated_by=fields.pop("authenticated_by", "bot_token"),
        received_at=fields.pop("received_at", _START),
        payload=payload,
        source_checkpoint=checkpoint,
        **fields,
    )


@asynccontextmanager
async def open_inbox(name: str, tmp_path: Path, **options: Any) -> AsyncIterator[InboxUnderTest]:
    """A fresh, empty inbox of adapter ``name`` with ``options`` for ``ChannelInbox``."""
    clock = options.pop("clock", None) or ManualClock()
    options.setdefault("owner", "worker.a")
    options.setdefault("rng", random.Random(15))
    if name not in ADAPTERS:
        raise ValueError(f"unknown inbox adapter {name!r}")
    # The in-memory inbox borrows a SQLite store's scope check (see the docstring).
    async with (
        open_store("sqlite" if name == "memory" else name, tmp_path) as store,
        AuthorityResolver.bind(store) as authority,
    ):
        operator = await authority.operator_issuer().issue(
            "ops", reason="inbox contract suite: requeue dead letters"
        )
        if name != "memory":

            def another(**more: Any) -> ChannelInbox:
                return ChannelInbox.on_store(store, clock=clock, **more)

            async def audit() -> AuditRows:
                rows = await store.read_audit(operator, kind="inbox.requeue", limit=500)
                return tuple(
                    (str(row.detail["inbound_id"]), str(row.principal_id), str(row.reason))
                    for row in rows
                )

            inbox = another(**options)
            yield InboxUnderTest(name, inbox, store.inbox, clock, operator, another, audit)
            return
        memory = MemoryInboxStore()

        def another_in_memory(**more: Any) -> ChannelInbox:
            return ChannelInbox(memory, clock=clock, verify_scope=store.verify_scope, **more)

        async def memory_audit() -> AuditRows:
            return tuple((row.inbound_id, row.actor, row.reason) for row in memory.audit)

        inbox = another_in_memory(**options)
        yield InboxUnderTest(name, inbox, memory, clock, operator, another_in_memory, memory_audit)
