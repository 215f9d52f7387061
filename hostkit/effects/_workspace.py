"""Workspace containment: every model-supplied path stays beneath one root.

A check-then-open implementation (resolve the path, compare prefixes, open
the result) loses to a symlink swapped in between the check and the open.
Here the walk *is* the check: the root is opened once per operation and each
component is opened relative to its parent's descriptor with ``O_NOFOLLOW``,
so the kernel never follows a link on hostkit's behalf. A symlink is read
with ``readlink`` and its target pushed back onto the walk, where it meets
the same rules; ``..`` pops the walk's own stack of opened directories and
may never pop the root. Whatever is swapped in after a component was
checked, the next open either sees a real directory entry or a link that is
checked again. Writes never follow links at all, and replace files by
``rename`` inside an already opened directory, which replaces a directory
entry and never writes through one.

Lexical refusals (absolute paths, ``..`` above the root, NUL bytes, overlong
paths) happen in ``check()`` on the calling thread, before any I/O. All
filesystem work runs in a worker thread (``anyio.to_thread``); an operation
that has started finishes before a cancellation is delivered, so no temporary
file is left behind.

Known limit: a directory already opened by the walk that a third party
renames out of the workspace mid-operation is still used (openat2's
``RESOLVE_BENEATH`` has the same property); nothing in hostkit moves
directories out of a workspace.
"""

from __future__ import annotations

import codecs
import errno
import functools
import heapq
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio

from hostkit.errors import ConfigError, HostkitError, InvalidValue, RuntimeFailure, UserError

__all__ = [
    "MAX_LIST_ENTRIES",
    "MAX_LIST_SCAN",
    "MAX_PATH_CHARS",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "EditResult",
    "ListEntry",
    "ListResult",
    "ReadResult",
    "WorkspaceError",
    "WorkspaceEscape",
    "WorkspaceIOFailure",
    "WorkspaceScope",
    "WriteResult",
]

MAX_READ_BYTES = 256 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_LIST_ENTRIES = 200
# A listing stops reading a huge directory here instead of counting all of it.
MAX_LIST_SCAN = 10_000
MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255  # NAME_MAX on Linux and macOS
MAX_SYMLINK_HOPS = 40  # the kernel's own bound
_CHUNK_BYTES = 64 * 1024
_SHOWN_CHARS = 200

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK so opening a FIFO planted in the workspace cannot hang the worker thread.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
# Linux reports a symlink opened with O_NOFOLLOW as ELOOP, or ENOTDIR with O_DIRECTORY;
# FreeBSD says EMLINK. Each is confirmed with readlink before it is treated as a link.
_MAYBE_SYMLINK = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})
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

_Final = Literal["file", "dir", "parent"]
_T = TypeVar("_T")
EntryKind = Literal["file", "dir", "symlink", "other"]


