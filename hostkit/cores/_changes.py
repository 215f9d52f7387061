"""Comparing two revisions of a core: dependency changes and a redacted, bounded patch.

A dependency change (the manifest's ``dependencies`` or ``requirements.txt``)
means new third-party code runs with the Host's authority, so promotion
flags it for a human. The patch is shown to operators: it goes through the
same redaction as the security diff (``hostkit.cores._redact``), with the
MCP env values and hidden argv words of either manifest.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from hostkit.cores._manifest import CoreManifest
from hostkit.cores._redact import REDACTED, manifest_secrets, redact_manifest, redact_text

__all__ = [
    "MAX_DEPENDENCY_CHANGES",
    "MAX_PATCH_CHARS",
    "REQUIREMENTS",
    "dependency_changes",
    "manifest_secrets",
    "redact_text",
    "unified_patch",
]

REQUIREMENTS = "requirements.txt"
MAX_PATCH_CHARS = 100_000
MAX_DEPENDENCY_CHANGES = 50
_COMMENT = re.compile(r"(^|\s)#.*$")
# What a patch says above a file (not the manifest) where a secret value was hidden.
_HIDDEN_NOTE = (
    "text equal to a secret agent.yaml declares; read these lines in the repository "
    "before promoting"
)


def dependency_changes(
    live: CoreManifest | None,
    live_requirements: bytes | None,
    candidate: CoreManifest,
    candidate_requirements: bytes | None,
) -> tuple[str, ...]:
    """One line per added or removed dependency (manifest or requirements.txt); () if none."""
    changes = [
        *_list_changes("dependency", live.dependencies if live else (), candidate.dependencies),
        *_list_changes(
            REQUIREMENTS, _requirements(live_requirements), _requirements(candidate_requirements)
        ),
    ]
    if len(changes) > MAX_DEPENDENCY_CHANGES:
        more = len(changes) - MAX_DEPENDENCY_CHANGES + 1
        changes = [*changes[: MAX_DEPENDENCY_CHANGES - 1], f"… and {more} more"]
    return tuple(changes)


def unified_patch(
    changes: Iterable[tuple[str, bytes | None, bytes | None]],
    *,
    secrets: Iterable[str] = (),
    manifest: str | None = None,
    max_chars: int = MAX_PATCH_CHARS,
) -> str:
    """A unified diff of (path, before, after) text files, redacted and cut at ``max_chars``.

    The file named ``manifest`` (``agent.yaml``) has its secret values hidden
    where the document holds them, however spelled. In any other file a
    literal secret value is hidden too, and the file's part of the patch
    says so first: the author chooses those values, so a reviewer must read
    such lines in the repository rather than trust the patch.
    """
    hidden = tuple(secrets)
    parts: list[str] = []
    size = 0
    for path, before, after in changes:
        old, new = _text(before), _text(after)
        if old is None or new is None:
            chunk = f"Binary file {path} differs\n"
        else:
            if path == manifest:
                old, new = redact_manifest(old, hidden), redact_manifest(new, hidden)
            chunk = "".join(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile="/dev/null" if before is None else f"a/{path}",
                    tofile="/dev/null" if after is None else f"b/{path}",
                )
            )
            if chunk and not chunk.endswith("\n"):
                chunk += "\n"
        shown = redact_text(chunk, hidden)
        if shown != chunk and path != manifest:
            shown = f"warning: {path}: {REDACTED} below hides {_HIDDEN_NOTE}\n{shown}"
        chunk = shown
        if size + len(chunk) > max_chars:
            parts.append(chunk[: max(0, max_chars - size)])
            parts.append(f"\n… patch cut at {max_chars} characters\n")
            break
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def _text(data: bytes | None) -> str | None:
    if data is None:
        return ""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _requirements(data: bytes | None) -> list[str]:
    if data is None:
        return []
    kept = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        # pip's comment: a '#' at the start or after whitespace (a URL's '#egg=' stays).
        line = _COMMENT.sub("", line).strip()
        if line:
            kept.append(line)
    return kept


def _list_changes(label: str, before: Iterable[str], after: Iterable[str]) -> list[str]:
    old, new = list(before), list(after)
    added = [item for item in new if item not in old]
    removed = [item for item in old if item not in new]
    return [
        *(f"{label} added: {redact_text(item, ())[:200]}" for item in added),
        *(f"{label} removed: {redact_text(item, ())[:200]}" for item in removed),
    ]
