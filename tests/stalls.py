"""How long the event loop went without running while some work ran.

Tests that guard the loop against a hostile peer's input (parsing and judging
MiBs, a catastrophic pattern) measure it here, so that what they count is that
work, not the test process's history or a busy machine.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["longest_stall"]


async def longest_stall(work: Awaitable[None]) -> float:
    """The most this process computed in one stretch while ``work`` ran and the event loop
    went without running a 10 ms ticker.

    Each gap between ticks counts the process's CPU time (every thread's), at most the
    gap's length: the loop's own work counts, and so does a worker's holding the GIL (a
    parse in pydantic-core holds it throughout, stalling the loop as long); the time a
    busy shared machine gives other processes does not. A wall-clock gap counts that
    too, and an idle gap measured before subtracts it badly: a full run's noise comes in
    bursts, and a page's parse stretched by it once read as a 0.5 s stall. A loop
    blocked without computing (a sleep) is not counted: what is guarded against is work.
    """
    ticks: list[tuple[float, float]] = []

    def tick() -> None:
        ticks.append((time.monotonic(), time.process_time()))

    async def ticker() -> None:
        while True:
            await anyio.sleep(0.01)
            tick()

    with _settled_heap():
        tick()
        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            await work
            tick()
            group.cancel_scope.cancel()
    return max(min(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(ticks))


@contextmanager
def _settled_heap() -> Iterator[None]:
    """The objects alive before the work, out of the collector's scans while it runs.

    A test worker of the full run holds millions of objects that earlier tests left;
    a MiB message parsed into some hundred thousand more starts a full collection that
    walks them all, holding the loop 0.3 to 1 s (seen: 1.07 s) for garbage that is not
    the work's. A long-lived ``hostkit serve`` freezes its heap once it listens for the
    same reason (``hostkit/cli/_serve.py`` ``settle_heap``). Frozen without a collection
    first (that one would walk them all too, for each test): their garbage waits for
    the unfreeze.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