class WorkspaceError(UserError):
    """A workspace operation was refused; ``reason`` is a short stable code.

    Codes: invalid_path, too_long, not_found, not_a_file, not_a_directory,
    permission, symlink, too_large, not_text, no_match, ambiguous, changed.
    Messages name the workspace-relative path, never the host's root.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class WorkspaceEscape(WorkspaceError):
    """The path would leave the workspace: absolute, ``..``, a link or a hard link out.

    Reasons: absolute, parent, symlink, hardlink.
    """


class WorkspaceIOFailure(RuntimeFailure):
    """The filesystem failed a valid operation (disk full, I/O error, root missing)."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One bounded window of a file.

    ``next_offset`` is where a follow-up read continues, always on a UTF-8
    character boundary; ``truncated`` says bytes remain after it. A window
    containing NUL bytes is reported ``binary`` with empty ``text``.
    """

    path: str
    text: str
    offset: int
    next_offset: int
    size: int
    truncated: bool
    binary: bool


@dataclass(frozen=True, slots=True)
class ListEntry:
    """One directory entry; links are reported as links, never followed."""

    name: str
    kind: EntryKind
    size: int | None


@dataclass(frozen=True, slots=True)
class ListResult:
    """The first entries of a directory by name; ``total`` is None when the scan stopped early."""

    path: str
    entries: tuple[ListEntry, ...]
    truncated: bool
    total: int | None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """A file replaced atomically; ``created`` says no file was there before."""

    path: str
    size: int
    created: bool


@dataclass(frozen=True, slots=True)
class EditResult:
    """An exact-substring edit applied atomically."""

    path: str
    replacements: int
    size: int


class WorkspaceScope:
    """Bounded file operations confined to one workspace root.

    The root itself is trusted configuration (it may be reached through a
    symlink); everything below it comes from the model and is contained.
    Paths are relative and ``/``-separated. Each operation raises
    ``WorkspaceEscape`` for a path that would leave the root,
    ``WorkspaceError`` for other refusals, ``InvalidValue`` for bad
    arguments and ``WorkspaceIOFailure`` when the filesystem fails.
    Reads of files with several hard links are refused unless
    ``allow_hardlinked_reads`` is set: the other name may be outside.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_read_bytes: int = MAX_READ_BYTES,
        max_write_bytes: int = MAX_WRITE_BYTES,
        max_list_entries: int = MAX_LIST_ENTRIES,
        max_list_scan: int = MAX_LIST_SCAN,
        max_path_chars: int = MAX_PATH_CHARS,
        allow_hardlinked_reads: bool = False,
    ) -> None:
        if os.name != "posix" or not (_O_DIRECTORY and _O_NOFOLLOW):
            raise ConfigError("workspace containment needs POSIX openat semantics", key="workspace")
        for key, value in (
            ("max_read_bytes", max_read_bytes),
            ("max_write_bytes", max_write_bytes),
            ("max_list_entries", max_list_entries),
            ("max_list_scan", max_list_scan),
            ("max_path_chars", max_path_chars),
        ):
            if value < 1:
                raise ConfigError("must be a positive integer", key=key)
        self.root = os.fspath(root)
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_list_entries = max_list_entries
        self.max_list_scan = max_list_scan
        self.max_path_chars = max_path_chars
        self.allow_hardlinked_reads = allow_hardlinked_reads
        self._root_prefixes: tuple[tuple[str, ...], ...] | None = None

    def check(self, path: str) -> str:
        """The normalised relative form of ``path``, or a refusal; pure, no I/O.

        Refuses non-strings, NUL bytes, unencodable text, paths longer than
        ``max_path_chars``, names longer than NAME_MAX, absolute paths and
        any ``..`` that climbs above the root. Links are judged later, by
        the walk, because only the filesystem knows them.
        """
        return "/".join(self._parts(path)) or "."

    async def read(self, path: str, *, offset: int = 0, limit: int | None = None) -> ReadResult:
        """Read at most ``min(limit, max_read_bytes)`` bytes starting at byte ``offset``."""
        parts = self._parts(path)
        if offset < 0:
            raise InvalidValue("offset must not be negative")
        if limit is not None and limit < 1:
            raise InvalidValue("limit must be at least 1")
        want = min(limit or self.max_read_bytes, self.max_read_bytes)
        return await self._run(parts, self._read, offset, want)

    async def list(self, path: str = ".", *, limit: int | None = None) -> ListResult:
        """The first ``min(limit, max_list_entries)`` entries of a directory, sorted by name."""
        parts = self._parts(path)
        if limit is not None and limit < 1:
            raise InvalidValue("limit must be at least 1")
        want = min(limit or self.max_list_entries, self.max_list_entries)
        return await self._run(parts, self._list, want)

    async def write(self, path: str, content: str) -> WriteResult:
        """Replace (or create) a file atomically, creating missing parent directories.

        Refuses links anywhere in the path, a link or non-regular file at the
        target, a hard-linked target, and content over ``max_write_bytes``.
        """
        parts = self._parts(path)
        data = _encoded(content, "content")
        if len(data) > self.max_write_bytes:
            raise WorkspaceError(
                f"content is {len(data)} bytes; the limit is {self.max_write_bytes}",
                reason="too_large",
            )
        return await self._run(parts, self._write, data)

    async def edit(self, path: str, old: str, new: str, *, count: int = 1) -> EditResult:
        """Replace exactly ``count`` occurrences of ``old`` with ``new``, atomically.

        ``old`` absent, or present a different number of times than
        ``count``, is a refusal that leaves the file untouched. The file is
        refused if it changed between reading and replacing it.
        """
        parts = self._parts(path)
        if not old:
            raise InvalidValue("old must not be empty")
        if count < 1:
            raise InvalidValue("count must be at least 1")
        _encoded(old, "old")
        _encoded(new, "new")
        return await self._run(parts, self._edit, old, new, count)

    # -- lexical checks (event loop thread, no I/O) --------------------------------------

    def _parts(self, path: object) -> tuple[str, ...]:
        if not isinstance(path, str):
            raise WorkspaceError("path must be a string", reason="invalid_path")
        if "\x00" in path:
            raise WorkspaceError("path contains a NUL byte", reason="invalid_path")
        if len(path) > self.max_path_chars:
            raise WorkspaceError(
                f"path is {len(path)} characters; the limit is {self.max_path_chars}",
                reason="too_long",
            )
        try:
            path.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise WorkspaceError("path is not valid Unicode text", reason="invalid_path") from exc
        if path.startswith("/"):
            # Not echoed: an absolute path may spell out the host's own layout.
            raise WorkspaceEscape(
                "absolute paths are refused; give a path relative to the workspace",
                reason="absolute",
            )
        shown = _shown(path)
        parts = tuple(part for part in path.split("/") if part not in ("", "."))
        depth = 0
        for part in parts:
            if len(os.fsencode(part)) > MAX_NAME_BYTES:
                raise WorkspaceError(
                    f"{shown}: a name is longer than {MAX_NAME_BYTES} bytes", reason="too_long"
                )
            depth += -1 if part == ".." else 1
            if depth < 0:
                raise WorkspaceEscape(f"{shown}: '..' leads above the workspace", reason="parent")
        return parts

    async def _run(self, parts: tuple[str, ...], fn: Callable[..., _T], *args: object) -> _T:
        shown = "/".join(parts) or "."
        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, parts, shown, *args))
        except OSError as exc:
            raise _mapped(exc, shown) from exc

    # -- operations (worker thread) ------------------------------------------------------

    def _read(self, parts: tuple[str, ...], shown: str, offset: int, want: int) -> ReadResult:
        fd, _ = self._resolve(parts, shown, final="file", follow=True)
        try:
            info = os.fstat(fd)
            _require_regular(info, shown)
            if info.st_nlink > 1 and not self.allow_hardlinked_reads:
                raise WorkspaceEscape(
                    f"{_shown(shown)}: has several hard links and may live outside the workspace",
                    reason="hardlink",
                )
            data = _pread_bounded(fd, offset, want)
        finally:
            os.close(fd)
        at_end = offset + len(data) >= info.st_size
        if b"\x00" in data:
            text, consumed, binary = "", len(data), True
        else:
            text, consumed = _decode_window(data, final=at_end)
            binary = False
        next_offset = offset + consumed
        return ReadResult(
            path=shown,
            text=text,
            offset=offset,
            next_offset=next_offset,
            size=info.st_size,
            truncated=next_offset < info.st_size,
            binary=binary,
        )

    def _list(self, parts: tuple[str, ...], shown: str, want: int) -> ListResult:
        fd, _ = self._resolve(parts, shown, final="dir", follow=True)
        seen = 0
        try:
            with os.scandir(fd) as entries:

                def named() -> Iterator[tuple[str, EntryKind]]:
                    # Counts as it goes so a huge directory is read only up to the scan limit.
                    nonlocal seen
                    for entry in entries:
                        seen += 1
                        if seen > self.max_list_scan:
                            return
                        yield entry.name, _kind(entry)

                chosen = heapq.nsmallest(want, named())
            sizes = [_size(fd, name) if kind == "file" else None for name, kind in chosen]
        finally:
            os.close(fd)
        complete = seen <= self.max_list_scan
        return ListResult(
            path=shown,
            entries=tuple(
                ListEntry(name, kind, size)
                for (name, kind), size in zip(chosen, sizes, strict=True)
            ),
            truncated=not complete or seen > want,
            total=seen if complete else None,
        )

    def _write(self, parts: tuple[str, ...], shown: str, data: bytes) -> WriteResult:
        parent, name = self._resolve(parts, shown, final="parent", follow=False, create_dirs=True)
        try:
            existing = _lstat(parent, name)
            if existing is not None:
                _require_replaceable(existing, shown)
            mode = None if existing is None else stat.S_IMODE(existing.st_mode) & 0o777
            _replace_atomically(parent, name, data, mode=mode, expect=None, shown=shown)
        finally:
            os.close(parent)
        return WriteResult(path=shown, size=len(data), created=existing is None)

    def _edit(
        self, parts: tuple[str, ...], shown: str, old: str, new: str, count: int
    ) -> EditResult:
        parent, name = self._resolve(parts, shown, final="parent", follow=False)
        try:
            fd = _open_entry(parent, name, _FILE_FLAGS, create=False)
            if isinstance(fd, str):
                raise WorkspaceError(
                    f"{_shown(shown)}: edits never follow symbolic links", reason="symlink"
                )
            try:
                info = os.fstat(fd)
                _require_replaceable(info, shown)
                if info.st_size > self.max_write_bytes:
                    raise _too_large(shown, info.st_size, self.max_write_bytes)
                data = _pread_bounded(fd, 0, self.max_write_bytes + 1)
            finally:
                os.close(fd)
            if len(data) > self.max_write_bytes:
                raise _too_large(shown, len(data), self.max_write_bytes)
            updated = _replace_text(data, old, new, count, shown).encode()
            if len(updated) > self.max_write_bytes:
                raise _too_large(shown, len(updated), self.max_write_bytes)
            mode = stat.S_IMODE(info.st_mode) & 0o777
            _replace_atomically(parent, name, updated, mode=mode, expect=info, shown=shown)
        finally:
            os.close(parent)
        return EditResult(path=shown, replacements=count, size=len(updated))

    # -- the contained walk --------------------------------------------------------------

    def _resolve(
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
        pending = deque(parts)
        hops = 0
        try:
            while pending:
                name = pending.popleft()
                last = not pending
                if name == "..":
                    if len(stack) == 1:
                        reason = "symlink" if hops else "parent"
                        raise WorkspaceEscape(
                            f"{_shown(shown)}: leads outside the workspace", reason=reason
                        )
                    os.close(stack.pop())
                    continue
                if last and final == "parent":
                    return stack.pop(), name
                want_dir = not last or final == "dir"
                flags = _DIR_FLAGS if want_dir else _FILE_FLAGS
                opened = _open_entry(stack[-1], name, flags, create=create_dirs and want_dir)
                if isinstance(opened, int):
                    if last:
                        return opened, ""
                    stack.append(opened)
                    continue
                if not follow:
                    raise WorkspaceError(
                        f"{_shown(shown)}: writes and edits never follow symbolic links",
                        reason="symlink",
                    )
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkspaceError(
                        f"{_shown(shown)}: too many symbolic links", reason="symlink"
                    )
                absolute, target = self._link_target(opened, shown)
                if absolute:
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending.extendleft(reversed(target))
            # The path named a directory: the root, or one reached through `..` or a link.
            if final == "dir":
                return stack.pop(), ""
            raise WorkspaceError(f"{_shown(shown)}: is a directory", reason="not_a_file")
        finally:
            for fd in stack:
                os.close(fd)

    def _open_root(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except OSError as exc:
            raise WorkspaceIOFailure("the workspace root is unavailable") from exc

    def _link_target(self, target: str, shown: str) -> tuple[bool, tuple[str, ...]]:
        """A link's target as components to walk; absolute targets must name the root."""
        parts = tuple(part for part in target.split("/") if part not in ("", "."))
        if not target.startswith("/"):
            return False, parts
        for prefix in self._prefixes():
            if parts[: len(prefix)] == prefix:
                return True, parts[len(prefix) :]
        raise WorkspaceEscape(
            f"{_shown(shown)}: a symbolic link leads outside the workspace", reason="symlink"
        )

    def _prefixes(self) -> tuple[tuple[str, ...], ...]:
        # Both spellings of the root count: as configured and with its own links resolved.
        if self._root_prefixes is None:
            spellings = {os.path.abspath(self.root), os.path.realpath(self.root)}
            self._root_prefixes = tuple(
                tuple(part for part in spelling.split("/") if part) for spelling in spellings
            )
        return self._root_prefixes


def _open_entry(dir_fd: int, name: str, flags: int, *, create: bool) -> int | str:
    """Open ``name`` in ``dir_fd`` without following it; a link's target instead of an fd."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        # mkdir never follows a link at its final component; a racing creator is fine.
        with suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        return _open_entry(dir_fd, name, flags, create=False)
    except OSError as exc:
        if exc.errno not in _MAYBE_SYMLINK:
            raise
        try:
            return os.readlink(name, dir_fd=dir_fd)
        except OSError:
            raise exc from None


def _replace_atomically(
    parent: int,
    name: str,
    data: bytes,
    *,
    mode: int | None,
    expect: os.stat_result | None,
    shown: str,
) -> None:
    """Write a temporary sibling, fsync it, rename it over ``name``, fsync the directory.

    ``rename`` replaces the directory entry in ``parent`` (already opened and
    contained): a link swapped in at ``name`` is replaced, never written
    through. ``expect`` refuses the rename when the target is no longer the
    file that was read.
    """
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
        if expect is not None and not _same_file(_lstat(parent, name), expect):
            raise WorkspaceError(
                f"{_shown(shown)}: changed while it was being edited; read it again",
                reason="changed",
            )
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        renamed = True
        os.fsync(parent)
    finally:
        if not renamed:
            with suppress(OSError):
                os.unlink(temp, dir_fd=parent)


def _replace_text(data: bytes, old: str, new: str, count: int, shown: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{_shown(shown)}: is not UTF-8 text", reason="not_text") from exc
    found = text.count(old)
    if found == 0:
        raise WorkspaceError(
            f"{_shown(shown)}: the text to replace was not found", reason="no_match"
        )
    if found != count:
        raise WorkspaceError(
            f"{_shown(shown)}: the text to replace occurs {found} times, expected {count}; "
            "include more surrounding text or pass the exact count",
            reason="ambiguous",
        )
    return text.replace(old, new, count)


def _pread_bounded(fd: int, offset: int, limit: int) -> bytes:
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


def _decode_window(data: bytes, *, final: bool) -> tuple[str, int]:
    """Decode ``data``; a multibyte character cut at the end is left for the next read."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=final)
    consumed = len(data) - len(decoder.getstate()[0])
    if data and consumed == 0:
        # A limit smaller than one character must still make progress.
        return decoder.decode(b"", final=True), len(data)
    return text, consumed


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _same_file(now: os.stat_result | None, then: os.stat_result) -> bool:
    if now is None:
        return False
    return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
        then.st_dev,
        then.st_ino,
        then.st_size,
        then.st_mtime_ns,
    )


def _require_regular(info: os.stat_result, shown: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise WorkspaceError(f"{_shown(shown)}: is a directory", reason="not_a_file")
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(f"{_shown(shown)}: is not a regular file", reason="not_a_file")


def _require_replaceable(info: os.stat_result, shown: str) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise WorkspaceError(
            f"{_shown(shown)}: is a symbolic link; writes never replace links", reason="symlink"
        )
    _require_regular(info, shown)
    if info.st_nlink > 1:
        raise WorkspaceEscape(
            f"{_shown(shown)}: has several hard links; writing it could change a file "
            "outside the workspace",
            reason="hardlink",
        )


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _size(dir_fd: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    except OSError:
        return None


def _encoded(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(f"{what} is not valid Unicode text") from exc


def _too_large(shown: str, size: int, limit: int) -> WorkspaceError:
    return WorkspaceError(
        f"{_shown(shown)}: {size} bytes is over the {limit}-byte limit", reason="too_large"
    )


def _shown(path: str) -> str:
    # Quoted so that a path ending in "token" or "passwd" is not mistaken for a secret
    # assignment ("token: x") by the error tree's redaction.
    return f"'{path}'" if len(path) <= _SHOWN_CHARS else f"'{path[: _SHOWN_CHARS - 1]}…'"


def _mapped(exc: OSError, shown: str) -> HostkitError:
    """The boundary mapping: a bounded hostkit error naming only the relative path."""
    code = exc.errno or 0
    if code in _USER_ERRNOS:
        reason, text = _USER_ERRNOS[code]
        return WorkspaceError(f"{_shown(shown)}: {text}", reason=reason)
    return WorkspaceIOFailure(
        f"{_shown(shown)}: {os.strerror(code) if code else type(exc).__name__}",
        retryable=code in _RETRYABLE,
    )
