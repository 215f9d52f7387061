"""What the ``hostkit`` command does when the reader of its stdout or stderr goes away
(``hostkit --help | head -1``, ``hostkit run ... 2>&1 | head``).

Python answers a write to a pipe whose reader left with ``BrokenPipeError``, and
every layer above turns that into status 1: rich's console (``SystemExit(1)``
from whichever write found the pipe broken), click and typer (their ``EPIPE``
handler), and an interpreter that cannot flush at exit (a ``BrokenPipeError``
noted on stderr). Status 1 says "refused by a gate" here, so help, a usage error
or a promotion that moved the revision read as a refusal. Handling it once, below
all of them, covers every writer: whatever is still written goes nowhere, and the
command finishes with the status it would have had.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["survive_readers_leaving"]


class _ReaderMayLeave(io.FileIO):
    """A standard stream's file descriptor whose reader may leave: from then on what is
    written there goes to the null device and counts as written."""

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except BrokenPipeError:
            # The descriptor itself, so child processes and any other object writing to
            # it find it open too, and later writes cost no system call that fails.
            with contextlib.suppress(OSError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.fileno())
                os.close(devnull)
            return memoryview(data).nbytes


def survive_readers_leaving() -> None:
    """Put ``sys.stdout`` and ``sys.stderr`` on descriptors whose reader may leave.

    Called before anything is printed or imported that keeps a reference to either
    stream. A stream that is absent, already done, or not a file descriptor is left
    as it is (tests capturing output, an embedding application).
    """
    sys.stdout = _survivor(sys.stdout)
    sys.stderr = _survivor(sys.stderr)


def _survivor(stream: TextIO | None) -> TextIO | None:
    if not isinstance(stream, io.TextIOWrapper):
        return stream
    buffer = stream.buffer
    if isinstance(getattr(buffer, "raw", None), _ReaderMayLeave):
        return stream
    try:
        fd = stream.fileno()
        stream.flush()
    except (OSError, ValueError):
        return stream
    raw = _ReaderMayLeave(fd, "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=stream.write_through,
    )
