"""LISTEN for new inbounds, so an idle inbox worker wakes on NOTIFY instead of its poll.

A trigger notifies the inbox channel when an inbound becomes ready (accepted,
released, retried, requeued), in any process on any machine. ``listen`` runs
in the worker's own task group for as long as the worker serves, and calls
``wake`` at each notification. It is an optimisation, never a requirement:
while its connection is down it reconnects with backoff, and the worker keeps
finding work by polling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import psycopg

from hostkit.store._pg_connection import CLIENT_KEEPALIVES

__all__ = ["listen"]

_RECONNECT_MAX_S = 5.0


async def listen(
    url: str, channel: str, wake: Callable[[], None], *, connect_timeout_s: float
) -> None:
    """Call ``wake()`` at each NOTIFY on ``channel`` and after each reconnect; until cancelled."""
    delay = 0.1
    while True:
        try:
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                connect_timeout=max(1, int(connect_timeout_s)),
                application_name="hostkit-listen",
                # A silently dropped connection (a NAT timeout, a partition) is noticed
                # and reopened.
                **CLIENT_KEEPALIVES,
            )
            async with conn:
                await conn.execute(f"LISTEN {channel}")
                delay = 0.1
                # Anything that became ready while this connection was down: look once.
                wake()
                async for _ in conn.notifies():
                    wake()
        except psycopg.Error:
            pass
        await anyio.sleep(delay)
        delay = min(delay * 2, _RECONNECT_MAX_S)
