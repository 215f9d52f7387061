"""Which modules hostkit imports on the event loop's thread, seen from a fresh interpreter.

A first import reads and runs files for tens to hundreds of milliseconds; made on the
loop (a notebook kernel's, ``hostkit serve``'s) it stalls every session. blockbuster
lets the import system's own reads through, so it does not see them, and in a test
process an earlier test has usually imported the heavy packages already. The tests of
this defect family therefore run their Host in a fresh interpreter (``run_fresh``)
whose script wraps the Host's calls in ``imports_on_the_loop()``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

__all__ = ["imports_on_the_loop", "run_fresh"]

ROOT = Path(__file__).resolve().parent.parent
_HOSTKIT = str(ROOT / "hostkit")


class _Recorder(importlib.abc.MetaPathFinder):
    """Notes each module first imported on the main thread (the loop's, under
    ``anyio.run``) while a hostkit frame is on the stack; finds nothing itself."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: Any = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if threading.current_thread() is threading.main_thread() and _in_hostkit(sys._getframe(1)):
            self.names.append(fullname)
        return None


def _in_hostkit(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_HOSTKIT):
            return True
        frame = frame.f_back
    return False


@contextmanager
def imports_on_the_loop() -> Iterator[list[str]]:
    """The modules hostkit imported on the loop's thread inside the block (a list that
    fills as they load)."""
    recorder = _Recorder()
    sys.meta_path.insert(0, recorder)
    try:
        yield recorder.names
    finally:
        sys.meta_path.remove(recorder)


async def run_fresh(script: str, *args: str, timeout_s: float = 120.0) -> Any:
    """Run ``script`` in a fresh interpreter at the repository's root; the JSON value of
    the last line it printed. A failed script fails the test with its stderr's tail."""
    with anyio.fail_after(timeout_s):
        done = await anyio.run_process([sys.executable, "-c", script, *args], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return json.loads(done.stdout.decode().splitlines()[-1])
