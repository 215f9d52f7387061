"""A core's Git repository, read and moved with dulwich (no system ``git`` needed).

Every method runs dulwich in a worker thread and opens the repository for
that call only, so nothing holds file handles between calls and a
``CoreRepository`` needs no closing. The Host-owned ref is only a mirror
of the store's live revision, written under Git's lock file and
never through a symbolic ref or a symlink.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar, cast

import anyio
from dulwich.diff_tree import tree_changes
from dulwich.errors import (
    ApplyDeltaError,
    ChecksumMismatch,
    FileFormatException,
    NotGitRepository,
    ObjectMissing,
    WrongObjectException,
)
from dulwich.file import FileLocked, GitFile
from dulwich.object_store import BaseObjectStore, tree_lookup_path
from dulwich.objects import (
    Blob,
    Commit,
    RawObjectID,
    ShaFile,
    Tag,
    Tree,
    sha_to_hex,
)
from dulwich.pack import Pack
from dulwich.refs import Ref
from dulwich.repo import Repo
from dulwich.walk import Walker

from hostkit.errors import ConfigError, HostkitError, InvalidValue, RefLocked, bounded
from hostkit.types import is_revision, is_seconds

__all__ = [
    "LOCK_WAIT_S",
    "MAX_EXTRACT_BYTES",
    "MAX_EXTRACT_FILES",
    "MAX_READ_BYTES",
    "CommitInfo",
    "CoreRepository",
    "FileTooLarge",
]

MAX_READ_BYTES = 4 * 1024 * 1024
MAX_EXTRACT_BYTES = 64 * 1024 * 1024
MAX_EXTRACT_FILES = 10_000
MAX_EXTRACT_DEPTH = 32
MAX_LOG = 1_000
MAX_CHANGED = 10_000
# How long a move waits for another mover's ref lock, polling (doubling pauses up to a cap).
LOCK_WAIT_S = 2.0
_LOCK_POLL_S = 0.02
_LOCK_POLL_MAX_S = 0.25
_SUMMARY_CHARS = 200
_PERSON_CHARS = 200
_SHORT = re.compile(r"[0-9a-f]{7,39}")
_REF_NAME = re.compile(r"[A-Za-z0-9._/-]{1,200}")
_GITLINK = 0o160000
# Commits, trees and tags are read whole: none of a core's is legitimately this large.
MAX_OBJECT_BYTES = MAX_READ_BYTES
# What resolving one packed delta may hold in memory (its bases included).
MAX_DELTA_CHAIN_BYTES = MAX_EXTRACT_BYTES
_MAX_DELTA_DEPTH = 64
_HEADER_PROBE = 512
_OFS_DELTA, _REF_DELTA = 6, 7
# A damaged or hostile object store: dulwich's and zlib's errors, and a missing object.
_DAMAGED = (
    zlib.error,
    ApplyDeltaError,
    ChecksumMismatch,
    FileFormatException,
    ObjectMissing,
    WrongObjectException,
    KeyError,
    IndexError,
    ValueError,
    AssertionError,
)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """One commit of a core: its id, first line (bounded), author and time (epoch seconds)."""

    sha: str
    summary: str
    author: str
    at: float


class CoreRepository:
    """A core's Git repository at ``path`` (a work tree with ``.git``, or a bare repo)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> CoreRepository:
        """The repository at ``path``; ``ConfigError`` naming it when it is not one."""
        repository = cls(Path(path))
        await repository._run(lambda repo: None)
        return repository

    async def head(self) -> str | None:
        """The commit ``HEAD`` names (None: no commit yet)."""
        return await self._run(_head)

    async def resolve(self, rev: str) -> str:
        """The full commit id of ``rev``: a full id, a unique prefix of at least 7 hex,
        ``HEAD``, a branch, a tag or a full ref name; ``InvalidValue`` otherwise."""
        if not isinstance(rev, str) or not _REF_NAME.fullmatch(rev) or ".." in rev:
            raise InvalidValue(f"{bounded(rev, 80)!r} is not a revision name")
        return await self._run(lambda repo: _resolve(repo, rev))

    async def live(self, ref: str) -> str | None:
        """The commit ``ref`` names in the repository (None: no such ref).

        Only the Host's mirror of the live revision: the store's record decides
        what runs, because anyone who can write the repository can move a ref.
        """
        return await self._run(lambda repo: _read_ref(repo, ref))

    async def mirror_ref(self, ref: str, sha: str, *, lock_wait_s: float = LOCK_WAIT_S) -> bool:
        """Make ``ref`` a plain ref naming commit ``sha``; True when it had to change.

        A symbolic ref (``ref: refs/heads/...``) or a symlinked ref file is
        replaced, never written through, so the branch it pointed at is left
        alone. Git's lock file held by someone else (the git CLI, a crashed
        mover) is waited out for up to ``lock_wait_s``, then ``RefLocked``
        naming it. ``InvalidValue`` for a name outside ``refs/hostkit/`` or a
        ``sha`` that is not a commit here.
        """
        if (
            not ref.startswith("refs/hostkit/")
            or not _REF_NAME.fullmatch(ref)
            or ".." in ref
            or "//" in ref
            or ref.endswith(("/", ".lock"))
        ):
            raise InvalidValue(f"{bounded(ref, 80)!r} is not a Host-owned ref (refs/hostkit/...)")
        if not is_revision(sha):
            raise InvalidValue("a ref mirrors a full 40-hex commit id")
        if not is_seconds(lock_wait_s, high=3_600, zero=True):  # NaN would wait for ever
            raise InvalidValue("lock_wait_s must be a number of seconds from 0 to 3600")
        deadline = anyio.current_time() + lock_wait_s
        pause = _LOCK_POLL_S
        while True:
            try:
                return await self._run(lambda repo: _mirror(repo, ref, sha))
            except FileLocked as exc:
                left = deadline - anyio.current_time()
                if left <= 0:
                    raise RefLocked(ref, os.fsdecode(exc.lockfilename)) from None
            await anyio.sleep(min(pause, left))
            pause = min(pause * 2, _LOCK_POLL_MAX_S)

    async def read(self, sha: str, path: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes | None:
        """The file ``path`` in commit ``sha`` (None: no such regular file there).

        ``ConfigError`` naming the path when it is larger than ``max_bytes``.
        """
        parts = _parts(path)
        return await self._run(lambda repo: _read(repo, sha, parts, max_bytes))

    async def log(self, start: str, *, limit: int = 50) -> tuple[CommitInfo, ...]:
        """Commits reachable from ``start``, newest first, at most ``limit``."""
        limit = max(1, min(limit, MAX_LOG))
        return await self._run(lambda repo: _log(repo, start, limit))

    async def changed(self, a: str | None, b: str) -> tuple[str, ...]:
        """The paths that differ between commits ``a`` (None: nothing) and ``b``, sorted."""
        return await self._run(lambda repo: _changed(repo, a, b))

    async def extract(
        self,
        sha: str,
        dest: Path,
        *,
        rename: Mapping[str, str] | None = None,
        max_bytes: int = MAX_EXTRACT_BYTES,
        max_files: int = MAX_EXTRACT_FILES,
    ) -> None:
        """Write commit ``sha``'s tree (never the work tree) into the new directory ``dest``.

        Only regular files and directories: a symlink, a submodule, a name that
        is absolute, ``.``, ``..``, contains ``/`` or NUL, or ``.git``, and a tree
        past ``max_bytes`` or ``max_files``, are refused with a ``ConfigError``
        naming the path (``dest`` may then hold part of the tree: extract into a
        scratch directory). ``rename`` maps top-level names to others (``agent``
        to the revision's package name).
        """
        renames = dict(rename or {})
        await self._run(lambda repo: _extract(repo, sha, dest, renames, max_bytes, max_files))

    async def _run(self, work: Callable[[Repo], _T]) -> _T:
        return await anyio.to_thread.run_sync(_with_repo, self.path, work)


# -- worker threads ------------------------------------------------------------------------


def _with_repo(path: Path, work: Callable[[Repo], _T]) -> _T:
    shown = bounded(str(path), 300)
    if not path.is_dir():
        raise ConfigError(f"core repository {shown} is not a directory")
    try:
        repo = Repo(str(path))
    except NotGitRepository:
        raise ConfigError(f"{shown} is not a Git repository (run `git init` there)") from None
    except OSError as exc:
        raise ConfigError(f"cannot open core repository {shown}: {exc.strerror}") from None
    try:
        return work(repo)
    except (HostkitError, FileLocked):
        raise
    except _DAMAGED as exc:
        raise ConfigError(
            f"core repository {shown} cannot be read: an object is damaged or missing "
            f"({type(exc).__name__})"
        ) from None
    finally:
        repo.close()


def _head(repo: Repo) -> str | None:
    try:
        return repo.refs[Ref(b"HEAD")].decode("ascii")
    except KeyError:
        return None


class FileTooLarge(ConfigError):
    """A file past the bound a read was given (a diff says it differs instead)."""


def _read_ref(repo: Repo, ref: str) -> str | None:
    try:
        value = repo.refs[Ref(ref.encode())].decode("ascii")
    except KeyError:
        return None
    return value if is_revision(value) else None


def _commit(repo: Repo, sha: str) -> Commit:
    """Commit ``sha`` (tags peeled); ``InvalidValue`` when there is none."""
    obj: ShaFile | None
    try:
        obj = _get(repo, sha.encode("ascii"), MAX_OBJECT_BYTES) if is_revision(sha) else None
    except (KeyError, ValueError):
        obj = None
    for _ in range(16):
        if not isinstance(obj, Tag):
            break
        obj = _get(repo, obj.object[1], MAX_OBJECT_BYTES)
    if not isinstance(obj, Commit):
        raise InvalidValue(f"{bounded(sha, 80)!r} is not a commit of this core")
    return obj


def _resolve(repo: Repo, rev: str) -> str:
    if rev == "HEAD":
        head = _head(repo)
        if head is None:
            raise InvalidValue("the core repository has no commits yet")
        return _commit(repo, head).id.decode("ascii")
    if is_revision(rev):
        return _commit(repo, rev).id.decode("ascii")
    names = [rev] if rev.startswith("refs/") else [f"refs/heads/{rev}", f"refs/tags/{rev}"]
    by_ref = None
    for name in names:
        try:
            target = repo.refs[Ref(name.encode())].decode("ascii")
        except KeyError:
            continue
        by_ref = _commit(repo, target).id.decode("ascii")
        break
    commits: set[str] = set()
    if _SHORT.fullmatch(rev):
        commits = {
            found.decode("ascii")
            for found in repo.object_store.iter_prefix(rev.encode("ascii"))
            if isinstance(_get(repo, found, MAX_OBJECT_BYTES), Commit)
        }
    if by_ref is not None and commits - {by_ref}:
        # A branch or tag named like a reviewed commit's short id must not stand in for it.
        raise InvalidValue(
            f"{rev!r} is ambiguous: a branch or tag and a commit id both match; "
            "give the full commit id"
        )
    if by_ref is not None:
        return by_ref
    if len(commits) == 1:
        return commits.pop()
    if commits:
        raise InvalidValue(f"{rev!r} is ambiguous: give more of the commit id")
    raise InvalidValue(f"no revision {bounded(rev, 80)!r} in this core")


def _mirror(repo: Repo, ref: str, sha: str) -> bool:
    _commit(repo, sha)
    control = os.path.realpath(repo.controldir())
    path = os.path.join(control, *ref.split("/"))
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    if os.path.realpath(parent) != parent:
        raise ConfigError(f"the directory of {bounded(ref, 80)} is a symbolic link")
    raw = repo.refs.read_loose_ref(Ref(ref.encode()))
    if raw == sha.encode("ascii") and not os.path.islink(path):
        return False
    # The lock file is renamed over the ref: a symlink or a symbolic ref is replaced.
    with GitFile(path, "wb") as file:
        file.write(sha.encode("ascii") + b"\n")
    return True


def _parts(path: str) -> tuple[str, ...]:
    """``path`` inside a core as its parts; ``ConfigError`` if it could leave the core."""
    shown = bounded(path, 200)
    if not path or "\\" in path or "\x00" in path or PurePosixPath(path).is_absolute():
        raise ConfigError(f"{shown!r} is not a relative path inside the core")
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    if not parts or ".." in parts:
        raise ConfigError(f"{shown!r} is not a relative path inside the core")
    return parts


def _read(repo: Repo, sha: str, parts: tuple[str, ...], max_bytes: int) -> bytes | None:
    tree = _commit(repo, sha).tree
    try:
        mode, blob_id = tree_lookup_path(
            _BoundedStore(repo).__getitem__, tree, "/".join(parts).encode()
        )
    except (KeyError, NotADirectoryError):
        return None
    if not stat.S_ISREG(mode):
        return None
    # The size from the object's header: a small object may inflate to gigabytes.
    if _size(repo, blob_id) > max_bytes:
        raise FileTooLarge(f"{bounded('/'.join(parts), 200)} is larger than {max_bytes} bytes")
    blob = repo[blob_id]
    if not isinstance(blob, Blob):
        return None
    return blob.as_raw_string()


def _log(repo: Repo, start: str, limit: int) -> tuple[CommitInfo, ...]:
    head = _commit(repo, start).id
    found: list[CommitInfo] = []
    walker = Walker(cast(BaseObjectStore, _BoundedStore(repo)), [head], max_entries=limit)
    for entry in walker:
        commit = entry.commit
        message = commit.message.decode("utf-8", "replace").strip()
        summary = message.splitlines()[0] if message else ""
        found.append(
            CommitInfo(
                sha=commit.id.decode("ascii"),
                summary=bounded(summary, _SUMMARY_CHARS),
                author=bounded(commit.author.decode("utf-8", "replace"), _PERSON_CHARS),
                at=float(commit.author_time),
            )
        )
    return tuple(found)


def _changed(repo: Repo, a: str | None, b: str) -> tuple[str, ...]:
    old = None if a is None else _commit(repo, a).tree
    new = _commit(repo, b).tree
    paths: set[str] = set()
    for change in tree_changes(cast(BaseObjectStore, _BoundedStore(repo)), old, new):
        for side in (change.old, change.new):
            if side is not None and side.path is not None:
                paths.add(side.path.decode("utf-8", "replace"))
        if len(paths) > MAX_CHANGED:
            raise ConfigError(f"more than {MAX_CHANGED} files changed between the revisions")
    return tuple(sorted(paths))


@dataclass
class _Budget:
    files: int
    size: int


def _extract(
    repo: Repo,
    sha: str,
    dest: Path,
    rename: Mapping[str, str],
    max_bytes: int,
    max_files: int,
) -> None:
    tree = _get(repo, _commit(repo, sha).tree, MAX_OBJECT_BYTES)
    if not isinstance(tree, Tree):
        raise ConfigError("the revision's tree is not a tree")
    dest.mkdir(mode=0o700)
    budget = _Budget(files=max_files, size=max_bytes)
    _write_tree(repo, tree, dest, (), rename, budget)


def _write_tree(
    repo: Repo,
    tree: Tree,
    into: Path,
    prefix: tuple[str, ...],
    rename: Mapping[str, str],
    budget: _Budget,
) -> None:
    if len(prefix) >= MAX_EXTRACT_DEPTH:
        raise ConfigError(f"{_shown(prefix)} is nested more than {MAX_EXTRACT_DEPTH} levels deep")
    for entry in tree.iteritems():
        raw, mode, child_id = entry.path, entry.mode, entry.sha
        name = raw.decode("utf-8", "replace")
        path = (*prefix, name)
        if (
            not raw
            or raw in (b".", b"..")
            or b"/" in raw
            or b"\x00" in raw
            or b"\\" in raw
            or raw.lower() == b".git"
        ):
            raise ConfigError(f"the revision holds a path that is not allowed: {_shown(path)!r}")
        budget.files -= 1
        if budget.files < 0:
            raise ConfigError("the revision holds too many files to materialize")
        target = into / (rename.get(name, name) if not prefix else name)
        if mode == _GITLINK:
            raise ConfigError(f"the revision holds a submodule at {_shown(path)!r}")
        if stat.S_ISLNK(mode):
            raise ConfigError(f"the revision holds a symbolic link at {_shown(path)!r}")
        if stat.S_ISREG(mode):
            # Counted from the object's header, before anything is inflated.
            budget.size -= _size(repo, child_id)
            if budget.size < 0:
                raise ConfigError("the revision is too large to materialize")
            child = repo[child_id]
        else:
            child = _get(repo, child_id, MAX_OBJECT_BYTES)
        if stat.S_ISDIR(mode) and isinstance(child, Tree):
            target.mkdir(mode=0o700)
            _write_tree(repo, child, target, path, rename, budget)
        elif stat.S_ISREG(mode) and isinstance(child, Blob):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(target, flags, 0o700 if mode & 0o111 else 0o600)
            with os.fdopen(fd, "wb") as file:
                for chunk in child.as_raw_chunks():
                    file.write(chunk)
        else:
            raise ConfigError(f"the revision holds an unsupported entry at {_shown(path)!r}")


def _shown(path: tuple[str, ...]) -> str:
    return bounded("/".join(path), 200)


# -- object sizes, read before anything is inflated -------------------------------------------


class _BoundedStore:
    """The object store as dulwich's walkers read it, refusing an object past
    ``MAX_OBJECT_BYTES`` before inflating it (they read commits and trees only)."""

    def __init__(self, repo: Repo) -> None:
        self._repo = repo

    def __getitem__(self, sha: bytes) -> ShaFile:
        return _get(self._repo, sha, MAX_OBJECT_BYTES)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._repo.object_store, name)


