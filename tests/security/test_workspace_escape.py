"""Workspace escapes: no read, list, write or edit ever touches a file outside the root.

Every case asserts the absence of the side effect (the outside tree is byte-
and mtime-identical, nothing new appears), not only the error. The race cases
swap a symlink in *between* hostkit's decision and the kernel call, through a
wrapper around ``os.open``/``os.rename`` that fires exactly once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import WorkspaceError, WorkspaceEscape, WorkspaceScope

pytestmark = pytest.mark.anyio

SECRET = "TOP SECRET\n"
OPS = ["read", "list", "write", "edit"]


@dataclass(frozen=True)
class Layout:
    root: Path
    outside: Path
    scope: WorkspaceScope


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "notes.txt").write_text(SECRET)
    (root / "sub" / "notes.txt").write_text("TOP inside notes\n")
    (root / "real.txt").write_text("TOP real inside\n")
    return Layout(root, outside, WorkspaceScope(root))


def snapshot(directory: Path) -> dict[str, tuple[bytes | str, int, int]]:
    """Every entry under ``directory`` with its content (or link target), mtime and inode."""
    seen: dict[str, tuple[bytes | str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            if path.is_symlink():
                body: bytes | str = os.readlink(path)
            elif path.is_file():
                body = path.read_bytes()
            else:
                body = "<dir>"
            seen[str(path.relative_to(directory))] = (body, info.st_mtime_ns, info.st_ino)
    return seen


async def attempt(scope: WorkspaceScope, op: str, path: str) -> Any:
    if op == "read":
        return await scope.read(path)
    if op == "list":
        return await scope.list(path)
    if op == "write":
        return await scope.write(path, "PWNED\n")
    return await scope.edit(path, "TOP", "PWNED")


@contextmanager
def no_io() -> Iterator[None]:
    """Fail if the operation reaches the worker thread (where all I/O runs) or opens anything."""

    def forbidden(*args: object, **kwargs: object) -> Any:
        raise AssertionError("a lexical refusal must happen before any I/O")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(anyio.to_thread, "run_sync", forbidden)
        patch.setattr(os, "open", forbidden)
        yield


LEXICAL_ESCAPES = [
    pytest.param("..", "parent", id="dotdot"),
    pytest.param("../outside/secret.txt", "parent", id="dotdot-sibling"),
    pytest.param("../../etc/passwd", "parent", id="dotdot-etc-passwd"),
    pytest.param("sub/../../outside/secret.txt", "parent", id="dotdot-after-descent"),
    pytest.param("./sub/./../..", "parent", id="dotdot-with-dots"),
    pytest.param("/etc/passwd", "absolute", id="absolute-etc-passwd"),
    pytest.param("//etc/passwd", "absolute", id="absolute-double-slash"),
    pytest.param("{outside}/secret.txt", "absolute", id="absolute-outside-file"),
    pytest.param("{root}/real.txt", "absolute", id="absolute-even-inside"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("path", "reason"), LEXICAL_ESCAPES)
async def test_lexical_escapes_are_refused_before_any_io(
    layout: Layout, op: str, path: str, reason: str
) -> None:
    before = snapshot(layout.outside), snapshot(layout.root)
    path = path.format(outside=layout.outside, root=layout.root)
    with no_io(), pytest.raises(WorkspaceEscape) as caught:
        await attempt(layout.scope, op, path)
    assert caught.value.reason == reason
    assert str(layout.root) not in caught.value.message
    assert (snapshot(layout.outside), snapshot(layout.root)) == before


INVALID_PATHS = [
    pytest.param("real.txt\x00.png", "invalid_path", id="nul-byte"),
    pytest.param("\x00", "invalid_path", id="only-nul"),
    pytest.param("a/" * 600 + "x", "too_long", id="long-path"),
    pytest.param("n" * 256, "too_long", id="long-name"),
    pytest.param("\ud800.txt", "invalid_path", id="lone-surrogate"),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("path", "reason"), INVALID_PATHS)
async def test_invalid_paths_are_refused_before_any_io(
    layout: Layout, op: str, path: str, reason: str
) -> None:
    before = snapshot(layout.root)
    with no_io(), pytest.raises(WorkspaceError) as caught:
        await attempt(layout.scope, op, path)
    assert caught.value.reason == reason
    assert len(caught.value.message) <= 500
    assert snapshot(layout.root) == before


def link_out_file(layout: Layout) -> str:
    (layout.root / "leak.txt").symlink_to("../outside/secret.txt")
    return "leak.txt"


def link_out_file_absolute(layout: Layout) -> str:
    (layout.root / "leak.txt").symlink_to(layout.outside / "secret.txt")
    return "leak.txt"


def link_out_dir(layout: Layout) -> str:
    (layout.root / "out").symlink_to("../outside", target_is_directory=True)
    return "out/secret.txt"


def link_out_dir_absolute(layout: Layout) -> str:
    (layout.root / "out").symlink_to(layout.outside, target_is_directory=True)
    return "out/notes.txt"


def link_chain(layout: Layout) -> str:
    (layout.root / "b").symlink_to("../outside")
    (layout.root / "a").symlink_to("b")
    return "a/secret.txt"


def link_nested_up(layout: Layout) -> str:
    (layout.root / "sub" / "up").symlink_to("../../outside")
    return "sub/up/secret.txt"


def link_through_root_then_up(layout: Layout) -> str:
    (layout.root / "trick").symlink_to(f"{layout.root}/../outside/secret.txt")
    return "trick"


def link_to_sibling_with_root_prefix(layout: Layout) -> str:
    # "/tmp/x/ws-evil" starts with the string "/tmp/x/ws" but is not inside it.
    evil = layout.root.parent / (layout.root.name + "-evil")
    evil.mkdir()
    (evil / "secret.txt").write_text(SECRET)
    (layout.root / "evil").symlink_to(evil / "secret.txt")
    return "evil"


OUTWARD_LINKS = [
    link_out_file,
    link_out_file_absolute,
    link_out_dir,
    link_out_dir_absolute,
    link_chain,
    link_nested_up,
    link_through_root_then_up,
    link_to_sibling_with_root_prefix,
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("plant", OUTWARD_LINKS)
async def test_symlinks_that_leave_the_workspace_are_refused(
    layout: Layout, op: str, plant: Callable[[Layout], str]
) -> None:
    path = plant(layout)
    before = snapshot(layout.root.parent)
    with pytest.raises(WorkspaceError) as caught:
        await attempt(layout.scope, op, path)
    if op in ("read", "list"):
        # Reads follow links, so they are refused because of where the link points.
        assert isinstance(caught.value, WorkspaceEscape)
    else:
        assert caught.value.reason == "symlink"
    assert SECRET.strip() not in caught.value.message
    assert snapshot(layout.root.parent) == before


@pytest.mark.parametrize("op", ["write", "edit"])
async def test_a_dangling_link_out_is_not_created_through(layout: Layout, op: str) -> None:
    # O_CREAT on a dangling link would create its target; write/edit must not.
    (layout.root / "dangling").symlink_to("../outside/created.txt")
    with pytest.raises(WorkspaceError):
        await attempt(layout.scope, op, "dangling")
    assert not (layout.outside / "created.txt").exists()
    assert (layout.root / "dangling").is_symlink()


async def test_write_into_a_linked_directory_creates_nothing_outside(layout: Layout) -> None:
    (layout.root / "out").symlink_to(layout.outside, target_is_directory=True)
    before = snapshot(layout.outside)
    with pytest.raises(WorkspaceError):
        await layout.scope.write("out/new/deeper.txt", "PWNED\n")
    assert snapshot(layout.outside) == before


async def test_a_symlink_loop_is_refused_without_hanging(layout: Layout) -> None:
    (layout.root / "loop").symlink_to("loop")
    (layout.root / "ping").symlink_to("pong")
    (layout.root / "pong").symlink_to("ping")
    with anyio.fail_after(10):
        for path in ("loop", "ping/x"):
            with pytest.raises(WorkspaceError) as caught:
                await layout.scope.read(path)
            assert caught.value.reason == "symlink"


async def test_symlinks_that_stay_inside_may_be_read_and_listed(layout: Layout) -> None:
    (layout.root / "alias.txt").symlink_to("real.txt")
    (layout.root / "abs.txt").symlink_to(layout.root / "real.txt")
    (layout.root / "docs").symlink_to("sub", target_is_directory=True)
    (layout.root / "sub" / "back.txt").symlink_to("../real.txt")
    (layout.root / "sub" / "hop").symlink_to("../sub/..", target_is_directory=True)
    scope = layout.scope
    for path in ("alias.txt", "abs.txt", "sub/back.txt", "sub/hop/real.txt"):
        assert (await scope.read(path)).text == "TOP real inside\n"
    assert (await scope.read("docs/notes.txt")).text == "TOP inside notes\n"
    listed = await scope.list("docs")
    assert [entry.name for entry in listed.entries] == ["back.txt", "hop", "notes.txt"]


async def test_a_root_reached_through_a_symlink_still_contains(layout: Layout) -> None:
    linked_root = layout.root.parent / "ws-link"
    linked_root.symlink_to(layout.root, target_is_directory=True)
    (layout.root / "via-real.txt").symlink_to(layout.root / "real.txt")
    (layout.root / "via-link.txt").symlink_to(linked_root / "real.txt")
    (layout.root / "leak.txt").symlink_to(layout.outside / "secret.txt")
    scope = WorkspaceScope(linked_root)
    for path in ("via-real.txt", "via-link.txt"):
        assert (await scope.read(path)).text == "TOP real inside\n"
    with pytest.raises(WorkspaceEscape):
        await scope.read("leak.txt")


async def test_writes_never_follow_links_even_inside(layout: Layout) -> None:
    (layout.root / "alias.txt").symlink_to("real.txt")
    (layout.root / "docs").symlink_to("sub", target_is_directory=True)
    before = snapshot(layout.root)
    for op, path in (("write", "alias.txt"), ("edit", "alias.txt"), ("write", "docs/n.txt")):
        with pytest.raises(WorkspaceError) as caught:
            await attempt(layout.scope, op, path)
        assert caught.value.reason == "symlink"
    assert snapshot(layout.root) == before


@pytest.mark.parametrize("op", OPS)
async def test_a_hard_link_to_an_outside_file_is_refused(layout: Layout, op: str) -> None:
    os.link(layout.outside / "secret.txt", layout.root / "hard.txt")
    before = snapshot(layout.outside)
    with pytest.raises(WorkspaceError) as caught:
        await attempt(layout.scope, op, "hard.txt")
    if op == "list":
        assert caught.value.reason == "not_a_directory"
    else:
        assert isinstance(caught.value, WorkspaceEscape)
        assert caught.value.reason == "hardlink"
    assert snapshot(layout.outside) == before
    assert (layout.root / "hard.txt").stat().st_nlink == 2


async def test_hard_linked_reads_are_an_explicit_opt_in(layout: Layout) -> None:
    os.link(layout.root / "real.txt", layout.root / "twin.txt")
    scope = WorkspaceScope(layout.root, allow_hardlinked_reads=True)
    assert (await scope.read("twin.txt")).text == "TOP real inside\n"
    with pytest.raises(WorkspaceEscape):
        await scope.write("twin.txt", "x")


# -- symlinks swapped in after the check -------------------------------------------------


def race_before(
    monkeypatch: pytest.MonkeyPatch, call: str, name: str, swap: Callable[[], None]
) -> list[str]:
    """Run ``swap`` once, just before hostkit's ``os.<call>`` on ``name`` reaches the kernel."""
    real = getattr(os, call)
    fired: list[str] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        target = args[1] if call == "rename" else args[0]
        if target == name and not fired:
            fired.append(name)
            swap()
        return real(*args, **kwargs)

    monkeypatch.setattr(os, call, racing)
    return fired


