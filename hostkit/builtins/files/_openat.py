"""Link-safe filesystem primitives beneath one opened root, for ``WorkspaceScope``.

``ContainedRoot.resolve`` is the contained walk: each component is opened
relative to its parent's descriptor with ``O_NOFOLLOW``, a symlink is read
with ``readlink`` and its target walked under the same rules, ``..`` pops
the walk's own stack of opened directories, and everything it opens is
compared with the Host's own state by identity (``ProtectedState``). The
helpers below it replace a file by ``rename`` inside an already opened
directory, read a bounded window, check what a directory entry is before it
is replaced, and map an ``OSError`` to a bounded error naming only the
workspace-relative path.

Everything here runs in a worker thread and raises the workspace's own
refusals, so the error vocabulary stays with ``WorkspaceScope``.
"""

from __future__ import annotations

import codecs
import ctypes
import errno
import functools
import os
import secrets
import stat
import sys
import unicodedata
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal

from hostkit.builtins.files._errors import WorkspaceError, WorkspaceEscape, WorkspaceIOFailure
from hostkit.errors import HostkitError

__all__ = [
    "FILE_FLAGS",
    "HOST_STATE_REASON",
    "MAX_SYMLINK_HOPS",
    "O_DIRECTORY",
    "O_NOFOLLOW",
    "ContainedRoot",
    "Identities",
    "ProtectedState",
    "collapsed",
    "decode_window",
    "entry_size",
    "folded_name",
    "lstat",
    "mapped",
    "open_entry",
    "pread_bounded",
    "quoted",
    "replace_atomically",
    "require_regular",
    "require_replaceable",
    "same_file",
]

MAX_SYMLINK_HOPS = 40  # the kernel's own bound
# A walk holds one descriptor per directory level (so ``..`` is answered from it): these
# bound what one operation may hold, and how much it may walk through links, so a tree
# the agent planted cannot use up the Host's descriptors (its database, its sockets).
MAX_WALK_DEPTH = 64
MAX_WALK_COMPONENTS = 4096
_CHUNK_BYTES = 64 * 1024
_SHOWN_CHARS = 200

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK so opening a FIFO planted in the workspace cannot hang the worker thread.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | _O_CLOEXEC
# Linux reports a symlink opened with O_NOFOLLOW as ELOOP, or ENOTDIR with O_DIRECTORY;
# FreeBSD says EMLINK. Each is confirmed with readlink before it is treated as a link.
_MAYBE_SYMLINK = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
# A file system without hard links (vfat, some network mounts) refuses link() so.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
# renameat2 without RENAME_NOREPLACE: no such call, or a file system refusing the flag.
_NO_NOREPLACE = frozenset({errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})
_RENAME_NOREPLACE = 1
_RETRYABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EAGAIN, errno.EBUSY, errno.EINTR})
_USER_ERRNOS = {
    errno.ENOENT: ("not_found", "no such file or directory"),
    errno.ENOTDIR: ("not_a_directory", "a path component is not a directory"),
    errno.EISDIR: ("not_a_file", "is a directory"),
    errno.ENXIO: ("not_a_file", "is not a regular file"),
    errno.EACCES: ("permission", "permission denied"),
    errno.EPERM: ("permission", "permission denied"),
    errno.ENAMETOOLONG: ("too_long", "name too long"),
    errno.ELOOP: ("symlink", "too many symbolic links"),
}

# -- the Host's own state, by identity -----------------------------------------------
#
# An operator may configure a workspace that overlaps the Host's state (the database,
# its WAL/SHM/journal files, migration backups, the artifact root, the configuration).
# The walk compares what it opens with that state without trusting any spelling:
# protected directories (the artifact root) by device and inode, each directory the
# walk opens, so nothing beneath one is reached through `..`, a link or a bind mount;
# protected files by device and inode, taken afresh per operation (SQLite recreates
# the WAL), so a hard link to one is refused too; and protected names: a protected
# file also protects every sibling whose name begins with its name, matched by the
# identity of the directory holding it. That covers files SQLite creates later
# (hostkit.db-wal, hostkit.db-journal, hostkit.db.v3.backup) and refuses a write that
# would plant one first (a forged hot journal is replayed into the database).

