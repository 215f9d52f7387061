"""The kernel's interrupt stops the turns the interrupted cell started.

An interrupt reaches the running cell as ``KeyboardInterrupt`` (synchronous
code) or as a cancellation of the cell's coroutine (ipykernel 6.29 and 7.x
cancel an awaiting cell on SIGINT); IPython records it as the cell's
``error_in_exec``, or as ``error_before_exec`` when it lands between two of
the cell's top-level statements (IPython runs and compiles them one at a
time), and then runs the ``post_run_cell`` hooks. Each
TurnView records the cell it was started in, and that hook cancels, through
their tokens, the unfinished turns of the interrupted cell. Turns started by
earlier cells, and an interrupt of an idle kernel, are left alone.

A cell is named by IPython's ``ExecutionInfo`` (from ``pre_run_cell``), not
by its execution count: IPython versions differ on when the count moves.
The cell that registers the hooks (``hn.start()`` or the first ``%%agent``)
missed its own ``pre_run_cell``; it is named by a marker until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["running_cell", "watch_interrupts"]

_HOOKS_ATTR = "_hostkit_interrupt_hooks"


class _Cancellable(Protocol):
    cell: object | None

    @property
    def done(self) -> bool: ...

    def cancel_soon(self) -> None: ...


class _Cells:
    """Which cell runs now: set before each cell, cleared after it."""

    current: object | None = None


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the notebook extra
        return None
    return get_ipython()


def running_cell() -> object | None:
    """The cell running now (None outside IPython or before the hooks are registered)."""
    return _Cells.current


def interrupted(result: Any) -> bool:
    """The cell ended by the kernel's interrupt (either way ipykernel delivers it)."""
    errors = (getattr(result, "error_in_exec", None), getattr(result, "error_before_exec", None))
    return any(isinstance(error, KeyboardInterrupt | asyncio.CancelledError) for error in errors)


def watch_interrupts(views: Callable[[], Iterable[_Cancellable]]) -> None:
    """Register the cell hooks (once per shell; a later call replaces the view source)."""
    shell = _shell()
    if shell is None or not hasattr(shell, "events"):
        return

    def before_cell(info: Any) -> None:
        _Cells.current = info

    def after_cell(result: Any) -> None:
        cell, _Cells.current = _Cells.current, None
        if cell is None or not interrupted(result):
            return
        for view in list(views()):
            if view.cell is cell and not view.done:
                view.cancel_soon()

    previous = getattr(shell, _HOOKS_ATTR, None)
    if previous is None:
        # This very cell's pre_run_cell has passed: name it by a marker until it ends.
        _Cells.current = object()
    else:
        for event, hook in previous:
            with contextlib.suppress(ValueError):
                shell.events.unregister(event, hook)
    hooks = (("pre_run_cell", before_cell), ("post_run_cell", after_cell))
    for event, hook in hooks:
        shell.events.register(event, hook)
    setattr(shell, _HOOKS_ATTR, hooks)
