"""Review tokens: an operator's "yes" bound to one exact change between two commits.

What promotion cannot judge by itself (a change of MCP declarations and
their authority, new third-party dependencies) waits for a human. The token
the diff prints is a digest over the core, both revisions and what was
shown; promotion recomputes it for the candidate it is about to move to, so
a token for any other change (a later commit on ``HEAD``, another diff) is
stale and the gate stays shut.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from hostkit.freeze import thaw

__all__ = ["DEPENDENCY_REVIEW_PREFIX", "REVIEW_PREFIX", "dependency_review_token", "review_token"]

REVIEW_PREFIX = "mcp-review:"
DEPENDENCY_REVIEW_PREFIX = "deps-review:"


def review_token(core_id: str, live: str | None, candidate: str, diff: Mapping[str, Any]) -> str:
    """``mcp-review:<sha256>`` over {core_id, from, to, the MCP security diff}."""
    return _token(REVIEW_PREFIX, core_id, live, candidate, thaw(diff))


def dependency_review_token(
    core_id: str, live: str | None, candidate: str, changes: tuple[str, ...]
) -> str:
    """``deps-review:<sha256>`` over {core_id, from, to, the dependency changes}."""
    return _token(DEPENDENCY_REVIEW_PREFIX, core_id, live, candidate, list(changes))


def _token(prefix: str, core_id: str, live: str | None, candidate: str, reviewed: Any) -> str:
    payload = {"core_id": core_id, "from": live, "to": candidate, "diff": reviewed}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return prefix + hashlib.sha256(text.encode()).hexdigest()
