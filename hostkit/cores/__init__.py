"""Agent Cores: ``agent.yaml`` + ``agent/`` in a Git repository, run at a Host-owned revision.

An Agent Core owns its manifest, slots and authored tools; the Host owns
which commit is live (a ref in the core's repository it moves only after
promotion gates), rolls it back, and pins every turn to one revision.
"""

from hostkit.cores._loaded import (
    MANIFEST_FILE,
    PACKAGE_DIR,
    CoreLocation,
    LoadedCore,
    live_core,
    load_core,
    package_name,
)
from hostkit.cores._manifest import (
    BUILTIN_RULES,
    MAX_MANIFEST_BYTES,
    Approval,
    CoreLimits,
    CoreManifest,
    SlotsSpec,
    capability_problem,
    load_manifest,
    manifest_error,
)
from hostkit.cores._repository import CommitInfo, CoreRepository

__all__ = [
    "BUILTIN_RULES",
    "MANIFEST_FILE",
    "MAX_MANIFEST_BYTES",
    "PACKAGE_DIR",
    "Approval",
    "CommitInfo",
    "CoreLimits",
    "CoreLocation",
    "CoreManifest",
    "CoreRepository",
    "LoadedCore",
    "SlotsSpec",
    "capability_problem",
    "live_core",
    "load_core",
    "load_manifest",
    "manifest_error",
    "package_name",
]
