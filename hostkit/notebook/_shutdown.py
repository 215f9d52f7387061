"""The kernel's shutdown (a restart, or Shut Down) closes the notebook's live widgets first.

A restart ends the process under the loop: no task runs again, and a row
still offering Approve would do nothing when clicked. The kernel's own
``do_shutdown`` runs first (on the control thread in ipykernel 7), while
its iopub still carries widget updates to the page; the hook runs there,
and at interpreter exit as a fallback (a kernel killed without a shutdown
request runs neither).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

__all__ = ["watch_shutdown"]

_HOOK_ATTR = "_hostkit_shutdown_hook"


def _kernel() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the notebook extra
        return None
    return getattr(get_ipython(), "kernel", None)


def watch_shutdown(hook: Callable[[], None]) -> None:
    """Run ``hook`` when the kernel is asked to shut down (once per kernel; a later call
    replaces the hook). Outside a kernel, nothing."""
    kernel = _kernel()
    if kernel is None or not hasattr(kernel, "do_shutdown"):
        return
    wrapped = getattr(kernel, _HOOK_ATTR, None) is not None
    setattr(kernel, _HOOK_ATTR, hook)
    if wrapped:
        return
    original = kernel.do_shutdown

    def do_shutdown(restart: bool) -> Any:
        with contextlib.suppress(Exception):  # the kernel must shut down whatever happens
            getattr(kernel, _HOOK_ATTR)()
        return original(restart)

    kernel.do_shutdown = do_shutdown
