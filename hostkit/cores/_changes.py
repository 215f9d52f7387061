"""Comparing two revisions of a core: dependency changes and a redacted, bounded patch.

A dependency change (the manifest's ``dependencies``, ``requirements.txt`` or
a file it includes) means new third-party code runs with the Host's
authority, so promotion flags it for a human. The patch is shown to operators: it goes through the
same redaction as the security diff (``hostkit.cores._redact``), with the
MCP env values and hidden argv words of either manifest.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Iterable, Mapping

from hostkit.cores._manifest import CoreManifest
from hostkit.cores._redact import REDACTED, manifest_secrets, redact_manifest, redact_text

__all__ = [
    "MAX_DEPENDENCY_CHANGES",
    "MAX_PATCH_CHARS",
    "REQUIREMENTS",
    "TOO_LARGE",
    "dependency_changes",
    "included_requirements",
    "manifest_secrets",
    "redact_text",
    "unified_patch",
]

REQUIREMENTS = "requirements.txt"
MAX_PATCH_CHARS = 100_000
MAX_DEPENDENCY_CHANGES = 50
_COMMENT = re.compile(r"(^|\s)#.*$")
# pip's include lines: -r/-c FILE, -rFILE, --requirement[=]FILE, --constraint[=]FILE.
_INCLUDE = re.compile(r"^(?:-[rc]\s*|--(?:requirement|constraint)(?:\s*=\s*|\s+))(\S+)$")
# What a patch says above a file (not the manifest) where a secret value was hidden.
_HIDDEN_NOTE = (
    "text equal to a secret agent.yaml declares; read these lines in the repository "
    "before promoting"
)


# A side of a change the patch did not read (past a bound): the file is said to differ.
TOO_LARGE = b"\x00too large"


def dependency_changes(
    live: CoreManifest | None,
    live_requirements: Mapping[str, bytes | None],
    candidate: CoreManifest,
    candidate_requirements: Mapping[str, bytes | None],
) -> tuple[str, ...]:
    """One line per added or removed dependency or pip option, of the manifest and of
    each requirements file (``requirements.txt`` and the files it includes, by path);
    () if none."""
    paths = sorted(
        {*live_requirements, *candidate_requirements}, key=lambda p: (p != REQUIREMENTS, p)
    )
    changes = [
        *_list_changes("dependency", live.dependencies if live else (), candidate.dependencies),
        *(
            change
            for path in paths
            for change in _list_changes(
                path,
                _requirements(live_requirements.get(path)),
                _requirements(candidate_requirements.get(path)),
            )
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
    where the document holds them, however spelled. Anywhere else (another
    file, or elsewhere in the manifest) a literal secret value is hidden too,
    and the file's part of the patch says so first: the author chooses those
    values, so a reviewer must read such lines in the repository rather than
    trust the patch.
    """
    hidden = tuple(secrets)
    parts: list[str] = []
    size = 0
    for path, before, after in changes:
        old, new = _text(before), _text(after)
        if before is TOO_LARGE or after is TOO_LARGE:
            chunk = f"File {path} differs (too large to show: read it in the repository)\n"
        elif old is None or new is None:
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
        # In agent.yaml the values are already hidden where the document holds them: a
        # value hidden anywhere else there too (an env value "allow" was, in the
        # capabilities) is said, as in any other file.
        said = chunk if path != manifest else redact_text(chunk, ())
        if shown != said:
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


def included_requirements(path: str, data: bytes) -> list[str]:
    """The files a requirements file includes (``-r``/``-c`` and their long forms), as
    paths inside the core, relative to the including file as pip reads them. An
    include by URL or from outside the core is not followed: its line is compared."""
    found = []
    for line in _requirements(data):
        match = _INCLUDE.match(line)
        if match is None:
            continue
        target = match.group(1)
        if "://" in target or target.startswith("/"):
            continue
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if joined != ".." and not joined.startswith("../"):
            found.append(joined)
    return found


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
