"""Agent Cores: ``agent.yaml`` + ``agent/`` in a Git repository, run at a Host-owned revision.

An Agent Core owns its manifest, slots and authored tools; the Host owns
which commit is live (a ref in the core's repository it moves only after
promotion gates), rolls it back, and pins every turn to one revision.

What reads a core's Git repository (``CoreRepository``, ``CoreRegistry``, the
mirror, ``init_core``) loads on first use: a Host without cores never imports
dulwich.
"""

import typing

from hostkit import _lazy
from hostkit.cores._imports import hold_package, import_parents, release_package
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
    effect_policy,
    load_manifest,
    manifest_error,
    policy_rules,
)
from hostkit.cores._review import (
    DEPENDENCY_REVIEW_PREFIX,
    REVIEW_PREFIX,
    dependency_review_token,
    review_token,
)
from hostkit.cores._revisions import CoreDiff, CoreStatus, FileChange, RevisionInfo
from hostkit.cores._sdk import MAX_EMITS, AuthorContext, AuthorTurn, Emitter
from hostkit.cores._security_diff import mcp_security_diff
from hostkit.cores._slots import (
    MAX_BOOTSTRAP_CHARS,
    MAX_OUTPUT_CHARS,
    SlotFailed,
    SlotName,
    SlotRuntime,
)
from hostkit.cores._state import CORE_SCOPE, StateHandle, StateRuntime, StateScopes
from hostkit.cores._test_gate import TestSandbox

if typing.TYPE_CHECKING:
    from hostkit.cores._mirror import heal_mirror, mirror_live
    from hostkit.cores._registry import CoreRegistry
    from hostkit.cores._repository import CommitInfo, CoreRepository
    from hostkit.cores._starter import STARTER_TOOL, init_core, starter_files

# The names that load on first use, each with its module.
_REPOSITORY = {
    "CommitInfo": "hostkit.cores._repository",
    "CoreRegistry": "hostkit.cores._registry",
    "CoreRepository": "hostkit.cores._repository",
    "STARTER_TOOL": "hostkit.cores._starter",
    "heal_mirror": "hostkit.cores._mirror",
    "init_core": "hostkit.cores._starter",
    "mirror_live": "hostkit.cores._mirror",
    "starter_files": "hostkit.cores._starter",
}

__all__ = [
    "BUILTIN_RULES",
    "CORE_SCOPE",
    "DEPENDENCY_REVIEW_PREFIX",
    "MANIFEST_FILE",
    "MAX_BOOTSTRAP_CHARS",
    "MAX_EMITS",
    "MAX_MANIFEST_BYTES",
    "MAX_OUTPUT_CHARS",
    "PACKAGE_DIR",
    "REVIEW_PREFIX",
    "STARTER_TOOL",
    "Approval",
    "AuthorContext",
    "AuthorTurn",
    "CommitInfo",
    "CoreDiff",
    "CoreLimits",
    "CoreLocation",
    "CoreManifest",
    "CoreRegistry",
    "CoreRepository",
    "CoreStatus",
    "Emitter",
    "FileChange",
    "LoadedCore",
    "RevisionInfo",
    "SlotFailed",
    "SlotName",
    "SlotRuntime",
    "SlotsSpec",
    "StateHandle",
    "StateRuntime",
    "StateScopes",
    "TestSandbox",
    "capability_problem",
    "dependency_review_token",
    "effect_policy",
    "heal_mirror",
    "hold_package",
    "import_parents",
    "init_core",
    "live_core",
    "load_core",
    "load_manifest",
    "manifest_error",
    "mcp_security_diff",
    "mirror_live",
    "package_name",
    "policy_rules",
    "release_package",
    "review_token",
    "starter_files",
]

__getattr__, __dir__ = _lazy.attributes(__name__, _REPOSITORY)
