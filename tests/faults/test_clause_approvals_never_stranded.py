"""Clause: an answered approval is never stranded — a real Host process killed (SIGKILL) after
the answer is durable runs the call exactly once in the process that finishes the job, and one
killed after its continuation claimed the call leaves it ``indeterminate`` with a reason, never
run a second time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from hostkit.errors import ApprovalRefused, TurnInProgress
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.faults.approval_worker import (
    host_config,
    peek_tool,
    repeated_ids_script,
    stamp_request,
    stamp_tool,
)
from tests.hosts import turn_rows
from tests.support import child_process, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("approval_worker.py")


def worker(root: Path, marker: Path, mode: str, approval_id: str, **more: str) -> list[str]:
    options = {
        "root": str(root),
        "marker": str(marker),
        "mode": mode,
        "approval_id": approval_id,
        **more,
    }
    return [sys.executable, str(WORKER), json.dumps(options)]


def stamps(root: Path) -> list[str]:
    path = root / "stamps.txt"
    return path.read_text().splitlines() if path.exists() else []


async def paused_turn(root: Path, *, repeated_ids: bool = False) -> str:
    """A turn paused on its approval (nobody to ask); returns the approval id.

    ``repeated_ids``: the turn first peeks, and both of its steps name their call
    ``call_0`` (a server that sends no ids)."""
    model = ScriptedModel([CallTools(("files_stamp", {"label": "one"})), Reply("unused")])
    tools = [stamp_tool(root)]
    if repeated_ids:
        model, tools = repeated_ids_script(), [*tools, peek_tool()]
    caps = capabilities(model, tools=tools)
    async with Host.open(host_config(root), capabilities=caps) as host:
        paused = await host.turns.run(stamp_request())
    assert paused.outcome == "needs_user"
    assert paused.pending_approval
    return paused.pending_approval


def finisher(root: Path, model: ScriptedModel, *, peek: bool = False) -> Host:
    tools = [stamp_tool(root), *([peek_tool()] if peek else [])]
    return Host.open(host_config(root), capabilities=capabilities(model, tools=tools))


async def test_an_answer_whose_process_died_before_the_claim_runs_once_when_approved_again(
    tmp_path: Path,
) -> None:
    approval_id = await paused_turn(tmp_path)
    marker = anyio.Path(tmp_path / "answered")
    argv = worker(tmp_path, Path(marker), "record-answer", approval_id)
    await sigkill_when(argv, marker.exists, what="the answer was recorded")

    model = ScriptedModel([Reply("stamped at last")])
    async with finisher(tmp_path, model) as host:
        operator = await host.operator("ops", reason="finish an interrupted approval")
        (open_one,) = await host.approvals.list(operator, status=None)
        assert (open_one.status, open_one.awaiting_continuation) == ("approved", True)
        # A different answer is refused, and names the way out; nothing runs.
        with pytest.raises(ApprovalRefused, match="resume"):
            await host.approvals.answer(approval_id, "deny", by=operator)
        assert stamps(tmp_path) == []
        # The same answer again finishes the interrupted one: the call runs once.
        finished = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert (finished.outcome, finished.text) == ("completed", "stamped at last")
        # Resuming again reports the continuation that ran; nothing runs twice.
        again = await host.approvals.resume(approval_id, by=operator)
        assert again.turn_id == finished.turn_id
        done = await host.approvals.get(operator, approval_id)
        assert (done.status, done.continuation_turn_id) == ("executed", finished.turn_id)
    assert stamps(tmp_path) == ["one"]


async def test_a_continuation_killed_before_its_claim_runs_the_call_when_resumed(
    tmp_path: Path,
) -> None:
    """Its turn is left ``running`` by a Host that died before the claim; the Host that
    resumes was open before the crash (its own start-up recovery ended nothing). The
    resume's first continuation id meets that dead turn, which the repeat ends ``lost``;
    the call is still unclaimed, so the next id runs it, once."""
    approval_id = await paused_turn(tmp_path)
    model = ScriptedModel([Reply("stamped at last")])
    async with finisher(tmp_path, model) as host:
        argv = worker(tmp_path, tmp_path / "unused", "continue-killed", approval_id)
        killed = await anyio.run_process(argv, check=False)
        assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
        operator = await host.operator("ops", reason="finish an interrupted approval")
        dead = await host.store.turns.find(
            (await host.approvals.get(operator, approval_id)).principal_id,
            f"continue:{approval_id}",
        )
        assert dead is not None
        assert dead.status == "running"
        finished = await host.approvals.resume(approval_id, by=operator)
        assert (finished.outcome, finished.text) == ("completed", "stamped at last")
        assert finished.request_id == f"continue:{approval_id}:2"
        statuses = dict(await turn_rows(host))
        assert statuses[dead.turn_id] == "lost"
        done = await host.approvals.get(operator, approval_id)
        assert (done.status, done.continuation_turn_id) == ("executed", finished.turn_id)
    assert stamps(tmp_path) == ["one"]


@pytest.mark.parametrize("stop", ["before", "after"])
async def test_a_continuation_killed_after_its_claim_is_indeterminate_and_never_reruns(
    tmp_path: Path, stop: str
) -> None:
    approval_id = await paused_turn(tmp_path)
    marker = anyio.Path(tmp_path / "claimed")
    argv = worker(tmp_path, Path(marker), "continue", approval_id, tool=stop)
    await sigkill_when(argv, marker.exists, what="the continuation ran the tool")
    ran = ["one"] if stop == "after" else []
    assert stamps(tmp_path) == ran

    model = ScriptedModel([Reply("never asked")])
    async with finisher(tmp_path, model) as host:
        operator = await host.operator("ops", reason="finish an interrupted approval")
        void = await host.approvals.get(operator, approval_id)
        assert void.status == "indeterminate"
        assert void.continuation_turn_id is not None
        assert void.void_reason is not None
        assert "may have run" in void.void_reason
        # The continuation turn was recovered, and its transcript answers the paused call.
        statuses = dict(await turn_rows(host))
        assert statuses[void.continuation_turn_id] == "indeterminate"
        (answer,) = await host.store.read(
            lambda c: c.execute(
                "SELECT content FROM messages WHERE turn_id = ? AND role = 'tool'",
                [void.continuation_turn_id],
            ).fetchall()
        )
        assert json.loads(answer[0])["tool_call_id"] == void.call_id
        assert "[indeterminate]" in json.loads(answer[0])["text"]
        for attempt in (
            host.approvals.resume(approval_id, by=operator),
            host.approvals.answer(approval_id, "approve_once", by=operator),
        ):
            with pytest.raises(ApprovalRefused) as refused:
                await attempt
            assert refused.value.reason == "indeterminate"
            assert "may have run" in str(refused.value)
        assert model.requests == []
    assert stamps(tmp_path) == ran


async def test_a_killed_continuation_is_indeterminate_when_an_earlier_step_had_its_call_id(
    tmp_path: Path,
) -> None:
    """Call ids are unique per step only: the asking turn's first step ran ``files.peek``
    as ``call_0`` and its second asked to stamp as ``call_0`` too. The peek's result is
    not the approved call's: recovery still finds the claimed stamp without a result."""
    approval_id = await paused_turn(tmp_path, repeated_ids=True)
    marker = anyio.Path(tmp_path / "claimed")
    argv = worker(tmp_path, Path(marker), "continue", approval_id, tool="after", peek="yes")
    await sigkill_when(argv, marker.exists, what="the continuation ran the tool")
    assert stamps(tmp_path) == ["one"]

    model = ScriptedModel([Reply("never asked")])
    async with finisher(tmp_path, model, peek=True) as host:
        operator = await host.operator("ops", reason="finish an interrupted approval")
        void = await host.approvals.get(operator, approval_id)
        assert (void.status, void.call_id) == ("indeterminate", "call_0")
        assert void.void_reason is not None
        assert "may have run" in void.void_reason
        assert void.continuation_turn_id is not None
        statuses = dict(await turn_rows(host))
        assert statuses[void.continuation_turn_id] == "indeterminate"
        (answer,) = await tool_texts(host, void.continuation_turn_id)
        assert answer.startswith("[indeterminate] this approved call may have run")
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.resume(approval_id, by=operator)
        assert refused.value.reason == "indeterminate"
        assert model.requests == []
    assert stamps(tmp_path) == ["one"]


