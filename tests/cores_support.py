"""Agent Core test helpers: a core is a real Git repository (dulwich), promoted without
its gates by recording the move in the test's store and mirroring the Host-owned ref (the
promotion gates are tested on their own).

Blocking (dulwich, files, a store opened in a worker thread): call them from test code,
not from hostkit's event loop code. The test's store is ``<root>/hostkit.db`` (the
database ``core_host_config`` and the ``store`` fixture use), ``<root>`` being the
folder the core was made in; pass ``database=`` for another.

    path, sha = make_core(tmp_path, "notes", manifest={"model": "test", "tools": ["tools"]},
                          files={"agent/tools.py": TOOL_SOURCE})
    config = core_host_config(tmp_path, {"notes": path})
    newer = commit(path, {"agent.yaml": ...}, "second")   # HEAD moves, the live revision does not
    set_live(path, newer)                                 # now it does (store and ref)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import anyio
import yaml
from dulwich import porcelain
from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from hostkit.cores import CoreLocation, CoreRegistry, LoadedCore, TestSandbox
from hostkit.host import DEFAULT_CORE_REF, HostConfig, parse_config
from hostkit.host._core_sandbox import core_test_sandbox
from hostkit.store import RuntimeStore
from hostkit.types import CoreEvent, GateOutcome

__all__ = [
    "IDENTITY",
    "commit",
    "core_host_config",
    "core_registry",
    "live_of",
    "make_core",
    "move_ref",
    "record_live",
    "set_live",
]

# A fixed author: no user or system Git configuration is read.
IDENTITY = b"hostkit tests <tests@example.invalid>"


def make_core(
    root: Path,
    core_id: str,
    *,
    manifest: Mapping[str, Any] | str,
    files: Mapping[str, str] = {},
    live: bool = True,
    database: Path | None = None,
) -> tuple[Path, str]:
    """A core repository at ``root/core_id`` with ``agent.yaml`` and ``files`` in one commit.

    ``manifest`` is agent.yaml's text, or a mapping (its ``id`` defaults to
    ``core_id``) written as YAML. ``live``: the commit is recorded live in the
    test's store (``database``, default ``root/hostkit.db``) and the Host-owned
    ref mirrors it (as if promoted). Returns (the repository path, the commit id).
    """
    path = root / core_id
    path.mkdir(parents=True)
    porcelain.init(str(path))
    text = manifest if isinstance(manifest, str) else manifest_text({"id": core_id, **manifest})
    sha = commit(path, {"agent.yaml": text, **files}, "first revision")
    if live:
        set_live(path, sha, database=database)
    return path, sha


def manifest_text(manifest: Mapping[str, Any]) -> str:
    """``manifest`` as agent.yaml text."""
    return yaml.safe_dump(dict(manifest), sort_keys=False)


def commit(
    path: Path,
    files: Mapping[str, str],
    message: str,
    *,
    remove: Iterable[str] = (),
    extra: Iterable[str] = (),
) -> str:
    """Write ``files`` (relative paths), delete ``remove``, commit all of it; the commit id.

    ``extra`` are paths already in the work tree to commit as they are (a
    symlink). Only HEAD's branch moves: the live ref stays where it was.
    """
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    removed = list(remove)
    if removed:
        porcelain.remove(str(path), paths=[str(path / name) for name in removed])
    added = [*files, *extra]
    if added:
        porcelain.add(str(path), paths=[str(path / name) for name in added])
    sha = porcelain.commit(str(path), message=message.encode(), author=IDENTITY, committer=IDENTITY)
    return sha.decode("ascii")


def set_live(
    path: Path,
    sha: str,
    ref: str = DEFAULT_CORE_REF,
    *,
    database: Path | None = None,
    core_id: str | None = None,
) -> None:
    """Record ``sha`` live for the core at ``path`` (a promotion without its gates) and
    point the Host-owned ``ref`` at it.

    The move goes to the store at ``database`` (default: ``hostkit.db`` beside the core's
    folder) under ``core_id`` (default: the folder's name), like ``hostkit core promote``
    records it; a Host that has it open sees it at its next reload or apply.
    """
    store_path = database if database is not None else path.parent / "hostkit.db"
    record_live(store_path, core_id or path.name, sha)
    move_ref(path, sha, ref)


def record_live(database: Path, core_id: str, sha: str) -> None:
    """Record ``sha`` as ``core_id``'s live revision in the store at ``database`` (only the store).

    Runs the store on its own event loop in a worker thread, so it works from a sync
    test, an async one (blocking it briefly) and before or while a Host has the store open.
    """

    async def record() -> None:
        async with await RuntimeStore.open(database) as store:
            previous = await store.cores.live_revision(core_id)
            if previous == sha:
                return
            await store.cores.move_live(
                CoreEvent(
                    core_id=core_id,
                    action="promote",
                    revision=sha,
                    previous=previous,
                    gates=(GateOutcome("tests", True, "set_live: recorded by the test"),),
                    actor="tests",
                    at=time.time(),
                    reason="set_live",
                )
            )

    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, record).result()


def move_ref(path: Path, sha: str, ref: str = DEFAULT_CORE_REF) -> None:
    """Only point ``ref`` at ``sha`` in the repository (what ``git update-ref`` does)."""
    with Repo(str(path)) as repo:
        repo.refs[Ref(ref.encode())] = ObjectID(sha.encode("ascii"))


def live_of(path: Path, ref: str = DEFAULT_CORE_REF) -> str | None:
    """The commit ``ref`` points at (None: no such ref)."""
    with Repo(str(path)) as repo:
        try:
            return repo.refs[Ref(ref.encode())].decode("ascii")
        except KeyError:
            return None


def core_host_config(
    tmp_path: Path,
    cores: Mapping[str, Path],
    *,
    providers: Mapping[str, Any] | None = None,
    agents: Mapping[str, Any] | None = None,
) -> HostConfig:
    """A Host configuration in ``tmp_path`` serving ``cores`` (id -> repository).

    ``providers`` default to one scripted provider named ``test`` (the name a
    test core's ``model`` uses); ``agents`` are extra ``[agents]`` tables.
    The workspace is ``tmp_path/workspace``: the cores' materialized
    revisions (``tmp_path/.hostkit-cores``) are outside it.
    """
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": "workspace"},
            "providers": dict(providers or {"test": {"kind": "scripted"}}),
            "agents": dict(agents or {}),
            "cores": {core_id: {"path": str(path)} for core_id, path in cores.items()},
        },
        base_dir=tmp_path,
    )


# -- promotion (helper "promote"): a CoreRegistry over test cores -----------------------


def core_registry(
    tmp_path: Path,
    store: RuntimeStore,
    cores: Mapping[str, Path],
    *,
    validate: Callable[[LoadedCore], Awaitable[None]] | None = None,
    on_moved: Callable[[str, str], Awaitable[None]] | None = None,
    sandbox: TestSandbox | Literal["host"] | None = "host",
) -> CoreRegistry:
    """A ``CoreRegistry`` over ``cores`` (id -> repository) at the default ref.

    Revisions materialize under ``tmp_path/cores-state``; ``validate`` and
    ``on_moved`` are the hooks a Host would pass (none by default); the test
    gate's ``sandbox`` is the one a Host over ``cores`` would pass (helper
    "gate").
    """
    locations = {
        core_id: CoreLocation(core_id, path, DEFAULT_CORE_REF) for core_id, path in cores.items()
    }
    if sandbox == "host":
        sandbox = core_test_sandbox(core_host_config(tmp_path, cores))
    return CoreRegistry(
        store,
        locations,
        cores_root=tmp_path / "cores-state",
        validate=validate,
        on_moved=on_moved,
        sandbox=sandbox,
    )