def swap_dir_for_link(layout: Layout) -> Callable[[], None]:
    def swap() -> None:
        (layout.root / "sub").rename(layout.root / "sub.moved")
        (layout.root / "sub").symlink_to(layout.outside, target_is_directory=True)

    return swap


def swap_file_for_link(layout: Layout) -> Callable[[], None]:
    def swap() -> None:
        (layout.root / "sub" / "notes.txt").unlink()
        (layout.root / "sub" / "notes.txt").symlink_to(layout.outside / "notes.txt")

    return swap


@pytest.mark.parametrize("op", OPS)
async def test_a_directory_swapped_for_a_link_before_open_is_refused(
    layout: Layout, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = "sub" if op == "list" else "sub/notes.txt"
    assert layout.scope.check(path) == path  # the lexical check passes first
    before = snapshot(layout.outside)
    fired = race_before(monkeypatch, "open", "sub", swap_dir_for_link(layout))
    with pytest.raises(WorkspaceError) as caught:
        await attempt(layout.scope, op, path)
    assert fired == ["sub"]
    assert caught.value.reason == "symlink"
    assert snapshot(layout.outside) == before


@pytest.mark.parametrize("op", ["read", "edit"])
async def test_a_file_swapped_for_a_link_before_open_is_refused(
    layout: Layout, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(layout.outside)
    fired = race_before(monkeypatch, "open", "notes.txt", swap_file_for_link(layout))
    with pytest.raises(WorkspaceError) as caught:
        await attempt(layout.scope, op, "sub/notes.txt")
    assert fired == ["notes.txt"]
    assert caught.value.reason == "symlink"
    assert snapshot(layout.outside) == before


async def test_a_parent_swapped_for_a_link_before_rename_keeps_the_write_inside(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(layout.outside)
    fired = race_before(monkeypatch, "rename", "notes.txt", swap_dir_for_link(layout))
    await layout.scope.write("sub/notes.txt", "PWNED\n")
    assert fired == ["notes.txt"]
    # The write went to the directory that was checked, wherever it now lives inside.
    assert (layout.root / "sub.moved" / "notes.txt").read_text() == "PWNED\n"
    assert snapshot(layout.outside) == before


async def test_a_target_swapped_for_a_link_before_rename_is_replaced_not_followed(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(layout.outside)
    fired = race_before(monkeypatch, "rename", "notes.txt", swap_file_for_link(layout))
    await layout.scope.write("sub/notes.txt", "PWNED\n")
    assert fired == ["notes.txt"]
    target = layout.root / "sub" / "notes.txt"
    assert not target.is_symlink()
    assert target.read_text() == "PWNED\n"
    assert snapshot(layout.outside) == before


async def test_an_edit_whose_target_is_swapped_before_rename_is_refused(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(layout.outside)
    # The edit's first stat of the name is its re-check after reading, just before rename.
    fired = race_before(monkeypatch, "stat", "notes.txt", swap_file_for_link(layout))
    with pytest.raises(WorkspaceError) as caught:
        await layout.scope.edit("sub/notes.txt", "TOP", "PWNED")
    assert fired == ["notes.txt"]
    assert caught.value.reason == "changed"
    assert snapshot(layout.outside) == before
    assert not [p.name for p in (layout.root / "sub").iterdir() if p.name.startswith(".hostkit")]
