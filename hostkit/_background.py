"""One idiom for serving in the background: ``async with worker:`` runs ``worker.run()``.

The inbox worker, the delivery runtime and the Host's daemon each serve in
``run(task_status=...)`` until asked to stop. Entering one starts ``run`` in
a task group of its own and returns once it has started (a failure to start
is raised there); leaving the block asks it to stop and waits for it to wind
down, so nothing it held outlives the block.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup, TaskStatus

__all__ = ["Background"]


class Background(ABC):
    """``run`` in the background for the length of an ``async with`` block."""

    _group: TaskGroup | None = None

    @abstractmethod
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> Any:
        """Serve until asked to stop; call ``task_status.started()`` once serving."""

    @abstractmethod
    def _end_background(self) -> None:
        """Ask ``run`` to wind down: the ``async with`` block has ended."""

    async def __aenter__(self) -> Self:
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            await group.start(self.run)
        except BaseException as exc:
            await group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        group, self._group = self._group, None
        if group is None:
            return None
        self._end_background()
        return await group.__aexit__(exc_type, exc, traceback)
