"""Free space on a file system, as an unprivileged writer sees it.

No hostkit import: the store (the inbox's disk reserve), the builtins (terminal
output's reserve) and the CLI (``hostkit doctor``) all read it the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["free_bytes_at"]


def free_bytes_at(where: int | Path) -> int:
    """Blocking: the bytes an unprivileged writer may still use on the file system of
    ``where`` (an open descriptor, or a path: its nearest existing ancestor's)."""
    if isinstance(where, int):
        stats = os.fstatvfs(where)
    else:
        path = where
        while not path.exists() and path.parent != path:
            path = path.parent
        stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
