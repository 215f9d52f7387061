"""A per-user cache of the tokenizer fields read from a GGUF file.

``gguf``'s reader builds every header field through numpy views: for
SmolLM2's 49k-token vocabulary that is about six seconds of CPU at every
local-model start, for a few megabytes of strings. The fields are derived
data of one file, so they are kept beside the model cache as JSON, keyed by
the file's identity (resolved path, size, modification time, inode,
device): a changed or replaced file misses and is read again. The cache is
an optimisation only: an entry that is missing, unreadable, oversized or
for another identity is ignored, and a cache that cannot be written is not
an error. Nor is one that is not to be trusted (``_cache_trust``: a
symbolic link, another user's folder or entry, one others may write): it is
neither read nor written, only the read is paid. Blocking file I/O: called
from a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostkit.adapters._cache_trust import cache_folder, check_file
from hostkit.adapters._model_source import cache_root
from hostkit.errors import ConfigError

__all__ = ["FIELDS_SUBDIR", "cached_fields"]

FIELDS_SUBDIR = "gguf-fields"
# Bumped when the stored form changes: old entries then simply miss.
_FORMAT = 1
# A vocabulary of 256k tokens with its merges stays well below this.
_MAX_ENTRY_BYTES = 64 * 1024 * 1024
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def cached_fields(
    path: Path,
    read: Callable[[Path], dict[str, Any]],
    *,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """``read(path)``, or what it returned before for this very file."""
    try:
        stat = path.stat()
        root = cache_root(cache_dir)
    except (OSError, ConfigError):
        return read(path)
    identity: list[Any] = [_FORMAT, str(path.resolve()), stat.st_size, stat.st_mtime_ns]
    identity += [stat.st_ino, stat.st_dev]
    entry = f"{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]}.json"
    stored = _load(root, entry, identity)
    if stored is not None:
        return stored
    fields = read(path)
    _store(root, entry, {"identity": identity, "fields": fields})
    return fields


def _folder(root: Path, *, create: bool) -> int | None:
    """The trusted fields folder's descriptor; None when absent or not to be trusted."""
    try:
        return cache_folder(root, FIELDS_SUBDIR, create=create)
    except ConfigError:
        return None


def _load(root: Path, entry: str, identity: list[Any]) -> dict[str, Any] | None:
    folder = _folder(root, create=False)
    if folder is None:
        return None
    try:
        handle = os.fdopen(os.open(entry, _READ, dir_fd=folder), "rb")
    except OSError:
        return None
    finally:
        os.close(folder)
    try:
        with handle:
            info = os.fstat(handle.fileno())
            check_file(info, root / FIELDS_SUBDIR / entry)
            if info.st_size > _MAX_ENTRY_BYTES:
                return None
            data = json.loads(handle.read())
    except (OSError, ValueError, ConfigError):
        return None
    if not isinstance(data, dict) or data.get("identity") != identity:
        return None
    fields = data.get("fields")
    return fields if isinstance(fields, dict) else None


def _store(root: Path, entry: str, data: dict[str, Any]) -> None:
    """Write the entry whole or not at all (a temporary file renamed into place)."""
    folder = _folder(root, create=True)
    if folder is None:
        return
    temporary = f".partial-{os.getpid()}-{secrets.token_hex(6)}.json"
    try:
        descriptor = os.open(temporary, _NEW, 0o600, dir_fd=folder)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(data, out, ensure_ascii=False)
        os.replace(temporary, entry, src_dir_fd=folder, dst_dir_fd=folder)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
    finally:
        os.close(folder)
