"""A per-user cache of the tokenizer fields read from a GGUF file.

``gguf``'s reader builds every header field through numpy views: for
SmolLM2's 49k-token vocabulary that is about six seconds of CPU at every
local-model start, for a few megabytes of strings. The fields are derived
data of one file, so they are kept beside the model cache as JSON, keyed by
the file's identity (resolved path, size, modification time, inode,
device): a changed or replaced file misses and is read again. The cache is
an optimisation only: an entry that is missing, unreadable, oversized or
for another identity is ignored, and a cache that cannot be written is not
an error. Blocking file I/O: called from a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostkit.adapters._model_source import model_cache_dir
from hostkit.errors import ConfigError

__all__ = ["FIELDS_SUBDIR", "cached_fields"]

FIELDS_SUBDIR = "gguf-fields"
# Bumped when the stored form changes: old entries then simply miss.
_FORMAT = 1
# A vocabulary of 256k tokens with its merges stays well below this.
_MAX_ENTRY_BYTES = 64 * 1024 * 1024


def cached_fields(
    path: Path,
    read: Callable[[Path], dict[str, Any]],
    *,
    cache_dir: Path | None = None,
) -> dict[str, Any]:
    """``read(path)``, or what it returned before for this very file."""
    try:
        stat = path.stat()
        folder = (model_cache_dir() if cache_dir is None else cache_dir) / FIELDS_SUBDIR
    except (OSError, ConfigError):
        return read(path)
    identity: list[Any] = [_FORMAT, str(path.resolve()), stat.st_size, stat.st_mtime_ns]
    identity += [stat.st_ino, stat.st_dev]
    entry = folder / f"{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]}.json"
    stored = _load(entry, identity)
    if stored is not None:
        return stored
    fields = read(path)
    _store(folder, entry, {"identity": identity, "fields": fields})
    return fields


def _load(entry: Path, identity: list[Any]) -> dict[str, Any] | None:
    try:
        with entry.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size > _MAX_ENTRY_BYTES:
                return None
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("identity") != identity:
        return None
    fields = data.get("fields")
    return fields if isinstance(fields, dict) else None


def _store(folder: Path, entry: Path, data: dict[str, Any]) -> None:
    """Write the entry whole or not at all (a temporary file renamed into place)."""
    temporary: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".partial-", suffix=".json")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False)
        os.replace(temporary, entry)
        temporary = None
    except (OSError, TypeError, ValueError):
        pass
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
