"""The approval fingerprint: what an approval was given for, as one digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from hostkit.effects._catalog import CatalogEntry
from hostkit.freeze import thaw
from hostkit.types import TurnExecutionContext

__all__ = ["approval_fingerprint", "fingerprint_of"]


def fingerprint_of(
    core_revision: str, capability_snapshot: Mapping[str, Any], entry: CatalogEntry
) -> str:
    """Digest of the core revision, the capability snapshot and the effect entry.

    The snapshot carries the effective approval policy, so a change to any of
    the four makes a different fingerprint: cached and durable approvals given
    under the old one no longer apply.
    """
    payload = json.dumps(
        [
            core_revision,
            thaw(capability_snapshot),
            entry.effect,
            entry.source,
            thaw(entry.tool.parameters),
        ],
        sort_keys=True,
        default=str,
    )
    return "apf-" + hashlib.sha256(payload.encode()).hexdigest()[:32]


def approval_fingerprint(context: TurnExecutionContext, entry: CatalogEntry) -> str:
    return fingerprint_of(context.core_revision, context.capability_snapshot, entry)
