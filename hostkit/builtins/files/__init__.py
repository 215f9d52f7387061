"""Workspace files: ``WorkspaceScope`` containment and the ``files.*`` effects.

``WorkspaceScope`` keeps every model-supplied path beneath one root (the
walk is the check: each component opened relative to its parent with
``O_NOFOLLOW``); ``workspace_tools(scope)`` returns ``files.read``,
``files.list``, ``files.write`` and ``files.edit`` bound to it as ordinary
authored tools, so the effect pipeline treats them like any other effect.

Given ``protected`` paths (``HostConfig.state_paths()``), the scope refuses
the Host's own state by identity even inside an overlapping workspace.

Inside, modules import one way only: ``_files`` (the tools) → ``_workspace``
(the scope) → ``_openat`` (link-safe primitives, the Host's state by
identity) → ``_errors``.
"""

from hostkit.builtins.files._errors import WorkspaceError, WorkspaceEscape, WorkspaceIOFailure
from hostkit.builtins.files._files import workspace_tools
from hostkit.builtins.files._workspace import (
    EditResult,
    ListEntry,
    ListResult,
    ReadResult,
    WorkspaceScope,
    WriteResult,
)

__all__ = [
    "EditResult",
    "ListEntry",
    "ListResult",
    "ReadResult",
    "WorkspaceError",
    "WorkspaceEscape",
    "WorkspaceIOFailure",
    "WorkspaceScope",
    "WriteResult",
    "workspace_tools",
]
