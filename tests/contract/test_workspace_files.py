"""Workspace file effects: bounded reads, bounded listings, atomic writes, exact edits, tools."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import (
    WorkspaceError,
    WorkspaceEscape,
    WorkspaceIOFailure,
    WorkspaceScope,
    workspace_tools,
)
from hostkit.builtins.files._workspace import MAX_READ_BYTES
from hostkit.effects import MAX_MODEL_VIEW_CHARS, AuthoredTool, ToolContext
from hostkit.errors import InvalidValue, RuntimeFailure, UserError
from hostkit.freeze import thaw
from hostkit.types import EffectRequest
from tests.contract.test_effects_basic import prepared

pytestmark = pytest.mark.anyio

TEXT = "0123456789"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "digits.txt").write_text(TEXT)
    return workspace


@pytest.fixture
def scope(root: Path) -> WorkspaceScope:
    return WorkspaceScope(root)


def temporaries(directory: Path) -> list[str]:
    return [path.name for path in directory.iterdir() if path.name.startswith(".hostkit-")]


# -- read --------------------------------------------------------------------------------


async def test_read_returns_a_small_file_whole(scope: WorkspaceScope) -> None:
    result = await scope.read("digits.txt")
    assert (result.text, result.size, result.truncated, result.binary) == (TEXT, 10, False, False)
    assert (result.offset, result.next_offset, result.path) == (0, 10, "digits.txt")


@pytest.mark.parametrize(
    ("offset", "limit", "text", "next_offset", "truncated"),
    [
        (0, 4, "0123", 4, True),
        (2, 3, "234", 5, True),
        (7, 3, "789", 10, False),
        (7, 100, "789", 10, False),
        (10, 5, "", 10, False),
        (50, 5, "", 50, False),
    ],
)
async def test_read_window_reports_where_to_continue(
    scope: WorkspaceScope, offset: int, limit: int, text: str, next_offset: int, truncated: bool
) -> None:
    result = await scope.read("digits.txt", offset=offset, limit=limit)
    assert (result.text, result.next_offset, result.truncated, result.size) == (
        text,
        next_offset,
        truncated,
        10,
    )


async def test_read_is_capped_at_max_read_bytes(root: Path) -> None:
    (root / "big.txt").write_text("a" * 5000)
    scope = WorkspaceScope(root, max_read_bytes=1024)
    for limit in (None, 4096):
        result = await scope.read("big.txt", limit=limit)
        assert (len(result.text), result.next_offset, result.truncated) == (1024, 1024, True)
        assert result.size == 5000


async def test_read_streams_only_the_window_from_disk(
    root: Path, scope: WorkspaceScope, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (root / "huge.log").open("wb") as handle:
        handle.truncate(8 * MAX_READ_BYTES)  # sparse: large, but cheap to create
    requested: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        requested.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    result = await scope.read("huge.log")
    assert result.size == 8 * MAX_READ_BYTES
    assert result.truncated
    assert sum(requested) <= MAX_READ_BYTES
    assert max(requested) < MAX_READ_BYTES  # read in chunks, not one allocation


async def test_reading_on_from_next_offset_reassembles_multibyte_text(root: Path) -> None:
    text = "é→😀 mixed wïdth " * 20
    (root / "utf8.txt").write_text(text, encoding="utf-8")
    scope = WorkspaceScope(root)
    pieces, offset = [], 0
    while True:
        result = await scope.read("utf8.txt", offset=offset, limit=7)
        pieces.append(result.text)
        assert "\ufffd" not in result.text
        offset = result.next_offset
        if not result.truncated:
            break
    assert "".join(pieces) == text


async def test_a_limit_smaller_than_a_character_still_makes_progress(root: Path) -> None:
    (root / "emoji.txt").write_text("😀", encoding="utf-8")
    result = await WorkspaceScope(root).read("emoji.txt", limit=1)
    assert result.next_offset == 1


async def test_read_reports_binary_content_without_text(root: Path, scope: WorkspaceScope) -> None:
    (root / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01binary")
    result = await scope.read("blob.bin")
    assert (result.binary, result.text, result.size) == (True, "", 13)


async def test_read_refuses_directories_fifos_and_missing_files(
    root: Path, scope: WorkspaceScope
) -> None:
    (root / "dir").mkdir()
    os.mkfifo(root / "pipe")
    with anyio.fail_after(10):  # a FIFO must be refused, never waited on
        for path, reason in (
            ("dir", "not_a_file"),
            (".", "not_a_file"),
            ("pipe", "not_a_file"),
            ("missing.txt", "not_found"),
            ("digits.txt/inner", "not_a_directory"),
        ):
            with pytest.raises(WorkspaceError) as caught:
                await scope.read(path)
            assert caught.value.reason == reason, path


async def test_read_rejects_bad_offsets_and_limits(scope: WorkspaceScope) -> None:
    for kwargs in ({"offset": -1}, {"limit": 0}, {"limit": -5}):
        with pytest.raises(InvalidValue):
            await scope.read("digits.txt", **kwargs)


# -- list --------------------------------------------------------------------------------


async def test_list_is_sorted_typed_and_sized(root: Path, scope: WorkspaceScope) -> None:
    (root / "b_dir").mkdir()
    (root / "a_link").symlink_to("digits.txt")
    os.mkfifo(root / "c_pipe")
    result = await scope.list(".")
    assert [(e.name, e.kind, e.size) for e in result.entries] == [
        ("a_link", "symlink", None),
        ("b_dir", "dir", None),
        ("c_pipe", "other", None),
        ("digits.txt", "file", 10),
    ]
    assert (result.path, result.truncated, result.total) == (".", False, 4)


async def test_list_is_bounded_by_limit_and_max_list_entries(root: Path) -> None:
    for index in range(30):
        (root / f"f{index:02}").touch()
    scope = WorkspaceScope(root, max_list_entries=10)
    capped = await scope.list()
    assert [e.name for e in capped.entries] == ["digits.txt"] + [f"f{i:02}" for i in range(9)]
    assert (capped.truncated, capped.total) == (True, 31)
    limited = await scope.list(limit=3)
    assert [e.name for e in limited.entries] == ["digits.txt", "f00", "f01"]
    assert (await scope.list(limit=1000)).entries == capped.entries


async def test_list_goes_on_after_a_name_page_by_page(root: Path) -> None:
    for index in range(30):
        (root / f"f{index:02}").touch()
    (root / os.fsdecode(b"f15\xff")).touch()  # shown as f15\xff, sorted where it is shown
    scope = WorkspaceScope(root, max_list_entries=10)
    page = await scope.list(after="f09")
    assert [e.name for e in page.entries] == [f"f{i}" for i in range(10, 16)] + [
        "f15\\xff",
        "f16",
        "f17",
        "f18",
    ]
    assert (page.truncated, page.total) == (True, 32)
    last = await scope.list(after="f25")
    assert [e.name for e in last.entries] == [f"f{i}" for i in range(26, 30)]
    assert (last.truncated, last.total) == (False, 32)
    assert (await scope.list(after="zzz")).entries == ()


async def test_list_stops_scanning_a_huge_directory(root: Path) -> None:
    for index in range(50):
        (root / f"g{index:02}").touch()
    result = await WorkspaceScope(root, max_list_scan=20).list(limit=5)
    assert len(result.entries) == 5
    assert (result.truncated, result.total) == (True, None)


async def test_list_refuses_files_and_missing_directories(scope: WorkspaceScope) -> None:
    for path, reason in (("digits.txt", "not_a_directory"), ("nope", "not_found")):
        with pytest.raises(WorkspaceError) as caught:
            await scope.list(path)
        assert caught.value.reason == reason


# -- write -------------------------------------------------------------------------------


async def test_write_creates_missing_parents(root: Path, scope: WorkspaceScope) -> None:
    result = await scope.write("a/b/new.txt", "hello\n")
    assert (result.path, result.size, result.created) == ("a/b/new.txt", 6, True)
    assert (root / "a" / "b" / "new.txt").read_text() == "hello\n"
    assert temporaries(root / "a" / "b") == []


async def test_write_replaces_a_file_and_keeps_its_mode(root: Path, scope: WorkspaceScope) -> None:
    target = root / "digits.txt"
    target.chmod(0o640)
    result = await scope.write("digits.txt", "replaced")
    assert (result.created, result.size) == (False, 8)
    assert target.read_text() == "replaced"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


@pytest.mark.parametrize(
    ("call", "code", "retryable"),
    [("write", errno.ENOSPC, True), ("fsync", errno.EIO, False)],
)
async def test_a_failed_write_leaves_the_old_file_and_no_partial_file(
    root: Path,
    scope: WorkspaceScope,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    code: int,
    retryable: bool,
) -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, call, failing)
    for path in ("digits.txt", "fresh.txt"):
        with pytest.raises(WorkspaceIOFailure) as caught:
            await scope.write(path, "x" * 100_000)
        assert caught.value.retryable is retryable
        assert str(root) not in caught.value.message
    monkeypatch.undo()
    assert (root / "digits.txt").read_text() == TEXT
    assert not (root / "fresh.txt").exists()
    assert temporaries(root) == []


async def test_write_over_the_limit_touches_nothing(root: Path) -> None:
    scope = WorkspaceScope(root, max_write_bytes=16)
    with pytest.raises(WorkspaceError) as caught:
        await scope.write("new/too-big.txt", "é" * 9)  # 18 bytes, 9 characters
    assert caught.value.reason == "too_large"
    assert not (root / "new").exists()
    assert (await scope.write("ok.txt", "é" * 8)).size == 16


async def test_write_refuses_directories_and_the_root(root: Path, scope: WorkspaceScope) -> None:
    (root / "dir").mkdir()
    for path in ("dir", ".", "dir/.."):
        with pytest.raises(WorkspaceError) as caught:
            await scope.write(path, "x")
        assert caught.value.reason == "not_a_file", path
    assert temporaries(root) == []


# -- edit --------------------------------------------------------------------------------


async def test_edit_replaces_one_exact_occurrence(root: Path, scope: WorkspaceScope) -> None:
    (root / "code.py").write_text("x = 1\ny = 2\n")
    (root / "code.py").chmod(0o600)
    result = await scope.edit("code.py", "y = 2", "y = 3")
    assert (result.replacements, result.size) == (1, 12)
    assert (root / "code.py").read_text() == "x = 1\ny = 3\n"
    assert stat.S_IMODE((root / "code.py").stat().st_mode) == 0o600
    assert temporaries(root) == []


@pytest.mark.parametrize(
    ("old", "count", "reason"),
    [("zzz", 1, "no_match"), ("= ", 1, "ambiguous"), ("= ", 3, "ambiguous")],
)
async def test_edit_that_does_not_match_exactly_changes_nothing(
    root: Path, scope: WorkspaceScope, old: str, count: int, reason: str
) -> None:
    (root / "code.py").write_text("x = 1\ny = 2\n")
    before = (root / "code.py").stat().st_mtime_ns
    with pytest.raises(WorkspaceError) as caught:
        await scope.edit("code.py", old, "!", count=count)
    assert caught.value.reason == reason
    if reason == "ambiguous":
        assert "2 times" in caught.value.message
    assert (root / "code.py").read_text() == "x = 1\ny = 2\n"
    assert (root / "code.py").stat().st_mtime_ns == before


async def test_edit_with_count_replaces_every_expected_occurrence(
    root: Path, scope: WorkspaceScope
) -> None:
    (root / "code.py").write_text("a a a")
    result = await scope.edit("code.py", "a", "bb", count=3)
    assert result.replacements == 3
    assert (root / "code.py").read_text() == "bb bb bb"


async def test_edit_refuses_binary_oversized_and_bad_arguments(root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\xff\xfe text")
    (root / "big.txt").write_text("a" * 40)
    (root / "small.txt").write_text("a" * 10)
    scope = WorkspaceScope(root, max_write_bytes=32)
    for path, old, new, reason in (
        ("blob.bin", "text", "x", "not_text"),
        ("big.txt", "a", "b", "too_large"),
        ("small.txt", "a" * 10, "b" * 40, "too_large"),
        ("missing.txt", "a", "b", "not_found"),
    ):
        with pytest.raises(WorkspaceError) as caught:
            await scope.edit(path, old, new, count=1)
        assert caught.value.reason == reason, path
    for old, count in (("", 1), ("a", 0)):
        with pytest.raises(InvalidValue):
            await scope.edit("small.txt", old, "b", count=count)
    assert (root / "small.txt").read_text() == "a" * 10


# -- errors ------------------------------------------------------------------------------


async def test_workspace_errors_sit_in_the_one_error_tree() -> None:
    assert issubclass(WorkspaceError, UserError)
    assert issubclass(WorkspaceEscape, WorkspaceError)
    assert issubclass(WorkspaceIOFailure, RuntimeFailure)


async def test_a_missing_root_is_a_runtime_failure_not_naming_it(tmp_path: Path) -> None:
    scope = WorkspaceScope(tmp_path / "gone")
    with pytest.raises(WorkspaceIOFailure) as caught:
        await scope.read("x.txt")
    assert "gone" not in caught.value.message


@pytest.mark.parametrize("name", ["config/token", "etc/passwd", "api_key", "my-secret"])
async def test_messages_naming_secret_looking_paths_are_not_redacted(
    scope: WorkspaceScope, root: Path, name: str
) -> None:
    """A path ending in a secret-like word is no secret assignment: the refusal keeps the
    path and every word of its reason (the redactor masked the word after "token':")."""
    with pytest.raises(WorkspaceError) as caught:
        await scope.read(name)
    assert caught.value.message == f"`{name}`: no such file or directory"
    (root / name).mkdir(parents=True)
    with pytest.raises(WorkspaceError) as caught:
        await scope.read(name)
    assert caught.value.message == f"`{name}`: is a directory"


# -- the four tools ----------------------------------------------------------------------

PATH_SCHEMA = {
    "description": (
        "Path relative to the workspace root, '/'-separated; absolute paths and '..' "
        "out of the workspace are refused."
    ),
    "minLength": 1,
    "title": "Path",
    "type": "string",
}


def tools_by_name(scope: WorkspaceScope) -> dict[str, AuthoredTool]:
    return {tool.name: tool for tool in workspace_tools(scope)}


async def test_the_four_tools_and_their_json_schemas(scope: WorkspaceScope) -> None:
    tools = tools_by_name(scope)
    assert list(tools) == ["files.read", "files.list", "files.write", "files.edit"]
    window = MAX_MODEL_VIEW_CHARS - 300
    assert thaw(tools["files.read"].parameters) == {
        "additionalProperties": False,
        "properties": {
            "path": PATH_SCHEMA,
            "offset": {
                "default": 0,
                "description": "Byte offset to start reading at.",
                "minimum": 0,
                "title": "Offset",
                "type": "integer",
            },
            "limit": {
                "default": window,
                "description": "Most bytes to return from this read.",
                "maximum": window,
                "minimum": 1,
                "title": "Limit",
                "type": "integer",
            },
        },
        "required": ["path"],
        "type": "object",
    }
    assert thaw(tools["files.list"].parameters) == {
        "additionalProperties": False,
        "properties": {
            "path": {**PATH_SCHEMA, "default": "."},
            "limit": {
                "default": 200,
                "description": "Most entries to return, first by name.",
                "maximum": 200,
                "minimum": 1,
                "title": "Limit",
                "type": "integer",
            },
            "after": {
                "default": "",
                "description": (
                    "List only names after this one: the `next_after` of a listing that "
                    "was `truncated`, to continue it."
                ),
                "maxLength": 1020,
                "title": "After",
                "type": "string",
            },
        },
        "type": "object",
    }
    assert thaw(tools["files.write"].parameters) == {
        "additionalProperties": False,
        "properties": {
            "path": PATH_SCHEMA,
            "content": {
                "description": "The complete new content of the file (UTF-8 text).",
                "title": "Content",
                "type": "string",
            },
        },
        "required": ["path", "content"],
        "type": "object",
    }
    assert thaw(tools["files.edit"].parameters) == {
        "additionalProperties": False,
        "properties": {
            "path": PATH_SCHEMA,
            "old": {
                "description": "Exact text to replace, as it appears.",
                "minLength": 1,
                "title": "Old",
                "type": "string",
            },
            "new": {"description": "Replacement text.", "title": "New", "type": "string"},
            "count": {
                "default": 1,
                "description": "How many times `old` must occur.",
                "minimum": 1,
                "title": "Count",
                "type": "integer",
            },
        },
        "required": ["path", "old", "new"],
        "type": "object",
    }


async def test_tool_limits_follow_the_scope(root: Path) -> None:
    tools = tools_by_name(WorkspaceScope(root, max_read_bytes=64, max_list_entries=5))
    assert tools["files.read"].parameters["properties"]["limit"]["maximum"] == 64
    assert tools["files.list"].parameters["properties"]["limit"]["maximum"] == 5


async def test_tool_arguments_are_validated_before_the_scope_sees_them(
    scope: WorkspaceScope,
) -> None:
    tools = tools_by_name(scope)
    for name, arguments in (
        ("files.read", {"path": "digits.txt", "offset": -1}),
        ("files.read", {"path": "digits.txt", "limit": 10**9}),
        ("files.read", {"path": ""}),
        ("files.write", {"path": "x.txt"}),
        ("files.edit", {"path": "x.txt", "old": "", "new": "y"}),
        ("files.list", {"path": ".", "recursive": True}),
    ):
        with pytest.raises(InvalidValue):
            tools[name].validate(arguments)


async def call(tool: AuthoredTool, root: Path, **arguments: Any) -> Any:
    context = ToolContext(
        turn_id="t", session_id="s", core_id="assistant", owner="o", workspace=root
    )
    return await tool.invoke(context, tool.validate(arguments))


async def test_tools_work_through_the_scope(root: Path, scope: WorkspaceScope) -> None:
    tools = tools_by_name(scope)
    written = await call(tools["files.write"], root, path="notes/a.md", content="hello world\n")
    assert written == {"path": "notes/a.md", "bytes": 12, "created": True}
    edited = await call(tools["files.edit"], root, path="notes/a.md", old="world", new="there")
    assert edited == {"path": "notes/a.md", "replacements": 1, "bytes": 12}
    assert await call(tools["files.read"], root, path="notes/a.md") == "hello there\n"
    listed = await call(tools["files.list"], root)
    assert listed == {
        "path": ".",
        "entries": ["digits.txt (10 bytes)", "notes/"],
        "truncated": False,
        "total": 2,
    }


async def test_read_tool_footer_says_where_to_continue(root: Path, scope: WorkspaceScope) -> None:
    read = tools_by_name(scope)["files.read"]
    first = await call(read, root, path="digits.txt", limit=4)
    assert first == "0123\n[digits.txt: bytes 0-4 of 10; continue with offset=4]"
    last = await call(read, root, path="digits.txt", offset=4)
    assert last == "456789\n[digits.txt: end of file at byte 10]"
    (root / "blob.bin").write_bytes(b"\x00\x01")
    assert "binary" in await call(read, root, path="blob.bin")


async def test_a_full_read_window_fits_the_model_view_uncut(
    root: Path, scope: WorkspaceScope, authority: Any
) -> None:
    (root / "long.txt").write_text("z" * 100_000)
    runtime, catalog, context = await prepared(authority, workspace_tools(scope))
    ref = catalog.resolve("files_read")
    assert ref is not None
    result = await runtime.execute(EffectRequest("c1", ref, {"path": "long.txt"}), context)
    assert result.status == "succeeded"
    assert result.views.model.endswith("continue with offset=7700]")
    assert len(result.views.model) <= MAX_MODEL_VIEW_CHARS


async def test_an_escape_through_the_pipeline_fails_without_a_side_effect(
    tmp_path: Path, root: Path, scope: WorkspaceScope, authority: Any
) -> None:
    runtime, catalog, context = await prepared(authority, workspace_tools(scope))
    ref = catalog.resolve("files_write")
    assert ref is not None
    arguments = {"path": "../escaped.txt", "content": "x"}
    result = await runtime.execute(EffectRequest("c1", ref, arguments), context)
    assert result.status in ("failed", "denied")
    assert "leads above the workspace" in result.views.model
    assert not (tmp_path / "escaped.txt").exists()


def long_path(root: Path, name: str) -> str:
    """A legal path of 1,024 characters (the default limit) ending in ``name``."""
    parts = ["d" * 200] * 5
    parts[-1] = "d" * (1024 - 5 * 201 - len(name) + 200)
    (root.joinpath(*parts)).mkdir(parents=True)
    path = "/".join([*parts, name])
    assert len(path) == 1024
    return path


@pytest.mark.parametrize("unit", [b"z", "é".encode(), "😀".encode(), b"\xff"])
async def test_a_full_window_of_a_long_path_keeps_its_footer(
    root: Path, scope: WorkspaceScope, authority: Any, unit: bytes
) -> None:
    """Whatever the path (up to 1,024 characters) and the text, a full window and its
    footer fit the model view: the model always learns where to continue."""
    path = long_path(root, "f.txt")
    (root / path).write_bytes(unit * 20_000)
    runtime, catalog, context = await prepared(authority, workspace_tools(scope))
    ref = catalog.resolve("files_read")
    assert ref is not None
    result = await runtime.execute(EffectRequest("c1", ref, {"path": path}), context)
    model = result.views.model
    assert len(model) <= MAX_MODEL_VIEW_CHARS
    assert "[truncated" not in model
    next_offset = 7700 - 7700 % len(unit)
    assert model.endswith(
        f"dd/f.txt: bytes 0-{next_offset} of {20_000 * len(unit)}; "
        f"continue with offset={next_offset}]"
    )


async def test_a_window_its_masks_lengthen_is_read_smaller_to_keep_its_footer(
    root: Path, scope: WorkspaceScope
) -> None:
    """A mask longer than what it hides could push the footer out of the view: the
    window is read again smaller instead, and the footer says where that one ended."""
    (root / "secrets.txt").write_text("s" * 100_000)
    context = ToolContext(
        turn_id="t",
        session_id="s",
        core_id="assistant",
        owner="o",
        workspace=root,
        redact_window=lambda text, start, end: text[start:end].replace("s", "[redacted:S]"),
    )
    read = tools_by_name(scope)["files.read"]
    text = await read.invoke(context, read.validate({"path": "secrets.txt"}))
    assert len(text) <= MAX_MODEL_VIEW_CHARS
    window, footer = text.rsplit("\n", 1)
    shown = window.count("[redacted:S]")
    assert window == "[redacted:S]" * shown
    assert footer == f"[secrets.txt: bytes 0-{shown} of 100000; continue with offset={shown}]"


def long_names(root: Path, count: int) -> list[str]:
    """``count`` entries with names of 255 bytes, every fifth not UTF-8 (shown escaped)."""
    shown = []
    for index in range(count):
        if index % 5:
            raw = f"{index:03}".encode() + b"n" * 252
        else:
            raw = f"{index:03}".encode() + b"\xff" * 252
        (root / os.fsdecode(raw)).write_bytes(b"x")
        shown.append(raw.decode("utf-8", "backslashreplace"))
    return sorted(shown)


async def test_a_listing_of_long_names_fits_the_view_and_pages_through_all(
    root: Path, authority: Any
) -> None:
    """Every page is whole JSON within the model view; ``next_after`` continues it, and
    the pages together hold every entry once, in order."""
    listing = root / "many"
    listing.mkdir()
    names = long_names(listing, 60)
    runtime, catalog, context = await prepared(authority, workspace_tools(WorkspaceScope(root)))
    ref = catalog.resolve("files_list")
    assert ref is not None
    seen: list[str] = []
    arguments: dict[str, Any] = {"path": "many"}
    for call_id in range(1, 60):
        result = await runtime.execute(EffectRequest(f"c{call_id}", ref, arguments), context)
        assert len(result.views.model) <= MAX_MODEL_VIEW_CHARS
        page = json.loads(result.views.model)
        assert page["entries"]
        assert page["total"] == 60
        seen += [entry.split(" (1 bytes)")[0] for entry in page["entries"]]
        if not page["truncated"]:
            break
        arguments["after"] = page["next_after"]
    assert seen == names
    assert call_id > 2  # it did page
