"""``host.artifacts``: the terminal output files the Host keeps, and their retention."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import anyio

from hostkit.builtins.process import ArtifactCursor, reclaim_expired_artifacts
from hostkit.errors import InvalidValue, RuntimeFailure
from hostkit.store import RECLAIM_BATCH
from hostkit.types import is_count, is_seconds

__all__ = ["HostArtifacts"]


class HostArtifacts:
    """Terminal output files under ``[host] artifacts``, kept ``retention_s`` after their
    last write (0: forever).

    Nothing else deletes a run's output (only an empty stream's file goes when its run
    ends), so something must call ``reclaim``: ``hostkit serve`` does in its "retention"
    daemon; a Host that does not serve may call it now and then.
    """

    def __init__(self, *, root: Path, retention_s: float) -> None:
        self.root = root
        self.retention_s = retention_s
        self._cursor = ArtifactCursor()
        # One pass at a time: the cursor is this Host's, the files are every Host's.
        self._lock = anyio.Lock()

    async def reclaim(
        self, *, older_than_s: float | None = None, limit: int = RECLAIM_BATCH
    ) -> int:
        """Delete up to ``limit`` output files last written over ``older_than_s`` ago
        (default ``retention_s``; nothing when that is 0); how many went.

        One bounded pass in a worker thread, resuming where the last one stopped. A file
        a run still writes (in any Host process), a link, or anything that is not a
        run's output under the root is never deleted.
        """
        if not is_count(limit):
            raise InvalidValue("limit must be a positive integer")
        if older_than_s is None:
            if not self.retention_s:
                return 0  # kept forever
            older_than_s = self.retention_s
        elif not is_seconds(older_than_s):
            raise InvalidValue("older_than_s must be a positive number of seconds")
        sweep = functools.partial(
            reclaim_expired_artifacts,
            self.root,
            cutoff=time.time() - older_than_s,
            limit=limit,
            cursor=self._cursor,
        )
        async with self._lock:
            try:
                return await anyio.to_thread.run_sync(sweep)
            except OSError as exc:
                raise RuntimeFailure(
                    f"reading the artifact root failed: {exc.strerror or exc!r}"
                ) from exc
