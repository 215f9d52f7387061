"""An approval is for what its approver saw: the file under the diff, in that workspace.

A ``files.write`` approval shows the approver a diff against the file as it
was when the call was asked. Pending approvals may wait for hours; the file
may change meanwhile (the user edits it), and the Host's workspace may move
(a configuration edit). The write then runs only onto the state that was
approved: a changed file makes the approval stale and nothing is written,
whether the answer came while the call waited or much later from a
continuation; a moved workspace makes the approval stale before anything is
recorded. Real Host turns, real files, real SQLite.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import (
    WorkspaceError,
    WorkspaceScope,
    _files,
    _openat,
    _workspace,
    workspace_tools,
)
from hostkit.builtins.files._workspace import MAX_WRITE_BYTES
from hostkit.effects import ApprovalDecision, ApprovalRequest, Prepared
from hostkit.errors import ApprovalRefused
from hostkit.freeze import FrozenMap
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import TurnResult
from tests.hosts import request
from tests.support import facts

pytestmark = pytest.mark.anyio

USER_NOTES = "".join(f"line {n} of the user's real notes\n" for n in range(500))


@pytest.fixture(autouse=True)
def workspaces(tmp_path: Path) -> None:
    for name in ("ws", "other"):
        (tmp_path / name).mkdir()


def host_config(tmp_path: Path, workspace: str = "ws", **host: Any) -> HostConfig:
    agent = {
        "provider": "test",
        "memory": False,
        "builtins": ["files.write", "files.read"],
        "policy": {"allow": ["*"], "ask": ["files.write"]},
    }
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path / workspace),
                **host,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent},
        },
        base_dir=tmp_path,
    )


async def approved_once(host: Host, paused: TurnResult) -> TurnResult:
    """The continuation of ``paused``'s approval, answered once by its own conversation."""
    assert paused.pending_approval is not None
    scope = await host.authority.for_conversation(facts("c1", "alice", "test"))
    return await host.approvals.answer(
        paused.pending_approval, "approve_once", by=scope, principal=scope
    )


def append_c() -> ScriptedModel:
    return ScriptedModel(
        [CallTools(("files_write", {"path": "notes.md", "content": "a\nb\nc\n"})), Reply("ok")],
        repeat_last=True,
    )


async def test_a_file_changed_while_its_approver_decided_is_not_overwritten(
    tmp_path: Path,
) -> None:
    notes = anyio.Path(tmp_path / "ws" / "notes.md")
    await notes.write_text("a\nb\n")
    shown: list[str] = []

    class EditsThenApproves:
        async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
            shown.append(str(req.view["diff"]))
            await notes.write_text(USER_NOTES)  # the user saves their notes meanwhile
            return "approve_once"

    config = host_config(tmp_path)
    model = append_c()
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=EditsThenApproves()
    ) as host:
        result = await host.turns.run(request("append c"))
    assert shown == ["--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"]
    (effect,) = result.effects
    assert (effect.effect, effect.status) == ("files.write", "failed")
    assert "changed since this write was approved" in effect.summary
    assert await notes.read_text() == USER_NOTES


async def test_a_file_changed_before_a_durable_approval_is_answered_makes_it_stale(
    tmp_path: Path,
) -> None:
    notes = anyio.Path(tmp_path / "ws" / "notes.md")
    await notes.write_text("a\nb\n")
    config = host_config(tmp_path, approval_timeout_s=0.5)
    model = append_c()
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        paused = await host.turns.run(request("append c"))
        assert paused.outcome == "needs_user"
        assert paused.pending_approval is not None
        await notes.write_text(USER_NOTES)
        scope = await host.authority.for_conversation(facts("c1", "alice", "test"))
        answered = await host.approvals.answer(
            paused.pending_approval, "approve_once", by=scope, principal=scope
        )
        approval = await host.approvals.get(scope, paused.pending_approval)
    (effect,) = answered.effects
    assert (effect.effect, effect.status) == ("files.write", "denied")
    assert "changed since it was approved" in effect.summary
    assert approval.status == "stale"
    assert await notes.read_text() == USER_NOTES


