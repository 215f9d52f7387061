"""The bootstrap snapshot: project notes a session's bootstrap turns see, taken once.

Taking it once per session (and keeping it in the store) makes every later
bootstrap turn of the session see the same text, even if the files change,
so prepared contexts stay deterministic and cache-friendly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import anyio

from hostkit.errors import InvalidValue
from hostkit.types import TurnExecutionContext, is_count, is_names

__all__ = ["DEFAULT_BOOTSTRAP_FILES", "BootstrapSnapshot", "BootstrapSource", "WorkspaceBootstrap"]

DEFAULT_BOOTSTRAP_FILES = ("AGENTS.md",)


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
    symlinks), off the event loop, bounded in size.
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
            text = await anyio.to_thread.run_sync(_read_plain, root / name, self._max_chars)
            if text is not None:
                parts.append(f"## {name}\n{text}")
                found.append(name)
        if not parts:
            return None
        return BootstrapSnapshot("\n\n".join(parts), ",".join(found))


def _read_plain(path: Path, max_chars: int) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            text = handle.read(max_chars + 1)
    except OSError:
        return None
    return text if len(text) <= max_chars else text[:max_chars] + "\n[truncated]"
