"""The approval fingerprint: what an approval was given for, as one digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from hostkit.effects._catalog import CatalogEntry
from hostkit.freeze import thaw
from hostkit.types import TurnExecutionContext

__all__ = ["approval_fingerprint", "digest_of", "fingerprint_of"]


def fingerprint_of(
    core_revision: str, capability_snapshot: Mapping[str, Any], entry: CatalogEntry
) -> str:
    """Digest of the core revision, the capability snapshot and the effect entry.

    The snapshot carries the effective approval policy, so a change to any of
    the four makes a different fingerprint: cached and durable approvals given
    under the old one no longer apply.
    """
    parts: list[Any] = [entry.effect, entry.source, thaw(entry.tool.parameters)]
    if entry.capability is not None or entry.binding is not None:
        # A connection-bound entry (MCP): the server's declaration, and what the server
        # says the tool does, are part of what was approved.
        parts += [entry.capability, entry.binding, entry.tool.description]
    return digest_of(core_revision, capability_snapshot, *parts)


def digest_of(core_revision: str, capability_snapshot: Mapping[str, Any], *parts: Any) -> str:
    """The fingerprint of anything approved under ``core_revision`` and the snapshot."""
    payload = json.dumps(
        [core_revision, thaw(capability_snapshot), *parts], sort_keys=True, default=str
    )
    return "apf-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def approval_fingerprint(context: TurnExecutionContext, entry: CatalogEntry) -> str:
    return fingerprint_of(context.core_revision, context.capability_snapshot, entry)
