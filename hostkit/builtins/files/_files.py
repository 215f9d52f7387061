"""The workspace file effects: ``files.read``, ``files.list``, ``files.write``, ``files.edit``.

Each is an ordinary authored tool bound to one ``WorkspaceScope``, so the
pipeline (capability snapshot, policy, deadline, views) treats it like any
other effect, and containment lives in one place: the scope. Arguments carry
pydantic ``Field`` defaults so the JSON schema the model sees states the
bounds; outputs are small strings or dicts sized for the model view.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from hostkit.builtins.files._workspace import (
    MAX_NAME_BYTES,
    ListResult,
    ReadResult,
    WorkspaceScope,
)
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
# The footer's fixed words and four 19-digit numbers take 115 characters; the path in it
# is cut to _FOOTER_PATH_CHARS (a legal path may be 1,024) to fit the rest.
READ_FOOTER_CHARS = 300
_FOOTER_PATH_CHARS = 160
# Follows a name that is not valid UTF-8, shown with its bad bytes as \\xNN.
ESCAPED_MARK = " [name not UTF-8, shown escaped; files tools cannot open it]"
# The longest name a listing shows: 255 bytes, each not UTF-8 shown as four characters.
_MAX_SHOWN_NAME_CHARS = 4 * MAX_NAME_BYTES
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
        while True:
            result = await scope.read(path, offset=offset, limit=limit, around=around)
            text = _read_text(result, ctx.redact_window)
            # A masked value may be longer than the text it hides: a window that grew
            # past the view is read again smaller, so the footer is never cut off.
            if len(text) <= MAX_MODEL_VIEW_CHARS or limit == 1:
                return text
            limit //= 2

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
        after: str = Field(
            "",
            max_length=_MAX_SHOWN_NAME_CHARS,
            description=(
                "List only names after this one: the `next_after` of a listing that was "
                "`truncated`, to continue it."
            ),
        ),
    ) -> dict[str, Any]:
        return _listing(await scope.list(path, limit=limit, after=after or None))

    return AuthoredTool(
        "files.list",
        list_,
        preflight=_path_check(scope),
        description=(
            "List a workspace directory, sorted by name. Directories end in '/', "
            "symbolic links in '@'; files show their size in bytes. The Host's own "
            "state is never listed. When `truncated`, call again with `after` set to "
            "the listing's `next_after` for the next entries."
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
    shown = _footer_path(result.path)
    if result.truncated:
        return (
            f"{text}\n[{shown}: bytes {result.offset}-{result.next_offset} "
            f"of {result.size}; continue with offset={result.next_offset}]"
        )
    if result.offset:
        return f"{text}\n[{shown}: end of file at byte {result.size}]"
    return text


def _footer_path(path: str) -> str:
    """``path`` cut to its last ``_FOOTER_PATH_CHARS`` characters: the file's own name
    stays, and the footer fits the room ``READ_FOOTER_CHARS`` keeps for it."""
    if len(path) <= _FOOTER_PATH_CHARS:
        return path
    return "…" + path[-(_FOOTER_PATH_CHARS - 1) :]


def _listing(result: ListResult) -> dict[str, Any]:
    """The listing as the model sees it: as many entries as fit the model view whole.

    A page cut short (by ``limit``, the scan, or the view's size) is ``truncated``
    and names its last entry as ``next_after``, where the next page starts.
    """
    suffix = {"dir": "/", "symlink": "@", "file": "", "other": ""}
    entries = [
        f"{entry.name}{suffix[entry.kind]}"
        + (f" ({entry.size} bytes)" if entry.size is not None else "")
        + (ESCAPED_MARK if entry.escaped else "")
        for entry in result.entries
    ]

    def page(count: int) -> dict[str, Any]:
        truncated = result.truncated or count < len(entries)
        body: dict[str, Any] = {
            "path": result.path,
            "entries": entries[:count],
            "truncated": truncated,
            "total": result.total,
        }
        if truncated and count:
            body["next_after"] = result.entries[count - 1].name
        return body

    # The most entries whose page, encoded as the model view encodes it, fits whole.
    low, high = 0, len(entries)
    while low < high:
        middle = (low + high + 1) // 2
        if len(json.dumps(page(middle), ensure_ascii=False)) <= MAX_MODEL_VIEW_CHARS:
            low = middle
        else:
            high = middle - 1
    return page(low)
