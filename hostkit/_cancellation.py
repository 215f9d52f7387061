"""What counts as a cancellation, and finishing work that a cancellation must not cut.

``anyio.CancelScope(shield=True)`` stops anyio's own cancel scopes, not
asyncio's ``Task.cancel()``: ``asyncio.wait_for``, ``asyncio.timeout``, a
``TaskGroup`` whose sibling failed and Ctrl-C under ``asyncio.run`` all
cancel the task natively, and the ``CancelledError`` lands inside the
shield. A commit or a release an embedder's task awaits (a turn's
admission, its end, a claim given back) runs through ``finished`` or
``uninterrupted`` instead: in a task of its own that the caller's
cancellation cannot reach, the cancellation delivered to the caller once
the work is done.

A ``CancelledError`` is a cancellation only when the task is being
cancelled: adapters and embedder code (a provider, an approver, a tool, a
slot) may raise one of their own, which is their failure, not a reason to
stop without a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio

__all__ = ["finished", "is_cancellation", "uninterrupted"]

T = TypeVar("T")


def is_cancellation(exc: BaseException) -> bool:
    """True for cancellation of the running task, which must propagate, never be a result.

    The exception's type is not enough: embedder code can raise ``CancelledError``
    (alone or in a group) itself, with any message. It is real only when the task
    is being cancelled; anyio's cancel scopes (a turn's cancel, a deadline) cancel
    through ``Task.cancel()``, so they count too.
    """
    cancelled = anyio.get_cancelled_exc_class()
    if not isinstance(exc, cancelled) and not (
        isinstance(exc, BaseExceptionGroup) and exc.split(cancelled)[0] is not None
    ):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio: the backend's own class is trusted
        return True
    return task is None or task.cancelling() > 0


async def finished(work: Awaitable[T]) -> tuple[T, BaseException | None]:
    """``work``'s result, and the cancellation the caller received while it ran (None if none).

    The cancellation is returned, not raised: the caller records what it must
    (a turn admitted meanwhile ends ``cancelled``), then raises it. Its request
    count is left as is (nothing is uncancelled), so ``asyncio.timeout`` and
    anyio's scopes still recognise it as theirs when it reaches them. Should
    ``work`` fail as well, the cancellation is raised instead of its failure.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work, loop=loop)
    caught: BaseException | None = None
    try:
        await _ended(loop, task)
    except asyncio.CancelledError as exc:
        caught = exc
        # From now on anyio's scopes, which retry every loop iteration, are kept out too.
        with anyio.CancelScope(shield=True):
            while not task.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await _ended(loop, task)
    if caught is not None and (task.cancelled() or task.exception() is not None):
        raise caught
    return task.result(), caught


async def uninterrupted(work: Awaitable[T]) -> T:
    """``work``'s result once it finished; a cancellation that came meanwhile is raised then."""
    value, caught = await finished(work)
    if caught is not None:
        raise caught
    return value


async def _ended(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
    """Until ``task`` is done; cancelling this wait leaves ``task`` running."""
    if task.done():
        return
    woken = loop.create_future()
    task.add_done_callback(functools.partial(_wake, woken))
    await woken


def _wake(woken: asyncio.Future[None], _: object) -> None:
    if not woken.done():
        woken.set_result(None)
