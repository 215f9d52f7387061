"""The one redaction of a core's operator views: the security diff and the patch.

Both are recorded and shown (``core_history``, ``hostkit core diff``, the
CoreHistory widget), so they hide the same things the same way: the MCP env
values either manifest declares (wherever they are repeated) and what every
view of a command line hides (``hostkit.types._shown``). In ``agent.yaml``
the patch hides them where the document holds them (``redact_manifest``),
however the author spelled them (quotes, escapes, folded lines); in every
file, their literal values too.
"""

from __future__ import annotations

import json
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

__all__ = [
    "REDACTED",
    "manifest_secrets",
    "origin",
    "redact_manifest",
    "redact_text",
    "safe_argv",
]


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


def redact_manifest(text: str, secrets: tuple[str, ...]) -> str:
    """``agent.yaml``'s text with every MCP env value, and every argv word holding a
    secret, replaced where it is written: an escaped or quoted spelling of a value
    does not hold the value literally, so replacing values alone would miss it.

    Text that does not parse is returned as it is (its values were never read,
    so no secret of it is known; the literal redaction still runs over it).
    """
    from hostkit.cores._yaml import YamlProblem, value_spans  # PyYAML loads with a manifest

    try:
        document, spans = value_spans(text)
    except (YamlProblem, RecursionError):
        return text
    servers = document.get("mcp") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        return text
    # (start, end, what is shown there instead)
    hidden: list[tuple[int, int, str]] = []
    for name, server in servers.items():
        if not isinstance(server, dict):
            continue
        env = server.get("env")
        if isinstance(env, dict):
            hidden.extend((*spans[("mcp", name, "env", key)], REDACTED) for key in env)
        command = server.get("command")
        if isinstance(command, list):
            # An item keeps its other words (an ``sh -c`` script stays readable), written
            # as a YAML string again: the secret is gone, however it was spelled.
            hidden.extend(
                (
                    *spans[("mcp", name, "command", index)],
                    json.dumps(redact_text(word, secrets), ensure_ascii=False),
                )
                for index, word in enumerate(command)
                if isinstance(word, str) and any(secret in word for secret in secrets)
            )
    for start, end, shown in sorted(hidden, reverse=True):
        # A block scalar's span ends with its line break: the next key keeps its line.
        kept = "\n" if text[start:end].endswith("\n") else ""
        text = text[:start] + shown + kept + text[end:]
    return text
