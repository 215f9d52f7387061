"""The workspace file effects: ``files.read``, ``files.list``, ``files.write``, ``files.edit``.

Each is an ordinary authored tool bound to one ``WorkspaceScope``, so the
pipeline (capability snapshot, policy, deadline, views) treats it like any
other effect, and containment lives in one place: the scope. Arguments carry
pydantic ``Field`` defaults so the JSON schema the model sees states the
bounds; outputs are small strings or dicts sized for the model view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from hostkit.builtins.files._workspace import ListResult, ReadResult, WorkspaceScope
from hostkit.effects import (
    MAX_MODEL_VIEW_CHARS,
    AuthoredTool,
    Prepared,
    ToolContext,
    unified_diff,
)

__all__ = ["ESCAPED_MARK", "READ_FOOTER_CHARS", "workspace_tools"]

# Room kept in the model view for the read footer, so a full window plus its footer
# is never cut by the view's own truncation (one byte decodes to at most one character).
READ_FOOTER_CHARS = 300
# Follows a name that is not valid UTF-8, shown with its bad bytes as \\xNN.
ESCAPED_MARK = " [name not UTF-8, shown escaped; files tools cannot open it]"
_PATH_HELP = (
    "Path relative to the workspace root, '/'-separated; absolute paths and '..' "
    "out of the workspace are refused."
)


def workspace_tools(scope: WorkspaceScope) -> list[AuthoredTool]:
    """The four file tools, each bound to ``scope``; names are dotted effect names."""
    return [_read_tool(scope), _list_tool(scope), _write_tool(scope), _edit_tool(scope)]


def _read_tool(scope: WorkspaceScope) -> AuthoredTool:
    window = max(1, min(scope.max_read_bytes, MAX_MODEL_VIEW_CHARS - READ_FOOTER_CHARS))

    async def read(
        ctx: ToolContext,
        path: str = Field(description=_PATH_HELP, min_length=1),
        offset: int = Field(0, ge=0, description="Byte offset to start reading at."),
        limit: int = Field(
            window, ge=1, le=window, description="Most bytes to return from this read."
        ),
    ) -> str:
        # Bytes of context on each side (a character is at most 4 of them), so a secret
        # the window's edges cut is still recognised and masked whole.
        around = 4 * ctx.secret_reach
        result = await scope.read(path, offset=offset, limit=limit, around=around)
        return _read_text(result, ctx.redact_window)

    return AuthoredTool(
        "files.read",
        read,
        preflight=_path_check(scope),
        description=(
            f"Read a text file in the workspace, at most {window} bytes per call. "
            "The footer says where to continue when the file is longer."
        ),
    )


def _list_tool(scope: WorkspaceScope) -> AuthoredTool:
    async def list_(
        ctx: ToolContext,
        path: str = Field(".", description=_PATH_HELP, min_length=1),
        limit: int = Field(
            scope.max_list_entries,
            ge=1,
            le=scope.max_list_entries,
            description="Most entries to return, first by name.",
        ),
    ) -> dict[str, Any]:
        return _listing(await scope.list(path, limit=limit))

    return AuthoredTool(
        "files.list",
        list_,
        preflight=_path_check(scope),
        description=(
            "List a workspace directory, sorted by name. Directories end in '/', "
            "symbolic links in '@'; files show their size in bytes. The Host's own "
            "state is never listed."
        ),
    )


def _write_tool(scope: WorkspaceScope) -> AuthoredTool:
    async def write(
        ctx: ToolContext,
        path: str = Field(description=_PATH_HELP, min_length=1),
        content: str = Field(description="The complete new content of the file (UTF-8 text)."),
    ) -> dict[str, Any]:
        # What was there when the call was checked (and shown to its approver as a diff).
        expect = ctx.prepared if isinstance(ctx.prepared, str) else None
        written = await scope.write(path, content, expect=expect)
        return {"path": written.path, "bytes": written.size, "created": written.created}

    async def found(arguments: Mapping[str, Any]) -> Prepared:
        # The target's state before anyone is asked: the write runs only onto that same
        # state, and a durable approval's continuation only if its check finds it again.
        # The approver's diff is made from the bytes that state fingerprints.
        path, content = str(arguments["path"]), arguments.get("content")
        target = await scope.target(path)
        diff = None
        if target.text is not None and isinstance(content, str):
            # Made only if a person is asked: an allowed write never pays for difflib.
            diff = functools.partial(unified_diff, target.text, content, scope.check(path))
        return Prepared(
            view={"file": target.summary()}, value=target.state, digest=target.state, diff=diff
        )

    return AuthoredTool(
        "files.write",
        write,
        preflight=_path_check(scope),
        prepare=found,
        description=(
            "Create or replace a workspace file with the given text, atomically, creating "
            f"missing directories. At most {scope.max_write_bytes} bytes."
        ),
    )


def _edit_tool(scope: WorkspaceScope) -> AuthoredTool:
    async def edit(
        ctx: ToolContext,
        path: str = Field(description=_PATH_HELP, min_length=1),
        old: str = Field(min_length=1, description="Exact text to replace, as it appears."),
        new: str = Field(description="Replacement text."),
        count: int = Field(1, ge=1, description="How many times `old` must occur."),
    ) -> dict[str, Any]:
        edited = await scope.edit(path, old, new, count=count)
        return {"path": edited.path, "replacements": edited.replacements, "bytes": edited.size}

    async def checked(arguments: Mapping[str, Any]) -> Prepared:
        # The instructions file is refused before anyone is asked to approve the edit.
        await scope.check_instructions(str(arguments["path"]))
        return Prepared()

    return AuthoredTool(
        "files.edit",
        edit,
        preflight=_path_check(scope),
        prepare=checked,
        description=(
            "Replace exact text in a workspace file, atomically. Fails without changing "
            "the file when `old` is absent or occurs a different number of times than `count`."
        ),
    )


def _path_check(scope: WorkspaceScope) -> Callable[[Mapping[str, Any]], None]:
    """The pure step-4 check: a path that leaves the workspace is refused before any I/O."""

    def check(arguments: Mapping[str, Any]) -> None:
        scope.check(arguments.get("path", "."))

    return check


def _read_text(result: ReadResult, redact_window: Callable[[str, int, int], str]) -> str:
    if result.binary:
        return f"[{result.path}: binary content, {result.size} bytes; not shown]"
    start = len(result.before)
    text = redact_window(
        result.before + result.text + result.after, start, start + len(result.text)
    )
    if result.truncated:
        return (
            f"{text}\n[{result.path}: bytes {result.offset}-{result.next_offset} "
            f"of {result.size}; continue with offset={result.next_offset}]"
        )
    if result.offset:
        return f"{text}\n[{result.path}: end of file at byte {result.size}]"
    return text


def _listing(result: ListResult) -> dict[str, Any]:
    suffix = {"dir": "/", "symlink": "@", "file": "", "other": ""}
    entries = [
        f"{entry.name}{suffix[entry.kind]}"
        + (f" ({entry.size} bytes)" if entry.size is not None else "")
        + (ESCAPED_MARK if entry.escaped else "")
        for entry in result.entries
    ]
    return {
        "path": result.path,
        "entries": entries,
        "truncated": result.truncated,
        "total": result.total,
    }