def _get(repo: Repo, sha: bytes, limit: int) -> ShaFile:
    """Object ``sha``, refused (``ConfigError``) when its size is over ``limit``."""
    if _size(repo, sha) > limit:
        raise ConfigError(
            f"object {sha[:12]!r} of the core repository is larger than {limit} bytes"
        )
    return repo[sha]


def _size(repo: Repo, sha: bytes) -> int:
    """The inflated size of object ``sha`` from its header; ``KeyError`` when it is absent.

    ``ConfigError`` when resolving it (a packed delta's bases) would hold more
    than ``MAX_DELTA_CHAIN_BYTES``.
    """
    hexsha = sha_to_hex(RawObjectID(sha)) if len(sha) == 20 else sha
    found = _stored_size(repo.object_store, hexsha, 0)
    if found is None:
        raise KeyError(hexsha)
    size, chain = found
    if chain > size and chain > MAX_DELTA_CHAIN_BYTES:  # a delta's bases: the caller checks size
        raise ConfigError(
            f"object {os.fsdecode(hexsha[:12])} of the core repository needs more than "
            f"{MAX_DELTA_CHAIN_BYTES} bytes to read"
        )
    return size


def _stored_size(store: Any, hexsha: bytes, depth: int) -> tuple[int, int] | None:
    """(size, the most its delta chain holds) of ``hexsha`` in ``store``; None: not there."""
    if depth > _MAX_DELTA_DEPTH:
        raise ConfigError("the core repository holds a delta chain that is too deep")
    for pack in store.packs:
        if hexsha in pack:
            return _packed_size(store, pack, pack.index.object_offset(hexsha), depth)
    path = os.path.join(store.path, os.fsdecode(hexsha[:2]), os.fsdecode(hexsha[2:]))
    try:
        with open(path, "rb") as file:
            compressed = file.read(_HEADER_PROBE)
    except FileNotFoundError:
        pass
    else:
        header = zlib.decompressobj().decompress(compressed, 64)
        _kind, space, length = header.partition(b"\x00")[0].partition(b" ")
        if not space or not length.isdigit() or b"\x00" not in header:
            raise ConfigError("the core repository holds a malformed object")
        return int(length), int(length)
    for alternate in store.alternates:
        found = _stored_size(alternate, hexsha, depth + 1)
        if found is not None:
            return found
    return None


