"""Clause: a live ref locked by another mover is waited out briefly, then named.

The Host-owned ref moves under Git's lock file (``<ref>.lock``), as the git
CLI does. ``CoreRepository.move_ref`` waits a bounded time for a lock another
mover holds (its compare-and-swap then decides), and past that answers
``RefLocked`` naming the lock file: another promotion is running, or a crashed
one left the file behind. A promotion refused that way is recorded with that
answer and the ref stays where it was.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.cores import CoreRepository
from hostkit.errors import PromotionRefused, RefLocked
from hostkit.store import RuntimeStore
from hostkit.types import GateOutcome
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
        await repository.move_ref(REF, first, second, lock_wait_s=0.3)
    assert anyio.current_time() - started >= 0.3
    assert caught.value.lock == str(lock)
    assert f"the ref {REF} is locked ({lock})" in str(caught.value)
    assert "another promotion is running, or a stale lock file" in str(caught.value)
    assert await repository.live(REF) == first


async def test_a_lock_released_during_the_wait_lets_the_move_happen(tmp_path: Path) -> None:
    path, first, second, lock = await anyio.to_thread.run_sync(two_revisions, tmp_path)
    await anyio.Path(lock).write_bytes(b"")
    repository = await CoreRepository.open(path)

    async def release() -> None:
        await anyio.sleep(0.2)  # the other mover finishes without moving this ref
        await anyio.Path(lock).unlink()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        with anyio.fail_after(5):
            moved = await repository.move_ref(REF, first, second, lock_wait_s=3.0)
    assert moved
    assert await repository.live(REF) == second


async def test_a_promotion_against_a_stale_lock_is_refused_and_recorded(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first, second, lock = await anyio.to_thread.run_sync(two_revisions, tmp_path)
    await anyio.Path(lock).write_bytes(b"")
    registry = core_registry(tmp_path, store, {"locked": path})
    with anyio.fail_after(10), pytest.raises(PromotionRefused) as caught:
        await registry.promote("locked", second, actor="ops", reason="next")
    gates = [gate for gate in caught.value.gates if isinstance(gate, GateOutcome)]
    (gate,) = [gate for gate in gates if not gate.passed]
    assert gate.gate == "live_ref"
    assert f"is locked ({lock})" in gate.detail
    (event,) = await registry.history("locked")
    assert (event.action, event.revision, event.previous) == ("refused", second, first)
    assert await anyio.to_thread.run_sync(live_of, path) == first
