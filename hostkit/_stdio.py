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

import codecs
import contextlib
import errno
import io
import os
import stat
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["survive_readers_leaving"]


class _ReaderMayLeave(io.FileIO):
    """A standard stream's file descriptor whose reader may leave: from then on what is
    written there goes to the null device and counts as written.

    A terminal that went away (its window closed under ``hostkit serve &``:
    the kernel answers ``EIO`` on the device) is a reader that left too. Any other failure
    (a full disk) is raised once, to the writer that met it, and the
    descriptor goes to the null device too: the bytes still buffered
    above it would otherwise fail again at every flush, the interpreter's last
    one included (status 120 and a note on stderr).
    """

    def __init__(self, fd: int, mode: str, *, closefd: bool) -> None:
        super().__init__(fd, mode, closefd=closefd)
        # A character device (a terminal): once its terminal is gone, ``isatty`` says no,
        # but the descriptor still names the device.
        self._terminal = stat.S_ISCHR(os.fstat(fd).st_mode)

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except BrokenPipeError:
            self._to_null()
            return memoryview(data).nbytes
        except OSError as exc:
            self._to_null()
            if exc.errno == errno.EIO and self._terminal:
                return memoryview(data).nbytes
            raise

    def _to_null(self) -> None:
        # The descriptor itself, so child processes and any other object writing to it
        # find it open too, and later writes cost no system call that fails.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.fileno())
            os.close(devnull)


def survive_readers_leaving() -> None:
    """Put ``sys.stdout`` and ``sys.stderr`` on descriptors whose reader may leave.

    Called before anything is printed or imported that keeps a reference to either
    stream. A standard descriptor the command was started without (``>&-``) is the
    null device first: Python left its stream None (every print failed, and the
    turn with it), and the next file opened would have taken its number. A stream
    that is not a file descriptor's is left as it is (tests capturing output, an
    embedding application). Text stdout cannot encode is written escaped, never
    failing the command (stderr does so already); on a stream that writes back
    undecodable bytes (``surrogateescape``, the C locale's) those still are, and any
    other lone surrogate, which that handler refuses, is escaped.
    """
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        _open_if_closed(fd, flags)
    sys.stdout = _survivor(sys.stdout, 1, line_buffering=False)
    sys.stderr = _survivor(sys.stderr, 2, line_buffering=True)


def _open_if_closed(fd: int, flags: int) -> None:
    try:
        os.fstat(fd)
    except OSError:
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _escape_or_restore(exc: UnicodeError) -> tuple[bytes, int]:
    """``surrogateescape`` where it applies (a byte read from a file name goes out as
    that byte), ``backslashreplace`` for every other character the encoding lacks."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    written = bytearray()
    for ch in exc.object[exc.start : exc.end]:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            written.append(code - 0xDC00)
        else:
            written += ascii(ch)[1:-1].encode("ascii")
    return bytes(written), exc.end


codecs.register_error("hostkit.surrogateescape", _escape_or_restore)
# The error handler a standard stream is rewrapped with, by the one it had: none fails.
_NEVER_FAILING = {"strict": "backslashreplace", "surrogateescape": "hostkit.surrogateescape"}


def _survivor(stream: TextIO | None, fd: int, *, line_buffering: bool) -> TextIO | None:
    if stream is None:  # started without it: now the null device (``_open_if_closed``)
        raw = _ReaderMayLeave(fd, "w", closefd=False)
        return io.TextIOWrapper(
            io.BufferedWriter(raw),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=line_buffering,
        )
    if not isinstance(stream, io.TextIOWrapper):
        return stream
    buffer = stream.buffer
    if isinstance(buffer, _ReaderMayLeave) or isinstance(
        getattr(buffer, "raw", None), _ReaderMayLeave
    ):
        return stream
    try:
        fd = stream.fileno()
        stream.flush()
    except (OSError, ValueError):
        return stream
    raw = _ReaderMayLeave(fd, "w", closefd=False)
    # ``python -u`` (PYTHONUNBUFFERED, common in containers) gives the stream no buffer:
    # it stays so, or what is written would wait for 8 KiB (and be lost to a SIGKILL).
    unbuffered = not isinstance(buffer, io.BufferedWriter)
    return io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw),
        encoding=stream.encoding,
        errors=_NEVER_FAILING.get(stream.errors or "strict", stream.errors),
        line_buffering=stream.line_buffering,
        write_through=stream.write_through or unbuffered,
    )
