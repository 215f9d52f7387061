"""Clause: a live ref locked by another writer is waited out briefly, then named.

The Host-owned ref mirrors the store's live revision and is written under Git's
lock file (``<ref>.lock``), as the git CLI does. ``CoreRepository.mirror_ref``
waits a bounded time for a lock another writer holds, and past that answers
``RefLocked`` naming the lock file (a crashed writer left it behind). A
promotion is not stopped by it: the move is recorded in the store, runs, and
the mirror failure is logged; the next open points the ref at it again.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from hostkit.cores import CoreLocation, CoreRepository, heal_mirror
from hostkit.errors import RefLocked
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

REF = "refs/hostkit/live"


def two_revisions(tmp_path: Path) -> tuple[Path, str, str, Path]:
    """A core live at its first commit, a second one, and the live ref's lock file path."""
    path, first = make_core(tmp_path, "locked", manifest={"model": "test"})
    second = commit(path, {"notes.md": "two\n"}, "second")
    return path, first, second, path / ".git" / "refs" / "hostkit" / "live.lock"


async def test_a_stale_lock_is_named_after_a_bounded_wait(tmp_path: Path) -> None:
    path, first, second, lock = await anyio.to_thread.run_sync(two_revisions, tmp_path)
    await anyio.Path(lock).write_bytes(b"")  # a crashed mover's leftover
    repository = await CoreRepository.open(path)
    started = anyio.current_time()
    with anyio.fail_after(5), pytest.raises(RefLocked) as caught:
        await repository.mirror_ref(REF, second, lock_wait_s=0.3)
    assert anyio.current_time() - started >= 0.3
    assert caught.value.lock == str(lock)
    assert f"the ref {REF} is locked ({lock})" in str(caught.value)
    assert "another promotion is running, or a stale lock file" in str(caught.value)
    assert await repository.live(REF) == first


async def test_a_lock_released_during_the_wait_lets_the_mirror_happen(tmp_path: Path) -> None:
    path, first, second, lock = await anyio.to_thread.run_sync(two_revisions, tmp_path)
    await anyio.Path(lock).write_bytes(b"")
    repository = await CoreRepository.open(path)
    assert await repository.live(REF) == first

    async def release() -> None:
        await anyio.sleep(0.2)  # the other mover finishes without moving this ref
        await anyio.Path(lock).unlink()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        with anyio.fail_after(5):
            moved = await repository.mirror_ref(REF, second, lock_wait_s=3.0)
    assert moved
    assert await repository.live(REF) == second


async def test_a_stale_lock_does_not_stop_a_promotion_and_is_logged(
    tmp_path: Path, store: RuntimeStore, caplog: pytest.LogCaptureFixture
) -> None:
    path, first, second, lock = await anyio.to_thread.run_sync(two_revisions, tmp_path)
    await anyio.Path(lock).write_bytes(b"")
    registry = core_registry(tmp_path, store, {"locked": path})
    with anyio.fail_after(10), caplog.at_level(logging.WARNING, logger="hostkit.cores"):
        event = await registry.promote("locked", second, actor="ops", reason="next")
    assert (event.action, event.revision, event.previous) == ("promote", second, first)
    assert (await registry.status("locked")).live == second
    assert await anyio.to_thread.run_sync(live_of, path) == first  # the mirror waits
    assert any(f"is locked ({lock})" in record.getMessage() for record in caplog.records)
    await anyio.Path(lock).unlink()
    assert await heal_mirror(CoreLocation("locked", path, REF), second) is not None
    assert await anyio.to_thread.run_sync(live_of, path) == second