async def test_an_unchanged_file_is_written_by_the_durable_approvals_continuation(
    tmp_path: Path,
) -> None:
    notes = anyio.Path(tmp_path / "ws" / "notes.md")
    await notes.write_text("a\nb\n")
    config = host_config(tmp_path, approval_timeout_s=0.5)
    model = append_c()
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        answered = await approved_once(host, await host.turns.run(request("append c")))
    assert [(e.effect, e.status) for e in answered.effects] == [("files.write", "succeeded")]
    assert await notes.read_text() == "a\nb\nc\n"


async def test_an_approval_asked_in_one_workspace_cannot_write_in_another(
    tmp_path: Path,
) -> None:
    """The operator moves ``[host] workspace`` between the ask and the answer: the approver
    saw a new file (no diff) in the old workspace; the same path in the new one holds data."""
    precious = anyio.Path(tmp_path / "other" / "notes.md")
    await precious.write_text(USER_NOTES)
    first = host_config(tmp_path, approval_timeout_s=0.5)
    async with Host.open(first, capabilities=capabilities(append_c(), config=first)) as host:
        paused = await host.turns.run(request("append c"))
    assert paused.pending_approval is not None
    moved = host_config(tmp_path, "other", approval_timeout_s=0.5)
    async with Host.open(moved, capabilities=capabilities(append_c(), config=moved)) as host:
        scope = await host.authority.for_conversation(facts("c1", "alice", "test"))
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.answer(
                paused.pending_approval, "approve_once", by=scope, principal=scope
            )
        approval = await host.approvals.get(scope, paused.pending_approval)
    assert refused.value.reason == "stale"
    assert approval.status == "stale"
    assert await precious.read_text() == USER_NOTES
    assert not await anyio.Path(tmp_path / "ws" / "notes.md").exists()


async def test_a_new_file_in_a_new_directory_is_written_by_the_continuation(
    tmp_path: Path,
) -> None:
    """Nothing there when asked (not even the directory), nothing there when run: the same
    state, so the approved write creates both."""
    config = host_config(tmp_path, approval_timeout_s=0.5)
    model = ScriptedModel(
        [CallTools(("files_write", {"path": "new/dir/notes.md", "content": "hi\n"})), Reply("ok")],
        repeat_last=True,
    )
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        answered = await approved_once(host, await host.turns.run(request("write it")))
    assert [(e.effect, e.status) for e in answered.effects] == [("files.write", "succeeded")]
    assert await anyio.Path(tmp_path / "ws" / "new" / "dir" / "notes.md").read_text() == "hi\n"


def write_tool(root: Path) -> Any:
    (tool,) = [t for t in workspace_tools(WorkspaceScope(root)) if t.name == "files.write"]
    return tool


async def test_the_approvers_diff_is_of_the_bytes_the_approval_is_bound_to(
    tmp_path: Path,
) -> None:
    """One read makes both: a second read for the diff could see other bytes than the
    digest (a file flipping between two contents), and bind the approval to content its
    approver never saw."""
    notes = tmp_path / "ws" / "notes.md"
    notes.write_text("a\nb\n")
    tool = write_tool(tmp_path / "ws")
    prepared = await tool.prepare({"path": "notes.md", "content": "a\nb\nc\n"})
    assert tool.preview_diff is None
    assert prepared.digest == "sha256:" + hashlib.sha256(b"a\nb\n").hexdigest()
    assert prepared.value == prepared.digest
    # Made from those bytes later, and only if a person is asked: the file may change now.
    notes.write_text(USER_NOTES)
    assert prepared.diff is not None
    assert prepared.diff() == "--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x00\x01binary", "binary"),
        ("caf\u00e9\n".encode("latin-1"), "not UTF-8 text"),
        (b"x" * (MAX_WRITE_BYTES + 1), f"over {MAX_WRITE_BYTES} bytes"),
    ],
)
async def test_an_existing_file_with_no_diff_is_never_shown_as_a_new_one(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "ws" / "data").write_bytes(content)
    tool = write_tool(tmp_path / "ws")
    replaced = await tool.prepare({"path": "data", "content": "x\n"})
    created = await tool.prepare({"path": "new.txt", "content": "x\n"})
    assert replaced.diff is None
    assert dict(replaced.view) == {
        "file": f"replaces an existing file of {len(content)} bytes whole: {why}, not shown"
    }
    assert dict(created.view) == {"file": "a new file"}
    assert (created.digest, created.diff) == ("absent", None)


