"""The bootstrap snapshot: project notes a session's bootstrap turns see, taken once.

Taking it once per session (and keeping it in the store) makes every later
bootstrap turn of the session see the same text, even if the files change,
so prepared contexts stay deterministic and cache-friendly.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

from hostkit.errors import InvalidValue
from hostkit.types import TurnExecutionContext, is_count, is_names

__all__ = ["DEFAULT_BOOTSTRAP_FILES", "BootstrapSnapshot", "BootstrapSource", "WorkspaceBootstrap"]

DEFAULT_BOOTSTRAP_FILES = ("AGENTS.md",)

_log = logging.getLogger("hostkit.context")


@dataclass(frozen=True, slots=True)
class BootstrapSnapshot:
    text: str
    source: str


class BootstrapSource(Protocol):
    """Produces a session's bootstrap snapshot (None: nothing to show)."""

    async def snapshot(self, context: TurnExecutionContext) -> BootstrapSnapshot | None: ...


class WorkspaceBootstrap:
    """Named files at the root of the turn's workspace, each cut to ``max_chars``.

    Only plain files directly in the workspace are read (no paths, no
    symlinks, no hard links, no FIFOs or devices), off the event loop,
    bounded in size. The file is opened without following a link and judged
    by its open descriptor: an agent swapping it for a link to a Host-side
    file between a check and the read gets nothing.
    """

    def __init__(
        self, names: Sequence[str] = DEFAULT_BOOTSTRAP_FILES, *, max_chars: int = 4_000
    ) -> None:
        # A bare string would be read as one file per character, finding none.
        if not is_names(names, limit=255, items=64):
            raise InvalidValue("WorkspaceBootstrap names must be a list of file names")
        if not is_count(max_chars, high=1_000_000):
            raise InvalidValue("WorkspaceBootstrap max_chars must be an integer from 1 to 1000000")
        self._names = tuple(name for name in names if "/" not in name and name != "..")
        self._max_chars = max_chars

    async def snapshot(self, context: TurnExecutionContext) -> BootstrapSnapshot | None:
        root = Path(context.workspace_scope)
        parts: list[str] = []
        found: list[str] = []
        for name in self._names:
            text = await anyio.to_thread.run_sync(_read_plain, root, name, self._max_chars)
            if text is not None:
                parts.append(f"## {name}\n{text}")
                found.append(name)
        if not parts:
            return None
        return BootstrapSnapshot("\n\n".join(parts), ",".join(found))


# getattr: the module imports on any OS; where a flag is missing, the check after the
# open (a regular file with one link) still stands.
_DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
# Never follows a link, never waits on a FIFO's writer.
_FILE_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
# What says "there is no such plain file" (ELOOP: a symlink, refused by O_NOFOLLOW), or
# none the Host may read (permissions do not come and go between turns).
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES, errno.EPERM})
# UTF-8 spends at most four bytes on a character.
_BYTES_PER_CHAR = 4


def _read_plain(root: Path, name: str, max_chars: int) -> str | None:
    """Blocking: the text of ``root/name`` when it is one plain file; None when there is
    none (missing, a link, a FIFO, a directory, a file with other names too). Any other
    failure (no descriptors left, an I/O error) is ``OSError``: not an
    answer to keep for the session."""
    try:
        directory = os.open(root, _DIRECTORY_FLAGS)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            _log.warning(
                "%s in the workspace is not one plain file (a FIFO, a directory, a hard "
                "link): not read into the bootstrap snapshot",
                name,
            )
            return None
        want = (max_chars + 1) * _BYTES_PER_CHAR
        chunks: list[bytes] = []
        while want > 0 and (chunk := os.read(fd, min(want, 1 << 16))):
            chunks.append(chunk)
            want -= len(chunk)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return text if len(text) <= max_chars else text[:max_chars] + "\n[truncated]"
