"""A channel alias's outbound adapter, sent through while its generation is held.

A send outlives any lookup: a reload that replaced the generation while the
POST was on the wire used to close the shared HTTP client under it, and the
retry posted the message a second time (Telegram has no idempotency key). So
the send, not only a turn, is a user of its generation: it holds it until
the platform answered (bounded by the send's own deadline), and the
replaced generation closes after its last send.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from hostkit.delivery import ChannelsClosing
from hostkit.errors import DeliveryRefused, TurnRejected, bounded
from hostkit.host._generation import Generation
from hostkit.types import DeliveryFailure

__all__ = ["HeldChannel"]

# What the Host hands out: the current generation, held until the block ends.
Held = Callable[[], AbstractAsyncContextManager[Generation]]


class HeldChannel:
    """``alias``'s adapter in the generation current when a send starts, held for the send."""

    def __init__(self, alias: str, held: Held) -> None:
        self._alias = alias
        self._held = held

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        async with contextlib.AsyncExitStack() as stack:
            try:
                generation = await stack.enter_async_context(self._held())
            except TurnRejected as exc:
                # Nothing was sent: the runtime releases the claim, attempt not spent.
                raise ChannelsClosing() from exc
            channel = generation.capabilities.channels.channel(self._alias)
            if channel is None:
                # A reload removed the alias since it was looked up: fail closed, as then.
                gone = f"no channel {bounded(self._alias, 80)!r} is configured"
                raise DeliveryRefused(DeliveryFailure("permanent", "no_channel", gone))
            await channel.send(route, payload, idempotency_key=idempotency_key)
