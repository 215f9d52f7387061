"""A workspace walk holds a bounded number of descriptors, however deep the planted tree.

The walk keeps one open directory per level so ``..`` is answered from it, never
by the filesystem. An agent can plant a tree (through ``files.write`` or a
terminal) hundreds of levels deep, or links that each add more levels: without a
bound, one read held a descriptor per level and could use up the Host's limit
(its database, its sockets). Past ``MAX_WALK_DEPTH`` levels, or
``MAX_WALK_COMPONENTS`` components walked through links, the operation is
refused (``too_deep``) before it opens, or creates, anything more.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hostkit.builtins.files import WorkspaceError, WorkspaceScope
from hostkit.builtins.files._openat import MAX_WALK_COMPONENTS, MAX_WALK_DEPTH

pytestmark = pytest.mark.anyio


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[peak, now]: descriptors opened through ``os.open`` and not yet closed."""
    counts = [0, 0]
    lock = threading.Lock()
    real_open, real_close = os.open, os.close

    def opening(*args: object, **kwargs: object) -> int:
        fd = real_open(*args, **kwargs)  # type: ignore[arg-type]
        with lock:
            counts[1] += 1
            counts[0] = max(counts)
        return fd

    def closing(fd: int) -> None:
        real_close(fd)
        with lock:
            counts[1] -= 1

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "close", closing)
    return counts


def nest(root: Path, levels: int) -> str:
    """A file ``levels`` directories below ``root``; its workspace path."""
    path = "/".join(["a"] * levels)
    (root / path).mkdir(parents=True)
    (root / path / "f.txt").write_text("deep\n")
    return f"{path}/f.txt"


async def test_a_path_past_the_depth_bound_is_refused_holding_few_descriptors(
    tmp_path: Path, held: list[int]
) -> None:
    path = nest(tmp_path, 300)
    scope = WorkspaceScope(tmp_path)
    for op in (scope.read, scope.list):
        with pytest.raises(WorkspaceError) as caught:
            await op(path if op == scope.read else path.removesuffix("/f.txt"))
        assert caught.value.reason == "too_deep"
        assert f"more than {MAX_WALK_DEPTH} directories deep" in caught.value.message
    assert held[0] <= MAX_WALK_DEPTH + 4
    assert held[1] == 0  # every descriptor it opened is closed again


async def test_a_path_within_the_depth_bound_still_works(tmp_path: Path) -> None:
    path = nest(tmp_path, MAX_WALK_DEPTH)
    read = await WorkspaceScope(tmp_path).read(path)
    assert "deep" in str(read)


async def test_a_write_past_the_depth_bound_creates_nothing_beyond_it(tmp_path: Path) -> None:
    scope = WorkspaceScope(tmp_path)
    with pytest.raises(WorkspaceError) as caught:
        await scope.write("b/" * 200 + "f.txt", "x")
    assert caught.value.reason == "too_deep"
    deepest = max(len(Path(d).relative_to(tmp_path).parts) for d, _, _ in os.walk(tmp_path))
    assert deepest <= MAX_WALK_DEPTH + 1


async def test_links_that_each_add_levels_are_bounded_by_depth(
    tmp_path: Path, held: list[int]
) -> None:
    """Each link is short and adds 30 levels (``a/…/L<i+1>``): no single path is long."""
    levels = "/".join(["a"] * 30)
    (tmp_path / levels).mkdir(parents=True)
    base = tmp_path
    for i in range(10):
        (base / f"L{i}").symlink_to(f"{levels}/L{i + 1}")
        base = base / levels
        if i < 9:
            (base / levels).mkdir(parents=True)
    (base / "L10").write_text("deep\n")
    with pytest.raises(WorkspaceError) as caught:
        await WorkspaceScope(tmp_path).read("L0")
    assert caught.value.reason == "too_deep"
    assert held[0] <= MAX_WALK_DEPTH + 4


async def test_links_that_walk_down_and_up_are_bounded_by_components(tmp_path: Path) -> None:
    """No depth at all, only work: each link walks ``a/..`` 60 times before the next."""
    (tmp_path / "a").mkdir()
    detour = "/".join(["a/.."] * 60)
    for i in range(39):
        (tmp_path / f"L{i}").symlink_to(f"{detour}/L{i + 1}")
    (tmp_path / "L39").symlink_to("real.txt")
    (tmp_path / "real.txt").write_text("here\n")
    assert MAX_WALK_COMPONENTS < 39 * 121
    with pytest.raises(WorkspaceError) as caught:
        await WorkspaceScope(tmp_path).read("L0")
    assert caught.value.reason == "too_deep"
    # A few detours are fine.
    assert "here" in str(await WorkspaceScope(tmp_path).read("L38"))
