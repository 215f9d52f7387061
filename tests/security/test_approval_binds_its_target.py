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

from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.errors import ApprovalRefused
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
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
        paused = await host.turns.run(request("append c"))
        assert paused.pending_approval is not None
        scope = await host.authority.for_conversation(facts("c1", "alice", "test"))
        answered = await host.approvals.answer(
            paused.pending_approval, "approve_once", by=scope, principal=scope
        )
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
        paused = await host.turns.run(request("write it"))
        assert paused.pending_approval is not None
        scope = await host.authority.for_conversation(facts("c1", "alice", "test"))
        answered = await host.approvals.answer(
            paused.pending_approval, "approve_once", by=scope, principal=scope
        )
    assert [(e.effect, e.status) for e in answered.effects] == [("files.write", "succeeded")]
    assert await anyio.Path(tmp_path / "ws" / "new" / "dir" / "notes.md").read_text() == "hi\n"