def _packed_size(store: Any, pack: Pack, offset: int, depth: int) -> tuple[int, int]:
    """A packed object's size: its recorded size, or for a delta the target size the
    delta's own header records (its bases' sizes counted in the chain)."""
    if depth > _MAX_DELTA_DEPTH:
        raise ConfigError("the core repository holds a delta chain that is too deep")
    with open(pack.data.path, "rb") as file:
        file.seek(offset)
        data = file.read(_HEADER_PROBE)
    byte = data[0]
    kind, size, shift, at = (byte >> 4) & 7, byte & 0x0F, 4, 1
    while byte & 0x80:
        byte = data[at]
        size |= (byte & 0x7F) << shift
        shift, at = shift + 7, at + 1
    if kind not in (_OFS_DELTA, _REF_DELTA):
        return size, size
    if kind == _OFS_DELTA:
        byte = data[at]
        back, at = byte & 0x7F, at + 1
        while byte & 0x80:
            byte = data[at]
            back, at = ((back + 1) << 7) | (byte & 0x7F), at + 1
        if not 0 < back < offset:
            raise ConfigError("the core repository holds a malformed delta")
        base = _packed_size(store, pack, offset - back, depth + 1)
    else:
        found = _stored_size(store, sha_to_hex(RawObjectID(data[at : at + 20])), depth + 1)
        if found is None:
            raise KeyError(data[at : at + 20])
        base, at = found, at + 20
    delta = zlib.decompressobj().decompress(data[at:], 32)
    _source, used = _varint(delta, 0)
    target, _ = _varint(delta, used)
    return target, max(target + base[1], base[1])


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A delta header's size (7 bits a byte, low first) at ``at``; (value, next offset)."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        shift, at = shift + 7, at + 1
        if not byte & 0x80:
            return value, at