async def test_a_turn_killed_in_an_inline_approved_call_is_indeterminate_despite_a_reused_id(
    tmp_path: Path,
) -> None:
    """The approver answered at once, inside the asking turn, and the stamp (``call_0``,
    like the peek of the step before) was running when the process died."""
    marker = anyio.Path(tmp_path / "stamping")
    argv = worker(tmp_path, Path(marker), "inline", "", tool="after")
    await sigkill_when(argv, marker.exists, what="the inline approved call ran")
    assert stamps(tmp_path) == ["one"]

    model = ScriptedModel([Reply("never asked")])
    async with finisher(tmp_path, model, peek=True) as host:
        operator = await host.operator("ops", reason="inspect a crashed turn")
        (claimed,) = await host.approvals.list(operator, status=None)
        assert (claimed.status, claimed.call_id) == ("indeterminate", "call_0")
        assert claimed.continuation_turn_id == claimed.turn_id
        assert claimed.void_reason is not None
        assert "may have run" in claimed.void_reason
        statuses = dict(await turn_rows(host))
        assert statuses[claimed.turn_id] == "indeterminate"
        # The peek's answer, then the stamp's: its outcome is unknown, not the peek's.
        peeked, unknown = await tool_texts(host, claimed.turn_id)
        assert peeked == "peeked notes"
        assert unknown.startswith("[indeterminate] this call may have run")
        assert model.requests == []
    assert stamps(tmp_path) == ["one"]


