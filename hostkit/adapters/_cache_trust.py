"""Trust in the model cache: serve a file only when nobody but this user could have put it there.

A GGUF under the pinned name is served without hashing 98 MB at every start,
so its presence must mean that hostkit wrote it. That holds only when the
folders hostkit creates in the cache root (``smollm2-<sha12>/``,
``gguf-fields/``) and the files in them are this user's, are not symbolic
links and are writable by nobody else. They are opened through directory
descriptors with ``O_NOFOLLOW``, so what was checked is what is read or
written: nothing can be swapped in between.

The root itself (``$HOSTKIT_MODEL_CACHE``, else the XDG cache) is the
user's choice and may be a symbolic link they made (a cache on another
disk). It is resolved once, and the real directory must belong to this user
or to root and, if others may write to it, be sticky like ``/tmp``: then
nobody else can rename hostkit's folders inside it either. Blocking file
I/O: called from worker threads.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from hostkit.errors import ConfigError

__all__ = [
    "CACHE_ENV",
    "FOLDER_MODE",
    "cache_folder",
    "check_file",
    "lstat_file",
    "open_folder",
    "trusted_root",
    "unwritable",
]

CACHE_ENV = "HOSTKIT_MODEL_CACHE"
FOLDER_MODE = 0o700
# Group or others may write: they could replace what hostkit checked.
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def untrusted(where: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{where} {why}; hostkit trusts only what it created there: remove it, "
        f"or set {CACHE_ENV} to a folder of your own",
        key=CACHE_ENV,
    )


def unwritable(where: Path, exc: OSError, action: str) -> ConfigError:
    """The one line for a cache folder that cannot be created, read or written."""
    return ConfigError(
        f"cannot {action} the model cache {where}: {exc.strerror or exc}; "
        f"set {CACHE_ENV} to a writable directory",
        key=CACHE_ENV,
    )


def _check(info: os.stat_result, where: Path, *, folder: bool) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise untrusted(where, "is a symbolic link")
    if folder and not stat.S_ISDIR(info.st_mode):
        raise untrusted(where, "is not a directory")
    if not folder and not stat.S_ISREG(info.st_mode):
        raise untrusted(where, "is not a regular file")
    if info.st_uid != os.getuid():
        raise untrusted(where, f"belongs to uid {info.st_uid}")
    if info.st_mode & _WRITABLE_BY_OTHERS:
        raise untrusted(where, "is writable by others")


def check_file(info: os.stat_result, where: Path) -> None:
    """Raise ``ConfigError`` unless ``info`` is this user's regular file that only it may write."""
    _check(info, where, folder=False)


def trusted_root(root: Path, *, create: bool) -> Path | None:
    """``root`` resolved (its symbolic links followed), checked, created with ``create``.

    None when it does not exist and ``create`` is false.
    """
    real = Path(os.path.realpath(root))
    if create:
        try:
            real.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise unwritable(root, exc, "create") from exc
    try:
        info = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(info.st_mode):  # replaced since it was resolved
        raise untrusted(real, "is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise untrusted(real, "is not a directory")
    if info.st_uid not in (os.getuid(), 0):
        raise untrusted(real, f"belongs to uid {info.st_uid}")
    if info.st_mode & _WRITABLE_BY_OTHERS and not info.st_mode & stat.S_ISVTX:
        raise untrusted(real, "is writable by others")
    return real


def open_folder(root: Path, name: str, *, create: bool) -> int | None:
    """A descriptor of the trusted folder ``root/name`` (``root`` from ``trusted_root``).

    Created with mode 0o700 when ``create``; None when it does not exist and
    ``create`` is false. Raises ``ConfigError`` when it is not to be trusted.
    The caller closes the descriptor.
    """
    where = root / name
    try:
        root_fd = os.open(root, _DIR_FLAGS)
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, FOLDER_MODE, dir_fd=root_fd)
            try:
                # lstat first for a clear message; the descriptor's fstat is what counts.
                _check(os.stat(name, dir_fd=root_fd, follow_symlinks=False), where, folder=True)
            except FileNotFoundError:
                return None
            folder_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
        finally:
            os.close(root_fd)
    except OSError as exc:
        raise unwritable(where, exc, "create" if create else "read") from exc
    try:
        _check(os.fstat(folder_fd), where, folder=True)
    except BaseException:
        os.close(folder_fd)
        raise
    return folder_fd


def cache_folder(root: Path, name: str, *, create: bool) -> int | None:
    """A descriptor of the trusted folder ``name`` in the cache ``root`` (checked first).

    None when the root or the folder does not exist and ``create`` is false.
    """
    real = trusted_root(root, create=create)
    return None if real is None else open_folder(real, name, create=create)


def lstat_file(folder_fd: int, name: str, where: Path) -> os.stat_result | None:
    """The checked ``lstat`` of ``name`` in a trusted folder; None when it does not exist."""
    try:
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    check_file(info, where)
    return info
