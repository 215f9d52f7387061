"""Processes the Host starts: the owned-tree lifecycle and the ``terminal.*`` effects.

``run_process`` spawns an argument vector as an owned process tree under a
``ProcessSupervisor`` (deadline, cancellation through a ``ProcessControl``,
bounded tails plus full artifacts in an opaque per-session directory) and
returns a frozen ``ProcessOutcome``. ``owned_process`` gives a caller that
talks to its child itself (an MCP stdio server) the same owned tree: spawned
the same way, snapshotted, and ended with everything it ever started.
``TerminalRuns`` binds the three terminal effects (``terminal.run``,
``terminal.status``, ``terminal.stop``) to one supervisor and one
``hostkit.builtins.files.WorkspaceScope``;
with a ``RunJournal`` its background runs are durable (``COMPLETED_EVENT``
announces each end once it is persisted). ``reclaim_expired_artifacts`` deletes
the output files past their retention, in bounded passes (``ArtifactCursor``
says where the next one resumes).

``SandboxPolicy`` says how an agent's processes are isolated (bubblewrap by
default, docs/effects.md "Sandbox"); ``sandbox_argv`` builds the launcher any
spawner can reuse (``mask_plan`` hides the Host's state in what it shows),
``probe_bubblewrap`` says whether it works here, and ``SandboxUnavailable``
is the typed refusal when it does not.

Inside, modules import one way only: ``_terminal`` → ``_terminal_journal``,
``_terminal_checks`` →
``_process``, ``_owned`` and ``_sandbox`` → ``_process_streams``, ``_process_tree`` and
``_mounts`` → ``_reaper`` and ``_seccomp`` (the sandbox's system-call filter). The
working directory is opened through the files family's public interface.
``_artifact_retention`` stands alone.
"""

from hostkit.builtins.process._artifact_retention import (
    ArtifactCursor,
    reclaim_expired_artifacts,
)
from hostkit.builtins.process._mounts import MountedTree
from hostkit.builtins.process._owned import OwnedProcess, owned_process
from hostkit.builtins.process._process import (
    ProcessControl,
    ProcessOutcome,
    ProcessOwner,
    ProcessSupervisor,
    StreamCapture,
    opaque_artifact_dir,
    run_process,
)
from hostkit.builtins.process._process_streams import load_artifact_key
from hostkit.builtins.process._sandbox import (
    INSTALL_HINT,
    UNSANDBOXED,
    ResourceLimits,
    SandboxPolicy,
    SandboxProbe,
    SandboxUnavailable,
    mask_plan,
    probe_bubblewrap,
    sandbox_argv,
    visible_roots,
)
from hostkit.builtins.process._terminal import (
    DEFAULT_ENV_ALLOWLIST,
    EXECUTION_CONTROL_TARGETS,
    TerminalRuns,
)
from hostkit.builtins.process._terminal_journal import COMPLETED_EVENT, RunJournal

__all__ = [
    "COMPLETED_EVENT",
    "DEFAULT_ENV_ALLOWLIST",
    "EXECUTION_CONTROL_TARGETS",
    "INSTALL_HINT",
    "UNSANDBOXED",
    "ArtifactCursor",
    "MountedTree",
    "OwnedProcess",
    "ProcessControl",
    "ProcessOutcome",
    "ProcessOwner",
    "ProcessSupervisor",
    "ResourceLimits",
    "RunJournal",
    "SandboxPolicy",
    "SandboxProbe",
    "SandboxUnavailable",
    "StreamCapture",
    "TerminalRuns",
    "load_artifact_key",
    "mask_plan",
    "opaque_artifact_dir",
    "owned_process",
    "probe_bubblewrap",
    "reclaim_expired_artifacts",
    "run_process",
    "sandbox_argv",
    "visible_roots",
]
