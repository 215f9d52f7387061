"""Work a widget's clicks start, run as tasks on the loop the widget was built on.

Button callbacks arrive on whatever thread delivers the kernel's comm
messages; the Host's stores and seams live on the kernel's event loop. A
widget built in a cell keeps that loop and hands each click's coroutine to
it thread-safely; ``join()`` lets a test (or a cell) wait for what the clicks
started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from hostkit.errors import UserError

__all__ = ["LoopWork"]


class LoopWork:
    """The running loop at construction and the tasks scheduled on it."""

    def __init__(self, widget: str) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError as exc:
            raise UserError(
                f"{widget} must be built on a running event loop (in a notebook cell or async code)"
            ) from exc
        self._tasks: set[asyncio.Task[Any]] = set()

    def schedule(self, work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``work()`` as a task on the widget's loop (callable from any thread)."""

        def start() -> None:
            task = self.loop.create_task(work())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.loop.call_soon_threadsafe(start)

    async def join(self) -> None:
        """Wait for every task scheduled so far, and for those they scheduled in turn."""
        await asyncio.sleep(0)  # let work scheduled with call_soon_threadsafe start
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.sleep(0)
