"""The one redaction of a core's operator views: the security diff and the patch.

Both are recorded and shown (``core_history``, ``hostkit core diff``, the
CoreHistory widget), so they hide the same things the same way: the MCP env
values either manifest declares (wherever they are repeated) and what every
view of a command line hides (``hostkit.types._shown``). The patch cannot
parse argv out of YAML, so the argv words hidden in the diff are hidden in the
patch as literal values.
"""

from __future__ import annotations

from collections.abc import Iterable

from hostkit.cores._manifest import CoreManifest
from hostkit.types import (
    MIN_SECRET,
    REDACTED,
    argv_hidden_words,
    origin,
    redact_text,
    safe_argv,
)

__all__ = ["REDACTED", "manifest_secrets", "origin", "redact_text", "safe_argv"]


def manifest_secrets(*manifests: CoreManifest | None) -> tuple[str, ...]:
    """What no operator view may show, longest first: every MCP env value of the
    manifests and every argv word their security diff redacts."""
    values = {
        value
        for manifest in manifests
        if manifest is not None
        for server in manifest.mcp.values()
        for value in server.env.values()
    }
    ordered = _longest_first(values)
    hidden = {
        word
        for manifest in manifests
        if manifest is not None
        for server in manifest.mcp.values()
        if server.command is not None
        for word in argv_hidden_words(server.command, ordered)
    }
    return _longest_first(values | hidden)


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    # Longest first, so a value containing another is replaced whole.
    return tuple(sorted({v for v in values if len(v) >= MIN_SECRET}, key=len, reverse=True))