HOST_STATE_REASON = "host_state"
_Id = tuple[int, int]


def refusal(shown: str) -> WorkspaceEscape:
    """The typed refusal for a path that is (or is under) the Host's own state."""
    return WorkspaceEscape(
        f"{shown}: is the Host's own state (database, artifacts or configuration); "
        "workspace file tools never touch it",
        reason=HOST_STATE_REASON,
    )


@dataclass(frozen=True, slots=True)
class Identities:
    """One operation's view of the Host's state: identities taken when it started."""

    directories: frozenset[_Id]
    files: frozenset[_Id]
    # (identity of a directory, name prefix): names in it that are Host state.
    prefixes: frozenset[tuple[_Id, str]]

    def __bool__(self) -> bool:
        return bool(self.directories or self.files or self.prefixes)

    def is_directory(self, info: os.stat_result) -> bool:
        return (info.st_dev, info.st_ino) in self.directories

    def is_file(self, info: os.stat_result) -> bool:
        return (info.st_dev, info.st_ino) in self.files or self.is_directory(info)

    def is_name(self, parent: os.stat_result, name: str) -> bool:
        """Whether ``name`` in ``parent`` begins with a protected name, in any case or Unicode
        form: on a case-insensitive file system (vfat, a casefold ext4 directory, macOS)
        ``HOSTKIT.DB-journal`` is the database's journal."""
        at = (parent.st_dev, parent.st_ino)
        folded = folded_name(name)
        return any(at == where and folded.startswith(prefix) for where, prefix in self.prefixes)


def folded_name(name: str) -> str:
    """``name`` as a case- and normalization-insensitive file system may take it."""
    return unicodedata.normalize("NFKC", name).casefold()


_NONE = Identities(frozenset(), frozenset(), frozenset())