async def tool_texts(host: Host, turn_id: str) -> list[str]:
    """The texts of the turn's tool messages, in transcript order."""
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT content FROM messages WHERE turn_id = ? AND role = 'tool' ORDER BY seq",
            [turn_id],
        ).fetchall()
    )
    return [json.loads(content)["text"] for (content,) in rows]


# The continuation's lease ttl in the tests below: a silent holder loses it within two.
TTL_S = 2.0
# How long the answers below may wait: far longer than the lease rule needs.
ANSWER_WAIT_S = 30.0


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
async def test_answering_again_ends_a_continuation_whose_holder_died_or_went_silent(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """The same answer again, from a Host opened before the continuation's process stopped
    (its start-up recovery ended nothing), waits for that continuation by the lease rule:
    a holder provably dead (same machine, pid gone) ends at once, a silent one (paused)
    between one and two ttls after its last renewal. The answer is that record (the
    claimed call may have run: ``indeterminate``), never ``TurnInProgress`` after the
    whole wait; while the holder still holds, ``retry_at`` says until when."""
    approval_id = await paused_turn(tmp_path)
    marker = anyio.Path(tmp_path / "claimed")
    model = ScriptedModel([Reply("never asked")])
    async with finisher(tmp_path, model) as host:
        operator = await host.operator("ops", reason="answer again")
        argv = worker(
            tmp_path, Path(marker), "continue", approval_id, tool="before", ttl_s=str(TTL_S)
        )
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        async with child_process(argv, **quiet) as child:
            try:
                with anyio.fail_after(60):
                    while not await marker.exists():  # noqa: ASYNC110 (another process)
                        await anyio.sleep(0.02)
                # Held: not waiting, the answer says when asking again can tell more.
                with pytest.raises(TurnInProgress) as running:
                    await host.approvals.answer(approval_id, "approve_once", by=operator, wait_s=0)
                assert running.value.retry_at is not None
                assert 0 < running.value.retry_at - time.time() <= TTL_S
                child.send_signal(stop)
                if stop == signal.SIGKILL:
                    await child.wait()
                started = anyio.current_time()
                with pytest.raises(ApprovalRefused) as refused:
                    await host.approvals.answer(
                        approval_id, "approve_once", by=operator, wait_s=ANSWER_WAIT_S
                    )
                waited = anyio.current_time() - started
            finally:
                if child.returncode is None:
                    child.kill()
        assert refused.value.reason == "indeterminate"
        assert waited < (1.0 if stop == signal.SIGKILL else 2 * TTL_S + 1.0)
        void = await host.approvals.get(operator, approval_id)
        assert void.status == "indeterminate"
        assert void.continuation_turn_id is not None
        statuses = dict(await turn_rows(host))
        assert statuses[void.continuation_turn_id] == "indeterminate"
        assert model.requests == []
    assert stamps(tmp_path) == []
