"""Until tests/cores_support.py lands: make_core / commit / live_of / core_registry for promote tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import yaml
from dulwich import porcelain
from dulwich.repo import Repo

from hostkit.cores import CoreLocation, CoreRegistry, LoadedCore
from hostkit.host._config import DEFAULT_CORE_REF
from hostkit.store import RuntimeStore

AUTHOR = b"t <t@example.invalid>"


def _commit(path: Path, files: Mapping[str, str], message: str, remove: tuple[str, ...] = ()) -> str:
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    with Repo(str(path)) as repo:
        for name in remove:
            porcelain.remove(repo, [str(path / name)])
        porcelain.add(repo, [str(path / name) for name in files])
        sha = porcelain.commit(repo, message.encode(), author=AUTHOR, committer=AUTHOR)
    return sha.decode()


async def commit(path: Path, files: Mapping[str, str], message: str, *, remove: tuple[str, ...] = ()) -> str:
    return await anyio.to_thread.run_sync(lambda: _commit(path, files, message, remove))


async def make_core(
    root: Path, core_id: str, *, manifest: dict[str, Any] | str, files: Mapping[str, str] = {}, live: bool = True
) -> tuple[Path, str]:
    path = root / core_id
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)

    def init() -> None:
        path.mkdir(parents=True)
        porcelain.init(str(path)).close()

    await anyio.to_thread.run_sync(init)
    sha = await commit(path, {"agent.yaml": text, "agent/__init__.py": "", **files}, "first")
    if live:
        await set_live(path, sha)
    return path, sha


async def set_live(path: Path, sha: str, ref: str = DEFAULT_CORE_REF) -> None:
    def move() -> None:
        with Repo(str(path)) as repo:
            repo.refs[ref.encode()] = sha.encode()

    await anyio.to_thread.run_sync(move)


async def live_of(path: Path, ref: str = DEFAULT_CORE_REF) -> str | None:
    def read() -> str | None:
        with Repo(str(path)) as repo:
            try:
                return repo.refs[ref.encode()].decode()
            except KeyError:
                return None

    return await anyio.to_thread.run_sync(read)


def core_registry(
    tmp_path: Path,
    store: RuntimeStore,
    cores: Mapping[str, Path],
    *,
    validate: Callable[[LoadedCore], Awaitable[None]] | None = None,
    on_moved: Callable[[str, str], Awaitable[None]] | None = None,
) -> CoreRegistry:
    locations = {core_id: CoreLocation(core_id, path, DEFAULT_CORE_REF) for core_id, path in cores.items()}
    return CoreRegistry(
        store, locations, cores_root=tmp_path / "cores-state", validate=validate, on_moved=on_moved
    )
