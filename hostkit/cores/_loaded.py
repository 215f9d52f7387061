"""A core at one revision: materialized read-only from its commit, manifest parsed.

The Host never runs a core's work tree. It extracts the commit's tree under
``<cores_root>/<core_id>/<sha>/``, with ``agent/`` renamed to a package name
unique to the revision (``hkcore_<id>_<sha12>``), so two revisions' modules
coexist in one process and a revision's files never change under a turn.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from hostkit._lazy import load_off_loop
from hostkit.cores._manifest import CoreManifest, manifest_error, manifest_with_lines
from hostkit.errors import ConfigError, bounded
from hostkit.store import CoreStore
from hostkit.types import is_core_id, is_revision

if TYPE_CHECKING:
    from hostkit.cores._repository import CoreRepository
__all__ = [
    "GATES_DIR",
    "MANIFEST_FILE",
    "PACKAGE_DIR",
    "CoreLocation",
    "LoadedCore",
    "live_core",
    "load_core",
    "package_name",
]

MANIFEST_FILE = "agent.yaml"
PACKAGE_DIR = "agent"
MAX_INSTRUCTIONS_BYTES = 400_000
_SCRATCH_PREFIX = ".partial-"
# The test gate's fresh materializations, ``<cores_root>/.gates/<pid>-<uuid>``.
GATES_DIR = ".gates"


@dataclass(frozen=True, slots=True)
class CoreLocation:
    """Where a core lives and which Host-owned ref says what is live (from ``[cores.<id>]``).

    ``path`` is absolute (resolved against ``hostkit.toml``'s folder).
    """

    core_id: str
    path: Path
    ref: str


@dataclass(frozen=True, slots=True)
class LoadedCore:
    """A core at one revision, ready to compose into an agent.

    ``root`` is the materialized, read-only directory (the ``sys.path`` entry
    for ``package``); ``instructions`` is the resolved text (``instructions``
    or the file ``instructions_file`` names, empty when neither is given).
    """

    core_id: str
    revision: str
    manifest: CoreManifest
    root: Path
    package: str
    instructions: str
    location: CoreLocation
    # "<id>@<sha12>:agent.yaml" and the line of each top-level key, for later errors.
    source: str = MANIFEST_FILE
    key_lines: tuple[tuple[str, int], ...] = ()

    def problem(self, key: str, message: str) -> ConfigError:
        """A ``ConfigError`` about ``key`` of this revision's ``agent.yaml``, naming its line."""
        line = dict(self.key_lines).get(key.split(".", 1)[0])
        return manifest_error(self.source, line, tuple(key.split(".")), message)

    def module(self, name: str) -> str:
        """The import name of ``agent/<name>`` here (``tools`` -> ``hkcore_<id>_<sha12>.tools``)."""
        return f"{self.package}.{name}"


def package_name(core_id: str, revision: str) -> str:
    """The import name of ``agent/`` at ``revision``: unique per core and revision."""
    return f"hkcore_{core_id.replace('-', '_')}_{revision[:12]}"


async def load_core(location: CoreLocation, revision: str, *, cores_root: Path) -> LoadedCore:
    """Materialize commit ``revision`` of the core (once; reused after) and parse it.

    ``ConfigError`` (naming the file, line and key for ``agent.yaml``) when
    the commit has no ``agent.yaml``, a tree that may not be materialized, an
    id that is not this core's, or an ``instructions_file`` outside the core.
    """
    if not is_core_id(location.core_id):
        raise ConfigError(f"{bounded(location.core_id, 80)!r} is not a core id")
    # dulwich loads with a core, off the event loop (its first import takes tens of ms).
    await load_off_loop("hostkit.cores._repository")
    from hostkit.cores._repository import CoreRepository

    repository = await CoreRepository.open(location.path)
    revision = await repository.resolve(revision)
    source = f"{location.core_id}@{revision[:12]}:{MANIFEST_FILE}"
    raw = await repository.read(revision, MANIFEST_FILE)
    if raw is None:
        raise ConfigError(f"core {location.core_id!r} has no {MANIFEST_FILE} at {revision[:12]}")
    manifest, lines = await anyio.to_thread.run_sync(
        lambda: manifest_with_lines(raw, source=source)
    )
    if manifest.id != location.core_id:
        raise manifest_error(
            source,
            lines.get("id"),
            ("id",),
            f"{manifest.id!r} is not this core's id {location.core_id!r} (the [cores] key)",
        )
    instructions = manifest.instructions or ""
    if manifest.instructions_file is not None:
        try:
            text = await repository.read(
                revision, manifest.instructions_file, max_bytes=MAX_INSTRUCTIONS_BYTES
            )
        except ConfigError as exc:
            raise manifest_error(
                source, lines.get("instructions_file"), ("instructions_file",), exc.message
            ) from None
        if text is None:
            raise manifest_error(
                source,
                lines.get("instructions_file"),
                ("instructions_file",),
                f"{bounded(manifest.instructions_file, 200)!r} is not a file of this revision",
            )
        instructions = text.decode("utf-8", "replace")
    package = package_name(location.core_id, revision)
    root = await _materialize(repository, location.core_id, revision, package, cores_root)
    return LoadedCore(
        core_id=location.core_id,
        revision=revision,
        manifest=manifest,
        root=root,
        package=package,
        instructions=instructions,
        location=location,
        source=source,
        key_lines=tuple(sorted(lines.items())),
    )


async def live_core(
    location: CoreLocation, store: CoreStore, *, cores_root: Path
) -> LoadedCore | None:
    """The core at the live revision the store recorded (None: never promoted).

    The repository's ref is not asked: it is the author's to write, so it
    is only a mirror (``hostkit.cores.heal_mirror``).
    """
    live = await store.live_revision(location.core_id)
    if live is None:
        return None
    return await load_core(location, live, cores_root=cores_root)


async def _materialize(
    repository: CoreRepository, core_id: str, revision: str, package: str, cores_root: Path
) -> Path:
    """``<cores_root>/<id>/<sha>``: extracted into a scratch dir, made read-only, renamed.

    The rename is atomic, so a directory under the final name is complete; a
    concurrent materialization of the same revision loses the rename and
    discards its copy.
    """
    assert is_revision(revision)
    parent = cores_root / core_id
    final = parent / revision
    if await anyio.to_thread.run_sync(_sweep_and_check, cores_root, parent, final):
        return final
    await anyio.to_thread.run_sync(lambda: parent.mkdir(parents=True, exist_ok=True, mode=0o700))
    # The pid in the name: a copy whose creator died (SIGKILL mid-extract) is removed later.
    scratch = parent / f"{_SCRATCH_PREFIX}{os.getpid()}-{revision[:12]}-{secrets.token_hex(6)}"
    try:
        await repository.extract(revision, scratch, rename={PACKAGE_DIR: package})
        await anyio.to_thread.run_sync(_finish, scratch, final, package)
    finally:
        await anyio.to_thread.run_sync(_discard, scratch)
    return final


def _sweep_and_check(cores_root: Path, parent: Path, final: Path) -> bool:
    """Blocking: remove scratch copies whose creating process is gone; is ``final`` there?

    A killed materialization leaves ``.partial-<pid>-*`` beside the revisions,
    a killed promoter ``.gates/<pid>-*``; nothing else removes them. Copies of
    live processes (this one's other tasks, another Host) are left alone.
    """
    candidates = [
        (entry, entry.name[len(_SCRATCH_PREFIX) :])
        for entry in _entries(parent)
        if entry.name.startswith(_SCRATCH_PREFIX)
    ]
    candidates += [(entry, entry.name) for entry in _entries(cores_root / GATES_DIR)]
    for entry, rest in candidates:
        pid = rest.split("-", 1)[0]
        if pid.isdecimal() and not _alive(int(pid)):
            _discard(entry)
    return final.is_dir()


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts; a reused pid is kept: safe side)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _finish(scratch: Path, final: Path, package: str) -> None:
    """Blocking: add the package marker, make the tree read-only, rename it into place."""
    init = scratch / package / "__init__.py"
    if (scratch / package).is_dir() and not init.exists():
        init.write_bytes(b"")
    _read_only(scratch)
    try:
        os.rename(scratch, final)
    except OSError:
        if not final.is_dir():
            raise


def _read_only(root: Path) -> None:
    for directory, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = Path(directory, name)
            path.chmod(stat.S_IMODE(path.stat().st_mode) & 0o555)
        Path(directory).chmod(0o555)


def _discard(scratch: Path) -> None:
    """Blocking: remove a scratch copy (read-only after ``_finish``) if one is left."""
    if not scratch.exists():
        return
    for directory, _dirs, _files in os.walk(scratch):
        with contextlib.suppress(OSError):
            Path(directory).chmod(0o700)
    shutil.rmtree(scratch, ignore_errors=True)