@pytest.mark.parametrize("kernel", ["renameat2", "hard link", "neither"])
async def test_a_file_created_after_an_approved_absent_check_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """The check found nothing; someone creates the file before the write lands: the
    write, approved onto "absent", puts its file in place only where nothing is, with
    renameat2's RENAME_NOREPLACE or, without it, a hard link, and leaves no temporary."""
    if kernel != "renameat2":
        monkeypatch.setattr(_openat, "_renameat2", lambda: None)
    if kernel == "neither":

        def no_links(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.EPERM, "no hard links here")

        monkeypatch.setattr(_openat.os, "link", no_links)
    scope = WorkspaceScope(tmp_path / "ws")
    theirs = tmp_path / "ws" / "notes.md"
    checked = _workspace._entry_target

    def then_created(parent: int, name: str, *, text_limit: int) -> Any:
        found = checked(parent, name, text_limit=text_limit)
        theirs.write_text(USER_NOTES)
        return found

    monkeypatch.setattr(_workspace, "_entry_target", then_created)
    with pytest.raises(WorkspaceError) as refused:
        await scope.write("notes.md", "mine\n", expect="absent")
    assert refused.value.reason == "changed"
    assert theirs.read_text() == USER_NOTES
    assert sorted(p.name for p in theirs.parent.iterdir()) == ["notes.md"]


async def test_a_file_too_large_to_hash_rewritten_with_its_old_size_and_mtime_is_changed(
    tmp_path: Path,
) -> None:
    """Past the hashing limit an approval is bound to the file's stat, which includes the
    change time: an agent that rewrites the file in place and puts its modification
    time back (``touch -d``) still makes the approval stale, and nothing is written."""
    scope = WorkspaceScope(tmp_path / "ws")
    big = tmp_path / "ws" / "big.bin"
    with big.open("wb") as out:  # sparse: no disk is spent on it
        out.truncate(_workspace._HASH_MAX_BYTES + 1)
    approved = await scope.target("big.bin")
    assert approved.state.startswith("stat:")
    assert approved.hidden == "too large to show"
    before = big.stat()
    await anyio.sleep(0.01)  # the change time moves on even on a coarse clock
    with big.open("r+b") as out:
        out.write(b"someone else's bytes")
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = big.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert (await scope.target("big.bin")).state != approved.state
    with pytest.raises(WorkspaceError) as refused:
        await scope.write("big.bin", "mine\n", expect=approved.state)
    assert refused.value.reason == "changed"
    assert big.stat().st_size == before.st_size


