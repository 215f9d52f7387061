"""Notice ``hostkit serve``'s event loop stalled: blocking code is running on it.

Every turn, webhook and health check shares one event loop. An async tool
that calls blocking code (``time.sleep``, a synchronous HTTP client) stops
all of them, and its ``timeout_s`` cannot fire: the timer waits for the
same loop. Such a stall used to pass in silence. The loop stamps a
heartbeat every ``HEARTBEAT_S`` (one timer: nothing per turn); a daemon
thread that finds the stamp more than ``STALL_S`` old logs one warning,
naming the loop's running task and the code it is in, and one line when the
loop runs again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hostkit.errors import bounded

__all__ = ["HEARTBEAT_S", "STALL_S", "watching_the_loop"]

STALL_S = 5.0
HEARTBEAT_S = 1.0
_WHERE_CHARS = 300
_log = logging.getLogger("hostkit.serve")


@contextmanager
def watching_the_loop(
    *, stall_s: float = STALL_S, heartbeat_s: float = HEARTBEAT_S
) -> Iterator[None]:
    """Watch the running event loop for stalls longer than ``stall_s`` while inside."""
    watch = _LoopWatch(asyncio.get_running_loop(), stall_s=stall_s, heartbeat_s=heartbeat_s)
    watch.start()
    try:
        yield
    finally:
        watch.stop()


class _LoopWatch:
    """The loop's heartbeat timer and the thread that checks it."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, stall_s: float, heartbeat_s: float
    ) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._stall_s = stall_s
        self._heartbeat_s = heartbeat_s
        self._beat = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hostkit-loop-watch", daemon=True)

    def start(self) -> None:
        self._stamp()
        self._thread.start()

    def stop(self) -> None:
        # Not joined (that would wait on the loop): the thread sees ``_done`` at its next check.
        self._done.set()
        if self._timer is not None:
            self._timer.cancel()

    def _stamp(self) -> None:
        self._beat = time.monotonic()
        self._timer = self._loop.call_later(self._heartbeat_s, self._stamp)

    def _watch(self) -> None:
        stalled: float | None = None  # the last heartbeat before the stall said
        while not self._done.wait(min(self._heartbeat_s, self._stall_s) / 2):
            beat = self._beat
            if stalled is None:
                # A beat is due every heartbeat_s: only the time past that is a stall.
                late = time.monotonic() - beat - self._heartbeat_s
                if late >= self._stall_s:
                    _log.warning(
                        "event loop blocked for %.0f s%s: nothing else is served meanwhile "
                        "and tool timeouts cannot fire; blocking code must not run on the "
                        "loop (docs/effects.md: anyio.to_thread.run_sync)",
                        late,
                        self._where(),
                    )
                    stalled = beat
            elif beat != stalled:
                _log.info(
                    "event loop runs again after %.0f s blocked",
                    beat - stalled - self._heartbeat_s,
                )
                stalled = None

    def _where(self) -> str:
        """`` in task T at f (file:line)``: what the loop's thread is running, best effort."""
        parts = []
        try:
            task = asyncio.current_task(self._loop)
        except RuntimeError:
            task = None
        if task is not None:
            parts.append(f"task {task.get_name()!r}")
        frame = sys._current_frames().get(self._loop_thread)
        if frame is not None:
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)
            parts.append(f"at {name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
        return bounded(" in " + ", ".join(parts), _WHERE_CHARS) if parts else ""
