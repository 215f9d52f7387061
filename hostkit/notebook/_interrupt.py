"""The kernel's interrupt stops the turns the interrupted cell started.

Each TurnView records the execution count of the cell it was made in. An
interrupt reaches the running cell as ``KeyboardInterrupt`` (synchronous
code) or as a cancellation of the cell's coroutine (ipykernel 6.29 and 7.x
cancel an awaiting cell on SIGINT); either way IPython records it as the
cell's ``error_in_exec``. A ``post_run_cell`` hook then cancels, through
their tokens, the unfinished turns that cell started. Turns started by
earlier cells, and an interrupt of an idle kernel, are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["cell_count", "watch_interrupts"]

_HOOK_ATTR = "_hostkit_interrupt_hook"


class _Cancellable(Protocol):
    cell: int | None

    @property
    def done(self) -> bool: ...

    def cancel_soon(self) -> None: ...


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the notebook extra
        return None
    return get_ipython()


def cell_count() -> int | None:
    """The execution count of the cell running now (None outside IPython)."""
    shell = _shell()
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def interrupted(result: Any) -> bool:
    """The cell ended by the kernel's interrupt (either way ipykernel delivers it)."""
    error = getattr(result, "error_in_exec", None)
    return isinstance(error, KeyboardInterrupt | asyncio.CancelledError)


def watch_interrupts(views: Callable[[], Iterable[_Cancellable]]) -> None:
    """Register (once per shell; a later call replaces the view source) the post-cell hook."""
    shell = _shell()
    if shell is None or not hasattr(shell, "events"):
        return

    def after_cell(result: Any) -> None:
        if not interrupted(result):
            return
        # A cell stored in history was counted before it ran and incremented after.
        count = getattr(result, "execution_count", None)
        if count is None:
            count = shell.execution_count
        for view in list(views()):
            if view.cell == count and not view.done:
                view.cancel_soon()

    previous = getattr(shell, _HOOK_ATTR, None)
    if previous is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", previous)
    shell.events.register("post_run_cell", after_cell)
    setattr(shell, _HOOK_ATTR, after_cell)