async def test_an_edit_refuses_a_file_rewritten_meanwhile_with_its_size_and_mtime_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between reading a file and renaming its edited copy over it, another process
    rewrites it in place, same size, and puts its modification time back: the change
    time still tells, and the edit refuses instead of discarding that rewrite."""
    scope = WorkspaceScope(tmp_path / "ws")
    notes = tmp_path / "ws" / "notes.md"
    notes.write_text("alpha beta\n")
    replace = _workspace.replace_atomically

    def rewritten_first(*args: Any, **kwargs: Any) -> None:
        before = notes.stat()
        with notes.open("r+b") as out:
            out.write(b"ALPHA")
        os.utime(notes, ns=(before.st_atime_ns, before.st_mtime_ns))
        replace(*args, **kwargs)

    monkeypatch.setattr(_workspace, "replace_atomically", rewritten_first)
    with pytest.raises(WorkspaceError) as refused:
        await scope.edit("notes.md", "beta", "gamma")
    assert refused.value.reason == "changed"
    assert notes.read_text() == "ALPHA beta\n"
    assert sorted(p.name for p in notes.parent.iterdir()) == ["notes.md"]


@pytest.mark.parametrize("digest", ["", "x" * 201, "caf\u00e9", "a\nb", 7])
def test_a_prepare_digest_is_short_printable_text(digest: Any) -> None:
    with pytest.raises(TypeError, match=r"Prepared\.digest"):
        Prepared(digest=digest)
    with pytest.raises(TypeError, match=r"Prepared\.diff"):
        Prepared(diff="a diff made now")  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", ["renameat2", "hard link"])
async def test_a_new_file_approved_onto_absent_is_written_whole_with_one_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """No temporary twin is left beside it: a second link would make every later write
    and read of the file refuse it as hard-linked."""
    if kernel != "renameat2":
        monkeypatch.setattr(_openat, "_renameat2", lambda: None)
    scope = WorkspaceScope(tmp_path / "ws")
    written = await scope.write("new.md", "mine\n", expect="absent")
    target = tmp_path / "ws" / "new.md"
    assert (written.created, target.read_text(), target.stat().st_nlink) == (True, "mine\n", 1)
    assert sorted(p.name for p in target.parent.iterdir()) == ["new.md"]


async def test_a_write_nobody_is_asked_about_never_makes_a_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """difflib can be slow on large files: only a prompt pays for it, and a diff that
    fails never fails the write."""
    await anyio.Path(tmp_path / "ws" / "notes.md").write_text("a\nb\n")

    def never(*args: Any) -> str:
        raise AssertionError("a diff was made for an allowed write")

    monkeypatch.setattr(_files, "unified_diff", never)
    config = host_config(tmp_path)
    allowed = config.agents["assistant"].model_copy(
        update={"policy": config.agents["assistant"].policy.model_copy(update={"ask": ()})}
    )
    config = config.model_copy(update={"agents": FrozenMap({"assistant": allowed})})
    async with Host.open(config, capabilities=capabilities(append_c(), config=config)) as host:
        result = await host.turns.run(request("append c"))
    assert [(e.effect, e.status) for e in result.effects] == [("files.write", "succeeded")]


def pread_that_meddles(
    monkeypatch: pytest.MonkeyPatch, meddle: Callable[[int], None], *, times: int
) -> list[int]:
    """``os.pread`` that calls ``meddle(n)`` before its n-th read, for the first ``times``
    (a process writing to the file while it is fingerprinted); returns each read's bytes."""
    real, got = os.pread, []

    def fake(fd: int, size: int, offset: int) -> bytes:
        if len(got) < times:
            meddle(len(got))
        chunk = real(fd, size, offset)
        got.append(len(chunk))
        return chunk

    monkeypatch.setattr(os, "pread", fake)
    return got


async def test_a_file_growing_while_fingerprinted_is_read_no_further_than_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background ``yes >> grow.log`` must not make the check before a write read on
    and on: it reads the size the file had when opened, no more, and a file that moved
    meanwhile is bound to its stat (no diff shown), which the write then refuses."""
    scope = WorkspaceScope(tmp_path / "ws")
    grow = tmp_path / "ws" / "grow.log"
    grow.write_bytes(b"x" * 1024)

    def append(_: int) -> None:
        with grow.open("ab") as out:
            out.write(b"y" * _workspace._HASH_CHUNK)

    got = pread_that_meddles(monkeypatch, append, times=8)
    approved = await scope.target("grow.log")
    monkeypatch.undo()
    assert sum(got) <= 1024
    assert approved.state.startswith("stat:")
    assert (approved.text, approved.hidden) == (None, "changing while it was read")
    assert approved.size == grow.stat().st_size
    assert "changing while it was read, not shown" in approved.summary()
    with pytest.raises(WorkspaceError) as refused:
        await scope.write("grow.log", "mine\n", expect=approved.state)
    assert refused.value.reason == "changed"
    assert grow.read_bytes().startswith(b"x" * 1024)


async def test_an_approver_is_never_shown_a_mix_of_two_versions_of_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file rewritten between two chunks of the check (same size, another modification
    time) is not shown as the old first half joined to the new second half."""
    scope = WorkspaceScope(tmp_path / "ws")
    path = tmp_path / "ws" / "notes.txt"
    path.write_text("old old old\n")
    monkeypatch.setattr(_workspace, "_HASH_CHUNK", 4)
    mtime = path.stat().st_mtime_ns

    def rewrite(read: int) -> None:
        if read == 1:  # after the first chunk was hashed
            path.write_text("new new new\n")
            os.utime(path, ns=(mtime - 10**9, mtime - 10**9))  # not the same clock tick

    pread_that_meddles(monkeypatch, rewrite, times=2)
    approved = await scope.target("notes.txt")
    monkeypatch.undo()
    assert approved.state.startswith("stat:")
    assert approved.text is None
