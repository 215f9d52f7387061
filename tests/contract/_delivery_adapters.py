"""The delivery-store adapters the ``test_clause_delivery_store_*`` suite runs against.

Every test takes an adapter name from ``ADAPTERS`` and opens
``open_delivery(name, tmp_path)``; nothing else in a test knows which adapter
it runs on. Outbox rows are created the only way production creates them: a
real turn admitted and finished through ``store.turns`` with a captured route.
Each adapter is a fresh RuntimeStore from ``_store_adapters.open_store``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from hostkit.authority import AuthorityResolver
from hostkit.store import Admitted, DeliveryStore, LeaseOwner, RuntimeStore, TurnAdmission
from hostkit.types import PrincipalScope, TurnResult, new_id
from tests.contract._store_adapters import open_store

__all__ = [
    "ADAPTERS",
    "ROUTE",
    "DeliveryUnderTest",
    "finish_routed_turns",
    "finish_turn",
    "open_delivery",
]

ADAPTERS = ("sqlite", "postgres")
ROUTE: Mapping[str, Any] = {
    "channel": "slack.main",
    "conversation": "T1:C1:U1",
    "reply": {"channel": "C1", "thread_ts": "1.5"},
}

# (intent id, actor, reason) of every retry, oldest first.
AuditRows = tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class DeliveryUnderTest:
    """A fresh store of adapter ``name``: its delivery group, an operator scope, hooks."""

    name: str
    store: RuntimeStore
    delivery: DeliveryStore
    operator: PrincipalScope
    # Finish ``n`` routed turns one after another; their intent ids, oldest first.
    seed: Callable[..., Awaitable[tuple[str, ...]]]
    retry_audit: Callable[[], Awaitable[AuditRows]]

    def later(self, seconds: float = 0.0) -> float:
        """A wall-clock time past every seeded intent's due time (they are due at creation)."""
        return time.time() + 1.0 + seconds


async def finish_turn(
    store: RuntimeStore,
    session_id: str,
    *,
    text: str = "the answer",
    route: Mapping[str, Any] | None = None,
    owner: LeaseOwner | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Admit and finish one completed turn in ``session_id``: its id and its intents."""
    if owner is None:
        owner = await anyio.to_thread.run_sync(LeaseOwner.current, "delivery-suite")
    admitted = await store.turns.admit(
        TurnAdmission(
            turn_id=new_id("turn"),
            request_id=new_id("req"),
            principal_id="suite",
            core_id="assistant",
            core_revision="rev",
            generation=1,
            session=session_id,
            trace_id=new_id("trace"),
        ),
        owner=owner,
        ttl_s=600.0,
    )
    assert isinstance(admitted, Admitted), admitted
    lease = admitted.lease
    result = TurnResult(
        request_id="req",
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        core_id="assistant",
        core_revision="rev",
        outcome="completed",
        text=text,
        durable_result_ref=lease.turn_id,
        generation=1,
    )
    done = await store.turns.finish(lease, result, event_seq=2, route=route)
    return lease.turn_id, done.deliveries


async def finish_routed_turns(
    store: RuntimeStore,
    n: int,
    *,
    route: Mapping[str, Any] | None = ROUTE,
    text: str = "the answer",
    concurrent: bool = False,
    session: str | None = None,
) -> tuple[str, ...]:
    """Admit and finish ``n`` turns (each in its own system session, or all in
    ``session``) with ``route``.

    ``concurrent`` runs them at once (the writer groups their commits); the ids
    are returned in creation order either way.
    """
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "delivery-suite")
    ids: list[tuple[int, tuple[str, ...]]] = []

    async def one(index: int) -> None:
        session_id = session or await store.create_session(
            owner_kind="system", principal_id="suite"
        )
        _turn, made = await finish_turn(
            store, session_id, text=f"{text} {index}", route=route, owner=owner
        )
        ids.append((index, made))

    if concurrent:
        async with anyio.create_task_group() as group:
            for index in range(n):
                group.start_soon(one, index)
    else:
        for index in range(n):
            await one(index)
    return tuple(intent for _, made in sorted(ids) for intent in made)


@asynccontextmanager
async def open_delivery(name: str, tmp_path: Path) -> AsyncIterator[DeliveryUnderTest]:
    """A fresh, empty store of adapter ``name``."""
    if name not in ADAPTERS:
        raise ValueError(f"unknown delivery adapter {name!r}")
    async with (
        open_store(name, tmp_path) as store,
        AuthorityResolver.bind(store) as authority,
    ):
        operator = await authority.operator_issuer().issue(
            "ops", reason="delivery contract suite: read the retry audit"
        )

        async def seed(n: int = 1, **options: Any) -> tuple[str, ...]:
            return await finish_routed_turns(store, n, **options)

        async def audit() -> AuditRows:
            rows = await store.read_audit(operator, kind="delivery.retry", limit=500)
            return tuple(
                (str(row.detail["intent_id"]), str(row.principal_id), str(row.reason))
                for row in rows
            )

        yield DeliveryUnderTest(name, store, store.delivery, operator, seed, audit)
