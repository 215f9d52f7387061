"""Agent Cores: ``agent.yaml`` + ``agent/`` in a Git repository, run at a Host-owned revision.

An Agent Core owns its manifest, slots and authored tools; the Host owns
which commit is live (a ref in the core's repository it moves only after
promotion gates), rolls it back, and pins every turn to one revision.
"""

from hostkit.cores._manifest import (
    MAX_MANIFEST_BYTES,
    Approval,
    CoreLimits,
    CoreManifest,
    SlotsSpec,
    capability_problem,
)
from hostkit.cores._revisions import CoreDiff, CoreStatus, FileChange, RevisionInfo
from hostkit.cores._security_diff import REVIEW_PREFIX, mcp_security_diff, review_token
from hostkit.cores._starter import STARTER_TOOL, init_core, starter_files

__all__ = [
    "MAX_MANIFEST_BYTES",
    "REVIEW_PREFIX",
    "STARTER_TOOL",
    "Approval",
    "CoreDiff",
    "CoreLimits",
    "CoreManifest",
    "CoreStatus",
    "FileChange",
    "RevisionInfo",
    "SlotsSpec",
    "capability_problem",
    "init_core",
    "mcp_security_diff",
    "review_token",
    "starter_files",
]