class ProtectedState:
    """Paths no workspace operation may touch; ``identities()`` reads them for one operation."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]] = ()) -> None:
        # Resolved against the working directory later, in the worker thread.
        self.paths = tuple(os.fspath(path) for path in paths)

    def __bool__(self) -> bool:
        return bool(self.paths)

    def identities(self) -> Identities:
        """Stat every protected path now (missing ones still protect their names)."""
        if not self.paths:
            return _NONE
        directories: set[_Id] = set()
        files: set[_Id] = set()
        prefixes: set[tuple[_Id, str]] = set()
        for path in map(os.path.abspath, self.paths):
            try:
                info = os.stat(path)
            except OSError:
                info = None
            if info is not None and stat.S_ISDIR(info.st_mode):
                directories.add((info.st_dev, info.st_ino))
                continue
            if info is not None:
                files.add((info.st_dev, info.st_ino))
            # Both spellings: as configured and with its links resolved.
            for spelling in {path, os.path.realpath(path)}:
                head, name = os.path.split(spelling)
                try:
                    parent = os.stat(head)
                except OSError:
                    continue
                prefixes.add(((parent.st_dev, parent.st_ino), folded_name(name)))
        return Identities(frozenset(directories), frozenset(files), frozenset(prefixes))


_Final = Literal["file", "dir", "parent"]


class ContainedRoot:
    """A trusted root directory and the contained walk beneath it.

    The root itself may be reached through a symlink; every component below
    it is opened without the kernel following a link on hostkit's behalf.
    Every directory the walk opens, and the entry it ends on, is compared
    with ``protected`` (the Host's own state) by identity, never by spelling.
    """

    def __init__(self, root: str, *, protected: ProtectedState | None = None) -> None:
        self.root = root
        self.protected = protected or ProtectedState()
        self._prefixes: tuple[tuple[str, ...], ...] | None = None

    def resolve(
        self,
        parts: tuple[str, ...],
        shown: str,
        *,
        final: _Final,
        follow: bool,
        create_dirs: bool = False,
    ) -> tuple[int, str]:
        """Walk ``parts`` from the root; return an open descriptor and a name.

        ``final="file"``/``"dir"``: the descriptor is the opened target, the
        name is empty. ``final="parent"``: the descriptor is the directory
        holding the last component and the name is that component, not yet
        opened. ``stack`` holds only directories opened from the root
        without the kernel following a link, so ``..`` is answered from it,
        never by the filesystem.
        """
        stack = [self._open_root()]
        # A walk that creates never follows a link, so `..` only undoes the step before
        # it: collapsed first, a directory a refused write would leave is never made.
        pending = deque(collapsed(parts) if create_dirs and not follow else parts)
        hops = walked = 0
        ids = self.protected.identities()
        try:
            _guard_directory(ids, stack[0], shown)
            while pending:
                name = pending.popleft()
                last = not pending
                walked += 1
                if walked > MAX_WALK_COMPONENTS:
                    raise WorkspaceError(
                        f"{quoted(shown)}: walks more than {MAX_WALK_COMPONENTS} path "
                        "components through its links",
                        reason="too_deep",
                    )
                if name == "..":
                    if len(stack) == 1:
                        reason = "symlink" if hops else "parent"
                        raise WorkspaceEscape(
                            f"{quoted(shown)}: leads outside the workspace", reason=reason
                        )
                    os.close(stack.pop())
                    continue
                _guard_name(ids, stack[-1], name, shown)
                if last and final == "parent":
                    _guard_entry(ids, stack[-1], name, shown)
                    return stack.pop(), name
                if not last and len(stack) > MAX_WALK_DEPTH:
                    # Refused before it is opened (or created): one more level to hold.
                    raise WorkspaceError(
                        f"{quoted(shown)}: nests more than {MAX_WALK_DEPTH} directories deep",
                        reason="too_deep",
                    )
                want_dir = not last or final == "dir"
                flags = _DIR_FLAGS if want_dir else FILE_FLAGS
                opened = open_entry(stack[-1], name, flags, create=create_dirs and want_dir)
                if isinstance(opened, int):
                    try:
                        _guard_opened(ids, opened, shown)
                    except BaseException:
                        os.close(opened)
                        raise
                    if last:
                        return opened, ""
                    stack.append(opened)
                    continue
                if not follow:
                    raise WorkspaceError(
                        f"{quoted(shown)}: writes and edits never follow symbolic links",
                        reason="symlink",
                    )
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkspaceError(
                        f"{quoted(shown)}: too many symbolic links", reason="symlink"
                    )
                absolute, target = self._link_target(opened, shown)
                if absolute:
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending.extendleft(reversed(target))
            # The path named a directory: the root, or one reached through `..` or a link.
            if final == "dir":
                return stack.pop(), ""
            raise WorkspaceError(f"{quoted(shown)}: is a directory", reason="not_a_file")
        finally:
            for fd in stack:
                os.close(fd)

    def _open_root(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | O_DIRECTORY | _O_CLOEXEC)
        except OSError as exc:
            raise WorkspaceIOFailure("the workspace root is unavailable") from exc

    def _link_target(self, target: str, shown: str) -> tuple[bool, tuple[str, ...]]:
        """A link's target as components to walk; absolute targets must name the root."""
        parts = tuple(part for part in target.split("/") if part not in ("", "."))
        if not target.startswith("/"):
            return False, parts
        for prefix in self._root_prefixes():
            if parts[: len(prefix)] == prefix:
                return True, parts[len(prefix) :]
        raise WorkspaceEscape(
            f"{quoted(shown)}: a symbolic link leads outside the workspace", reason="symlink"
        )

    def _root_prefixes(self) -> tuple[tuple[str, ...], ...]:
        # Both spellings of the root count: as configured and with its own links resolved.
        if self._prefixes is None:
            spellings = {os.path.abspath(self.root), os.path.realpath(self.root)}
            self._prefixes = tuple(
                tuple(part for part in spelling.split("/") if part) for spelling in spellings
            )
        return self._prefixes


def _guard_directory(ids: Identities, fd: int, shown: str) -> None:
    if ids and ids.is_directory(os.fstat(fd)):
        raise refusal(quoted(shown))


def _guard_name(ids: Identities, parent: int, name: str, shown: str) -> None:
    """A name the Host's state owns in this directory, whether or not it exists yet."""
    if ids.prefixes and ids.is_name(os.fstat(parent), name):
        raise refusal(quoted(shown))


def _guard_entry(ids: Identities, parent: int, name: str, shown: str) -> None:
    """The entry itself, links not followed: a hard link to a state file is that file."""
    if ids:
        info = lstat(parent, name)
        if info is not None and ids.is_file(info):
            raise refusal(quoted(shown))


def _guard_opened(ids: Identities, fd: int, shown: str) -> None:
    if ids and ids.is_file(os.fstat(fd)):
        raise refusal(quoted(shown))


def open_entry(dir_fd: int, name: str, flags: int, *, create: bool) -> int | str:
    """Open ``name`` in ``dir_fd`` without following it; a link's target instead of an fd."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        # mkdir never follows a link at its final component; a racing creator is fine.
        with suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        return open_entry(dir_fd, name, flags, create=False)
    except OSError as exc:
        if exc.errno not in _MAYBE_SYMLINK:
            raise
        try:
            return os.readlink(name, dir_fd=dir_fd)
        except OSError:
            raise exc from None


def replace_atomically(
    parent: int,
    name: str,
    data: bytes,
    *,
    mode: int | None,
    expect: os.stat_result | None,
    shown: str,
    create: bool = False,
    keep_free: int = 0,
) -> None:
    """Write a temporary sibling, fsync it, rename it over ``name``, fsync the directory.

    ``rename`` replaces the directory entry in ``parent`` (already opened and
    contained): a link swapped in at ``name`` is replaced, never written
    through. ``expect`` refuses the rename when the target is no longer the
    file that was read. ``create`` puts the file in place only where nothing
    is, atomically (``_put_new``), never over an entry created meanwhile.
    ``keep_free`` refuses a write that would leave ``parent``'s file system
    fewer free bytes than that (see ``_require_room``).
    """
    if keep_free:
        _require_room(parent, len(data), keep_free, shown)
    temp = f".hostkit-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=parent)
    renamed = False
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if expect is not None and not same_file(lstat(parent, name), expect):
            raise WorkspaceError(
                f"{quoted(shown)}: changed while it was being edited; read it again",
                reason="changed",
            )
        if create:
            _put_new(parent, temp, name, shown)
        else:
            os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        renamed = True
        os.fsync(parent)
    finally:
        if not renamed:
            with suppress(OSError):
                os.unlink(temp, dir_fd=parent)


def _require_room(parent: int, size: int, keep_free: int, shown: str) -> None:
    """Refuse writing ``size`` bytes where its file system would keep less than ``keep_free``.

    Each write is bounded, but writes add up across calls, sessions and Host
    processes; the file system's own count is the one they all share. The old
    content is freed only after the rename, so the whole new size counts.
    """
    stats = os.fstatvfs(parent)
    free = stats.f_bavail * stats.f_frsize
    if free - size < keep_free:
        kept = f"{keep_free >> 20} MiB" if keep_free % (1 << 20) == 0 else f"{keep_free} bytes"
        raise WorkspaceError(
            f"{quoted(shown)}: writing {size} bytes would leave its disk less than the "
            f"{kept} the Host keeps free (host.artifact_reserve_mb)",
            reason="disk_reserve",
        )


def _put_new(parent: int, temp: str, name: str, shown: str) -> None:
    """Move ``temp`` to ``name`` only if nothing is at ``name``, atomically.

    Linux's ``renameat2(RENAME_NOREPLACE)`` does it in one step. Where the
    call or the file system lacks it, a hard link (which fails on any entry
    there) then the temporary name's removal; one that cannot be removed is
    left (a write already in place is not undone for it). Without hard links
    either, nothing may be at ``name`` just before a plain rename.
    """
    if _rename_noreplace(parent, temp, name, shown):
        return
    try:
        os.link(temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
    except FileExistsError:
        raise _created_since(shown) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if lstat(parent, name) is not None:
            raise _created_since(shown) from None
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        return
    with suppress(OSError):
        os.unlink(temp, dir_fd=parent)


def _rename_noreplace(parent: int, temp: str, name: str, shown: str) -> bool:
    """``renameat2(RENAME_NOREPLACE)``; False where it is not there (not Linux, an old
    C library, a file system that refuses the flag). ``changed`` when ``name`` exists."""
    call = _renameat2()
    if call is None:
        return False
    if call(parent, os.fsencode(temp), parent, os.fsencode(name), _RENAME_NOREPLACE) == 0:
        return True
    error = ctypes.get_errno()
    if error == errno.EEXIST:
        raise _created_since(shown)
    if error in _NO_NOREPLACE:
        return False
    raise OSError(error, os.strerror(error), name)


@functools.cache
def _renameat2() -> Any:
    """The C library's ``renameat2``, or None (looked up once)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    call.restype = ctypes.c_int
    return call


def _created_since(shown: str) -> WorkspaceError:
    return WorkspaceError(
        f"{quoted(shown)}: created by someone else since this write was approved; read it again",
        reason="changed",
    )


def pread_bounded(fd: int, offset: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``offset``, read in chunks: never the whole file."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.pread(fd, min(_CHUNK_BYTES, remaining), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def decode_window(data: bytes, *, final: bool) -> tuple[str, int]:
    """Decode ``data``; a multibyte character cut at the end is left for the next read."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=final)
    consumed = len(data) - len(decoder.getstate()[0])
    if data and consumed == 0:
        # A limit smaller than one character must still make progress.
        return decoder.decode(b"", final=True), len(data)
    return text, consumed


def lstat(parent: int, name: str) -> os.stat_result | None:
    """The entry ``name`` in ``parent`` itself, links not followed; None when absent."""
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def entry_size(dir_fd: int, name: str) -> int | None:
    """The size of the entry ``name`` itself, links not followed; None when unknown."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    except OSError:
        return None


def same_file(now: os.stat_result | None, then: os.stat_result) -> bool:
    """Whether ``now`` is still the file ``then`` was read from, unchanged since.

    The change time is in it because no unprivileged process can set it back:
    a rewrite that kept the size and restored the modification time differs.
    """
    if now is None:
        return False
    return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) == (
        then.st_dev,
        then.st_ino,
        then.st_size,
        then.st_mtime_ns,
        then.st_ctime_ns,
    )


def require_regular(info: os.stat_result, shown: str) -> None:
    """Refuse anything but a regular file."""
    if stat.S_ISDIR(info.st_mode):
        raise WorkspaceError(f"{quoted(shown)}: is a directory", reason="not_a_file")
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(f"{quoted(shown)}: is not a regular file", reason="not_a_file")


def require_replaceable(info: os.stat_result, shown: str) -> None:
    """Refuse to replace a link, a non-regular file or a file with several hard links."""
    if stat.S_ISLNK(info.st_mode):
        raise WorkspaceError(
            f"{quoted(shown)}: is a symbolic link; writes never replace links", reason="symlink"
        )
    require_regular(info, shown)
    if info.st_nlink > 1:
        raise WorkspaceEscape(
            f"{quoted(shown)}: has several hard links; writing it could change a file "
            "outside the workspace",
            reason="hardlink",
        )


def quoted(path: str) -> str:
    """``path`` quoted and cut short for a message."""
    # In backticks so that a path ending in "token" or "passwd" is not mistaken for a
    # secret assignment by the error tree's redaction, which reads "token: x" and
    # "'token': x" (a quoted key) as one, and masks the word after it.
    return f"`{path}`" if len(path) <= _SHOWN_CHARS else f"`{path[: _SHOWN_CHARS - 1]}…`"


def mapped(exc: OSError, shown: str) -> HostkitError:
    """The boundary mapping: a bounded hostkit error naming only the relative path."""
    code = exc.errno or 0
    if code in _USER_ERRNOS:
        reason, text = _USER_ERRNOS[code]
        return WorkspaceError(f"{quoted(shown)}: {text}", reason=reason)
    return WorkspaceIOFailure(
        f"{quoted(shown)}: {os.strerror(code) if code else type(exc).__name__}",
        retryable=code in _RETRYABLE,
    )


def collapsed(parts: tuple[str, ...]) -> tuple[str, ...]:
    """``parts`` with each ``name/..`` pair removed; a leading ``..`` is kept (and refused)."""
    kept: list[str] = []
    for part in parts:
        if part == ".." and kept and kept[-1] != "..":
            kept.pop()
        else:
            kept.append(part)
    return tuple(kept)
