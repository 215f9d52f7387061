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
from hostkit.cores._starter import STARTER_TOOL, init_core, starter_files

__all__ = [
    "MAX_MANIFEST_BYTES",
    "STARTER_TOOL",
    "Approval",
    "CoreLimits",
    "CoreManifest",
    "SlotsSpec",
    "capability_problem",
    "init_core",
    "starter_files",
]
