"""The workspace's error vocabulary, below both the scope and its link-safe walk.

``WorkspaceScope`` (``_workspace``) and the primitives it walks with
(``_openat``) raise the same refusals; keeping the classes here lets each
import them without importing the other.
"""

from __future__ import annotations

from hostkit.errors import PolicyRefusal, RuntimeFailure, UserError

__all__ = ["WorkspaceError", "WorkspaceEscape", "WorkspaceIOFailure"]


class WorkspaceError(UserError):
    """A workspace operation was refused; ``reason`` is a short stable code.

    Codes: invalid_path, too_long, not_found, not_a_file, not_a_directory,
    permission, symlink, too_large, not_text, no_match, ambiguous, changed.
    Messages name the workspace-relative path, never the host's root.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class WorkspaceEscape(WorkspaceError, PolicyRefusal):
    """The path would leave the workspace: absolute, ``..``, a link or a hard link out,
    or it reaches the Host's own state inside an overlapping workspace; or a write
    would change the agents' instructions file at the workspace's root.

    Reasons: absolute, parent, symlink, hardlink, host_state, instructions.
    """


class WorkspaceIOFailure(RuntimeFailure):
    """The filesystem failed a valid operation (disk full, I/O error, root missing)."""
