"""EventBus: the Host's observer, fanning turn events out to subscribers (CLI, notebook)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hostkit.turns import Observer, TurnEvent, listening, notify_observer

__all__ = ["EventBus"]


class EventBus:
    """An Observer that forwards events to bounded subscriber streams and other observers.

    Events are projections of committed rows: a slow subscriber loses events
    (its buffer is bounded) rather than slowing a turn down.
    """

    def __init__(self, *, forward: Sequence[Observer] = (), buffer: int = 1024) -> None:
        self._forward = tuple(forward)
        self._buffer = buffer
        self._subscribers: list[
            tuple[Callable[[TurnEvent], bool], MemoryObjectSendStream[TurnEvent]]
        ] = []

    @property
    def listening(self) -> bool:
        """Whether an event now would reach anyone (a subscriber or the forward)."""
        return bool(self._subscribers) or any(listening(observer) for observer in self._forward)

    def notify(self, event: TurnEvent) -> None:
        for accepts, stream in list(self._subscribers):
            if accepts(event):
                try:
                    stream.send_nowait(event)
                except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    continue
        for observer in self._forward:
            # One observer that raises must not keep the event from the next.
            notify_observer(observer, event)

    @asynccontextmanager
    async def subscribe(
        self, accepts: Callable[[TurnEvent], bool] = lambda event: True
    ) -> AsyncIterator[MemoryObjectReceiveStream[TurnEvent]]:
        """``async with bus.subscribe(filter) as events: async for event in events: ...``"""
        send, receive = anyio.create_memory_object_stream[TurnEvent](self._buffer)
        entry = (accepts, send)
        self._subscribers.append(entry)
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.remove(entry)
            await send.aclose()
