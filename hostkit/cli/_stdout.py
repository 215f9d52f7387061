"""What the CLI does when the reader of its stdout goes away (``hostkit run ... | head -1``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console

__all__ = ["ReaderMayLeave", "StdoutConsole", "stdout_gone"]


def stdout_gone() -> None:
    """What is still written to stdout goes nowhere, and the command finishes as it would
    have: a turn is not cut off by its reader leaving, and no traceback is printed."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class ReaderMayLeave:
    """``out`` for a turn's streamed answer: once its reader left (the broken pipe may
    surface at any later write or flush, not the one that lost it), nothing more is
    written and the turn goes on."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.left = False

    def write(self, text: str) -> None:
        self._try(lambda: self._out.write(text))

    def flush(self) -> None:
        self._try(self._out.flush)

    def _try(self, step: Callable[[], object]) -> None:
        if self.left:
            return
        try:
            step()
        except BrokenPipeError:
            self.left = True
            stdout_gone()


class StdoutConsole(Console):
    """The console a command prints its output to (stdout).

    Rich's own answer to a reader that left (``| head -1``) is ``SystemExit(1)`` from
    whichever write found the pipe broken, so a ``core promote`` that moved the revision
    would say it was refused. Here the rest of the output goes nowhere and the command
    finishes with the status it would have had.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stdout_gone()
