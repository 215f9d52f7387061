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
entry and never writes through one. The walk and these link-safe primitives
live in ``_openat``.

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

import functools
import hashlib
import heapq
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio

from hostkit.builtins.files._errors import WorkspaceError, WorkspaceEscape
from hostkit.builtins.files._openat import (
    FILE_FLAGS,
    O_DIRECTORY,
    O_NOFOLLOW,
    ContainedRoot,
    Identities,
    ProtectedState,
    collapsed,
    decode_window,
    entry_size,
    lstat,
    mapped,
    open_entry,
    pread_bounded,
    quoted,
    replace_atomically,
    require_regular,
    require_replaceable,
    same_file,
)
from hostkit.builtins.files._openat import MAX_SYMLINK_HOPS as MAX_SYMLINK_HOPS
from hostkit.errors import ConfigError, InvalidValue
from hostkit.types import is_count

__all__ = [
    "MAX_LIST_ENTRIES",
    "MAX_LIST_SCAN",
    "MAX_NAME_BYTES",
    "MAX_PATH_CHARS",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "EditResult",
    "ListEntry",
    "ListResult",
    "ReadResult",
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

# A write's approved state is the content's sha256, read in chunks of this size; past
# _HASH_MAX_BYTES, or when the file changed while it was read, the file's identity, size,
# modification time and change time stand in for it (the change time because no
# unprivileged process can set it back: a file rewritten with its old size and its
# modification time restored still differs).
_HASH_CHUNK = 1024 * 1024
_HASH_MAX_BYTES = 64 * 1024 * 1024
_CHANGED = (
    "{shown}: changed since this write was approved (the diff the approver saw no longer "
    "applies); read it again"
)
_T = TypeVar("_T")
EntryKind = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One bounded window of a file.

    ``next_offset`` is where a follow-up read continues, always on a UTF-8
    character boundary; ``truncated`` says bytes remain after it. A window
    containing NUL bytes is reported ``binary`` with empty ``text``.
    ``before`` and ``after`` are the text just outside the window (``around``
    bytes each, undecodable bytes replaced), read only to redact it: a window
    whose edges cut a secret is masked from its context (``redact_window``).
    """

    path: str
    text: str
    offset: int
    next_offset: int
    size: int
    truncated: bool
    binary: bool
    before: str = ""
    after: str = ""


@dataclass(frozen=True, slots=True)
class ListEntry:
    """One directory entry; links are reported as links, never followed.

    A name that is not valid UTF-8 is ``escaped``: its undecodable bytes are
    shown as ``\\xNN`` so the name is safe in every view, transcript and
    request; no files tool opens it by that spelling (see docs/cli.md).
    """

    name: str
    kind: EntryKind
    size: int | None
    escaped: bool = False


@dataclass(frozen=True, slots=True)
class ListResult:
    """Entries of a directory by name, one page of them; ``truncated`` says more follow the
    last, ``total`` counts all (every page), None when the scan stopped early."""

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
class WriteTarget:
    """What a write to a path would replace, read once.

    ``state`` is what a later ``write(expect=...)`` compares: ``absent``,
    the sha256 of a regular file's content (past 64 MiB, or when it changed
    while it was read, its identity, size, modification and change times), or
    ``other`` (a link, a directory, a hard-linked file: a write refuses
    those). ``text`` is that same
    content as UTF-8 text when an approver may be shown a diff against it,
    else None; ``hidden`` then says why an existing file's content is not
    shown. Both come from one read: the diff an approver sees is of the
    bytes the approval is bound to.
    """

    state: str
    size: int | None = None
    text: str | None = None
    hidden: str | None = None

    def summary(self) -> str:
        """One line for the approver: a new file, or what the write replaces."""
        if self.state == "absent":
            return "a new file"
        if self.size is None:
            # A link, a directory or a hard-linked file (the write refuses those), or a
            # file hostkit may not read (the write replaces it): nothing of it is shown.
            return "an existing entry hostkit does not show (not a file it may read)"
        if self.text is not None:
            return f"an existing file of {self.size} bytes"
        return f"replaces an existing file of {self.size} bytes whole: {self.hidden}, not shown"


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
    ``protected`` names the Host's own state (``HostConfig.state_paths()``):
    every operation refuses it by identity with ``WorkspaceEscape``
    (reason ``host_state``), and ``list`` leaves it out, even when the
    workspace overlaps it. ``instructions`` names files at the root that every
    new session reads as instructions (``AGENTS.md``): they may be read, but a
    write or an edit of one, however spelled, is ``WorkspaceEscape`` (reason
    ``instructions``): one conversation's agent must not instruct the next.
    ``min_free_bytes`` refuses a write or an edit (reason ``disk_reserve``) that
    would leave the file system it lands on fewer free bytes than that: the
    Host keeps ``host.artifact_reserve_mb`` back for its database and backups.
    With ``protected`` state it applies only on a file system that holds some
    of that state; a workspace on a file system of its own is bounded by it.
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
        protected: Iterable[str | os.PathLike[str]] = (),
        instructions: Iterable[str] = (),
        min_free_bytes: int = 0,
    ) -> None:
        if os.name != "posix" or not (O_DIRECTORY and O_NOFOLLOW):
            raise ConfigError("workspace containment needs POSIX openat semantics", key="workspace")
        for key, value in (
            ("max_read_bytes", max_read_bytes),
            ("max_write_bytes", max_write_bytes),
            ("max_list_entries", max_list_entries),
            ("max_list_scan", max_list_scan),
            ("max_path_chars", max_path_chars),
        ):
            if not is_count(value):  # NaN passes "< 1" and then bounds nothing
                raise ConfigError("must be a positive integer", key=key)
        if not is_count(min_free_bytes, low=0):
            raise ConfigError("must be a whole number of bytes", key="min_free_bytes")
        self.root = os.fspath(root)
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_list_entries = max_list_entries
        self.max_list_scan = max_list_scan
        self.max_path_chars = max_path_chars
        self.allow_hardlinked_reads = allow_hardlinked_reads
        self.min_free_bytes = min_free_bytes
        self._protected = ProtectedState(protected)
        self._contained = ContainedRoot(self.root, protected=self._protected)
        self._instructions = frozenset(name.casefold() for name in instructions)

    def check(self, path: str) -> str:
        """The normalised relative form of ``path``, or a refusal; pure, no I/O.

        Refuses non-strings, NUL bytes, unencodable text, paths longer than
        ``max_path_chars``, names longer than NAME_MAX, absolute paths and
        any ``..`` that climbs above the root. Links are judged later, by
        the walk, because only the filesystem knows them.
        """
        return "/".join(self._parts(path)) or "."

    async def read(
        self, path: str, *, offset: int = 0, limit: int | None = None, around: int = 0
    ) -> ReadResult:
        """Read at most ``min(limit, max_read_bytes)`` bytes starting at byte ``offset``,
        and up to ``around`` bytes on each side of them (``before``, ``after``)."""
        parts = self._parts(path)
        if offset < 0:
            raise InvalidValue("offset must not be negative")
        if limit is not None and limit < 1:
            raise InvalidValue("limit must be at least 1")
        if around < 0:
            raise InvalidValue("around must not be negative")
        want = min(limit or self.max_read_bytes, self.max_read_bytes)
        return await self._run(parts, self._read, offset, want, around)

    async def list(
        self, path: str = ".", *, limit: int | None = None, after: str | None = None
    ) -> ListResult:
        """The first ``min(limit, max_list_entries)`` entries of a directory, sorted by
        their shown name (``ListEntry.name``); with ``after``, only those whose shown
        name sorts after it: a listing goes on from the last name of its previous page."""
        parts = self._parts(path)
        if limit is not None and limit < 1:
            raise InvalidValue("limit must be at least 1")
        want = min(limit or self.max_list_entries, self.max_list_entries)
        return await self._run(parts, self._list, want, after)

    async def write(self, path: str, content: str, *, expect: str | None = None) -> WriteResult:
        """Replace (or create) a file atomically, creating missing parent directories.

        Refuses links anywhere in the path, a link or non-regular file at the
        target, a hard-linked target, and content over ``max_write_bytes``.
        ``expect`` (a ``state`` taken earlier, when the write was approved)
        refuses the write with ``changed`` when the target is no longer in that
        state: the approver saw a diff against what was there then.
        """
        parts = self._parts(path)
        data = _encoded(content, "content")
        if len(data) > self.max_write_bytes:
            raise WorkspaceError(
                f"content is {len(data)} bytes; the limit is {self.max_write_bytes}",
                reason="too_large",
            )
        return await self._run(parts, self._write, data, expect)

    async def target(self, path: str) -> WriteTarget:
        """What a write to ``path`` would replace now (see ``WriteTarget``); its ``state``
        is what ``write(expect=...)`` compares. A missing directory on the way is
        ``absent``: the write creates it."""
        parts = self._parts(path)
        try:
            return await self._run(parts, self._target)
        except WorkspaceError as exc:
            if exc.reason == "not_found":
                return WriteTarget("absent")
            raise

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

    def open_directory(self, path: str) -> int:
        """Worker thread (blocking): open a directory inside the workspace; return its descriptor.

        The directory is reached by the same contained walk as every other
        operation (no ``..``, absolute or symlink escape) and held open, so a
        caller that works *in* it (``terminal.run``'s working directory) uses
        that very directory whatever is swapped in afterwards. The caller owns
        the descriptor and closes it. Raises what the other operations raise.
        """
        parts = self._parts(path)
        shown = "/".join(parts) or "."
        try:
            fd, _ = self._contained.resolve(parts, shown, final="dir", follow=True)
        except OSError as exc:
            raise mapped(exc, shown) from exc
        return fd

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
        shown = quoted(path)
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
            raise mapped(exc, shown) from exc

    # -- operations (worker thread) ------------------------------------------------------

    def _read(
        self, parts: tuple[str, ...], shown: str, offset: int, want: int, around: int
    ) -> ReadResult:
        fd, _ = self._contained.resolve(parts, shown, final="file", follow=True)
        try:
            info = os.fstat(fd)
            require_regular(info, shown)
            if info.st_nlink > 1 and not self.allow_hardlinked_reads:
                raise WorkspaceEscape(
                    f"{quoted(shown)}: has several hard links and may live outside the workspace",
                    reason="hardlink",
                )
            data = pread_bounded(fd, offset, want)
            at_end = offset + len(data) >= info.st_size
            before = after = ""
            if b"\x00" in data:
                text, consumed, binary = "", len(data), True
            else:
                text, consumed = decode_window(data, final=at_end)
                binary = False
                if around:
                    start = max(0, offset - around)
                    before = _context(pread_bounded(fd, start, offset - start))
                    after = _context(pread_bounded(fd, offset + consumed, around))
        finally:
            os.close(fd)
        next_offset = offset + consumed
        return ReadResult(
            path=shown,
            text=text,
            offset=offset,
            next_offset=next_offset,
            size=info.st_size,
            truncated=next_offset < info.st_size,
            binary=binary,
            before=before,
            after=after,
        )

    def _list(self, parts: tuple[str, ...], shown: str, want: int, after: str | None) -> ListResult:
        fd, _ = self._contained.resolve(parts, shown, final="dir", follow=True)
        seen = hidden = skipped = 0
        try:
            ids = self._contained.protected.identities()
            here = os.fstat(fd)
            with os.scandir(fd) as entries:

                def named() -> Iterator[tuple[str, str, EntryKind]]:
                    # Counts as it goes so a huge directory is read only up to the scan limit.
                    nonlocal seen, hidden, skipped
                    for entry in entries:
                        seen += 1
                        if seen > self.max_list_scan:
                            return
                        kind = _kind(entry)
                        if ids and _is_host_state(ids, here, fd, entry, kind):
                            hidden += 1
                            continue
                        safe = _safe_name(entry.name)[0]
                        if after is not None and safe <= after:
                            skipped += 1
                            continue
                        yield safe, entry.name, kind

                chosen = heapq.nsmallest(want, named())
            sizes = [entry_size(fd, name) if kind == "file" else None for _, name, kind in chosen]
        finally:
            os.close(fd)
        complete = seen <= self.max_list_scan
        shown_count = seen - hidden
        return ListResult(
            path=shown,
            entries=tuple(
                _entry(name, kind, size)
                for (_, name, kind), size in zip(chosen, sizes, strict=True)
            ),
            truncated=not complete or shown_count - skipped > want,
            total=shown_count if complete else None,
        )

    def _write(
        self, parts: tuple[str, ...], shown: str, data: bytes, expect: str | None
    ) -> WriteResult:
        walked = collapsed(parts)  # what the creating walk makes (it never follows a link)
        if len(walked) > 1 and walked[0].casefold() in self._instructions:
            # A directory of that name at the root would keep the operator from ever
            # writing the instructions file (bootstrap reads nothing from a directory).
            raise WorkspaceEscape(
                f"{quoted(shown)}: the root's {walked[0]!r} is the instructions file's name; "
                "only the operator makes it",
                reason="instructions",
            )
        parent, name = self._contained.resolve(
            parts, shown, final="parent", follow=False, create_dirs=True
        )
        try:
            self._refuse_instructions(parent, name, shown)
            existing = lstat(parent, name)
            if existing is not None:
                require_replaceable(existing, shown)
            same: os.stat_result | None = None
            if expect is not None:
                found, same = _entry_target(parent, name, text_limit=0)
                if found.state != expect:
                    raise WorkspaceError(_CHANGED.format(shown=quoted(shown)), reason="changed")
            mode = None if existing is None else stat.S_IMODE(existing.st_mode) & 0o777
            # Approved onto "absent": a file created since is never replaced.
            replace_atomically(
                parent,
                name,
                data,
                mode=mode,
                expect=same,
                create=expect == "absent",
                shown=shown,
                keep_free=self._keep_free(parent),
            )
        finally:
            os.close(parent)
        return WriteResult(path=shown, size=len(data), created=existing is None)

    async def check_instructions(self, path: str) -> None:
        """``WorkspaceEscape`` (reason ``instructions``) when ``path`` names an instructions
        file at the root; nothing else is judged (the operation itself reports the rest).
        Creates nothing: what an edit checks before anyone is asked."""
        parts = self._parts(path)
        try:
            await self._run(parts, self._instructions_at)
        except WorkspaceError as exc:
            if exc.reason == "instructions":
                raise

    def _instructions_at(self, parts: tuple[str, ...], shown: str) -> None:
        parent, name = self._contained.resolve(parts, shown, final="parent", follow=False)
        try:
            self._refuse_instructions(parent, name, shown)
        finally:
            os.close(parent)

    def _refuse_instructions(self, parent: int, name: str, shown: str) -> None:
        """Blocking: refuse ``name`` in directory ``parent`` when it is an instructions
        file at the root (compared by the directory's identity, so no spelling of the
        path, through a link to the root or not, reaches it)."""
        if name.casefold() not in self._instructions:
            return
        here, root = os.fstat(parent), os.stat(self.root)
        if (here.st_dev, here.st_ino) == (root.st_dev, root.st_ino):
            raise WorkspaceEscape(
                f"{quoted(shown)} holds the instructions every new session reads; "
                "only the operator changes it",
                reason="instructions",
            )

    def _target(self, parts: tuple[str, ...], shown: str) -> WriteTarget:
        parent, name = self._contained.resolve(parts, shown, final="parent", follow=False)
        try:
            self._refuse_instructions(parent, name, shown)
            return _entry_target(parent, name, text_limit=self.max_write_bytes)[0]
        finally:
            os.close(parent)

    def _keep_free(self, parent: int) -> int:
        """Worker thread: the free bytes a write into ``parent`` must leave (``min_free_bytes``).

        The reserve is for the Host's own state: it applies where some of it lives
        (or everywhere when none is named), never on a file system the workspace
        has to itself, which the operator sized for it.
        """
        if not self.min_free_bytes or not self._protected:
            return self.min_free_bytes
        return self.min_free_bytes if os.fstat(parent).st_dev in self._state_devices() else 0

    def _state_devices(self) -> set[int]:
        """The file systems holding the Host's state (or where its missing files would go)."""
        ids = self._protected.identities()
        devices = {device for device, _ in ids.directories | ids.files}
        return devices | {device for (device, _), _ in ids.prefixes}

    def _edit(
        self, parts: tuple[str, ...], shown: str, old: str, new: str, count: int
    ) -> EditResult:
        parent, name = self._contained.resolve(parts, shown, final="parent", follow=False)
        try:
            self._refuse_instructions(parent, name, shown)
            fd = open_entry(parent, name, FILE_FLAGS, create=False)
            if isinstance(fd, str):
                raise WorkspaceError(
                    f"{quoted(shown)}: edits never follow symbolic links", reason="symlink"
                )
            try:
                info = os.fstat(fd)
                require_replaceable(info, shown)
                if info.st_size > self.max_write_bytes:
                    raise _too_large(shown, info.st_size, self.max_write_bytes)
                data = pread_bounded(fd, 0, self.max_write_bytes + 1)
            finally:
                os.close(fd)
            if len(data) > self.max_write_bytes:
                raise _too_large(shown, len(data), self.max_write_bytes)
            updated = _replace_text(data, old, new, count, shown, self.max_write_bytes)
            mode = stat.S_IMODE(info.st_mode) & 0o777
            replace_atomically(
                parent,
                name,
                updated,
                mode=mode,
                expect=info,
                shown=shown,
                keep_free=self._keep_free(parent),
            )
        finally:
            os.close(parent)
        return EditResult(path=shown, replacements=count, size=len(updated))


def _replace_text(data: bytes, old: str, new: str, count: int, shown: str, max_bytes: int) -> bytes:
    """``data`` with ``count`` occurrences of ``old`` replaced, refused over ``max_bytes``.

    The size is checked before the text is built: a million one-byte matches each
    replaced by kilobytes would otherwise build gigabytes first, then refuse them.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{quoted(shown)}: is not UTF-8 text", reason="not_text") from exc
    found = text.count(old)
    if found == 0:
        raise WorkspaceError(
            f"{quoted(shown)}: the text to replace was not found", reason="no_match"
        )
    if found != count:
        raise WorkspaceError(
            f"{quoted(shown)}: the text to replace occurs {found} times, expected {count}; "
            "include more surrounding text or pass the exact count",
            reason="ambiguous",
        )
    size = len(data) + count * (len(new.encode()) - len(old.encode()))
    if size > max_bytes:
        raise _too_large(shown, size, max_bytes)
    return text.replace(old, new, count).encode()


def _entry_target(
    parent: int, name: str, *, text_limit: int
) -> tuple[WriteTarget, os.stat_result | None]:
    """(what ``name`` in ``parent`` is, the stat of the file hashed); see ``WriteTarget``.

    The content is hashed in chunks, up to the size the file had when opened;
    a file of at most ``text_limit`` bytes keeps those same bytes, to be shown
    as text when they are UTF-8.
    """
    try:
        fd = open_entry(parent, name, FILE_FLAGS, create=False)
    except FileNotFoundError:
        return WriteTarget("absent"), None
    except OSError:
        return WriteTarget("other"), None
    if isinstance(fd, str):
        return WriteTarget("other"), None  # a symbolic link
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return WriteTarget("other"), None
        if info.st_size > _HASH_MAX_BYTES:
            return _stat_target(info, "too large to show"), info
        digest, kept = _hashed(fd, info.st_size, text_limit)
        after = os.fstat(fd)
        if not same_file(after, info):
            # Written to while hashed (a process appending to it): the bytes read are no
            # one state of the file, so its stat after the read stands in and nothing is
            # shown. A later check fingerprints a file that stopped changing by its
            # content, and one still changing by a later stat: the write approved on
            # this state is refused as changed.
            return _stat_target(after, "changing while it was read"), after
        text, hidden = _shown_text(kept, text_limit)
        state = f"sha256:{digest}"
        return WriteTarget(state, info.st_size, text=text, hidden=hidden), info
    finally:
        os.close(fd)


def _hashed(fd: int, size: int, text_limit: int) -> tuple[str, list[bytes] | None]:
    """(sha256 hex, the bytes when ``size`` is at most ``text_limit``) of the first
    ``size`` bytes: never further, however far a file that keeps growing goes on."""
    digest = hashlib.sha256()
    kept: list[bytes] | None = [] if size <= text_limit else None
    offset = 0
    while offset < size and (chunk := os.pread(fd, min(_HASH_CHUNK, size - offset), offset)):
        digest.update(chunk)
        offset += len(chunk)
        if kept is not None:
            kept.append(chunk)
    return digest.hexdigest(), kept


def _stat_target(info: os.stat_result, hidden: str) -> WriteTarget:
    """A file whose identity, size, modification and change times stand in for its content."""
    state = f"stat:{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
    return WriteTarget(state, info.st_size, hidden=hidden)


def _shown_text(kept: list[bytes] | None, limit: int) -> tuple[str | None, str | None]:
    """(the text an approver may see, why not) of a file's content kept while hashing."""
    if kept is None:
        return None, f"over {limit} bytes"
    data = b"".join(kept)
    if b"\x00" in data:
        return None, "binary"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"


def _context(data: bytes) -> str:
    """Bytes just outside a read's window, as text to redact the window with (never shown)."""
    return data.decode("utf-8", "replace")


def _entry(name: str, kind: EntryKind, size: int | None) -> ListEntry:
    safe, escaped = _safe_name(name)
    return ListEntry(safe, kind, size, escaped)


def _safe_name(name: str) -> tuple[str, bool]:
    """A directory entry's name made safe at the boundary: (text, escaped).

    ``scandir`` decodes undecodable bytes as lone surrogates, which no JSON
    encoder, provider or SQLite text column accepts as UTF-8; they become a
    visible ``\\xNN`` instead.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace"), True
    return name, False


def _is_host_state(
    ids: Identities, here: os.stat_result, fd: int, entry: os.DirEntry[str], kind: EntryKind
) -> bool:
    """Whether a listed entry is the Host's own state (named by it, or the same inode)."""
    if ids.is_name(here, entry.name):
        return True
    if kind == "dir":
        # A mount point's own identity is only seen by a stat, not by the entry's inode.
        try:
            info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        return ids.is_directory(info)
    return (here.st_dev, entry.inode()) in ids.files


def _kind(entry: os.DirEntry[str]) -> EntryKind:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def _encoded(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(f"{what} is not valid Unicode text") from exc


def _too_large(shown: str, size: int, limit: int) -> WorkspaceError:
    return WorkspaceError(
        f"{quoted(shown)}: {size} bytes is over the {limit}-byte limit", reason="too_large"
    )
