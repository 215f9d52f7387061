"""Clause: an approval is durable from the moment it is asked — a real Host process that dies
(SIGKILL: a crash, a kernel restart) or is interrupted (SIGINT: Ctrl-C) while a person decides
leaves it pending and answerable from another process, and its turn ends ``needs_user``."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import anyio
import pytest

from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests.faults.approval_worker import host_config, stamp_tool
from tests.hosts import event_kinds, turn_rows
from tests.support import child_process, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("approval_worker.py")


def asking(root: Path, marker: Path) -> list[str]:
    options = {"root": str(root), "marker": str(marker), "mode": "ask"}
    return [sys.executable, str(WORKER), json.dumps(options)]


async def interrupt_when_asked(argv: list[str], marker: anyio.Path) -> int:
    """Run ``argv`` and press Ctrl-C (SIGINT) once its prompt is showing; its exit code."""
    async with child_process(argv) as child:
        with anyio.fail_after(60):
            while not await marker.exists():
                assert child.returncode is None, "the child exited before it asked"
                await anyio.sleep(0.02)
            child.send_signal(signal.SIGINT)
            await child.wait()
    assert child.returncode is not None
    return child.returncode


async def answer_and_check(root: Path, approval_id: str, *, recovered: bool) -> None:
    """From another process: the turn waits on the approval; answering it runs the call once."""
    model = ScriptedModel([Reply("stamped after all")])
    tools = [stamp_tool(root)]
    async with Host.open(host_config(root), capabilities=capabilities(model, tools=tools)) as host:
        ((turn_id, status),) = await turn_rows(host)
        assert status == "needs_user"
        state = await host.store.read(
            lambda c: c.execute("SELECT result FROM turns WHERE turn_id = ?", [turn_id]).fetchone()
        )
        assert json.loads(state[0])["pending_approval"] == approval_id
        assert (await event_kinds(host, turn_id))[-1] == "turn.needs_user"
        (detail,) = await host.store.read(
            lambda c: c.execute(
                "SELECT detail FROM turn_events WHERE turn_id = ? ORDER BY seq DESC LIMIT 1",
                [turn_id],
            ).fetchone()
        )
        assert bool(json.loads(detail).get("recovered")) is recovered
        operator = await host.operator("ops", reason="answer a pending approval")
        (pending,) = await host.approvals.list(operator)
        assert (pending.approval_id, pending.status) == (approval_id, "pending")
        result = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert result.outcome == "completed"
        assert result.text == "stamped after all"
    assert (root / "stamps.txt").read_text().splitlines() == ["one"]


async def test_a_host_killed_while_a_person_decides_leaves_the_approval_pending(
    tmp_path: Path,
) -> None:
    marker = anyio.Path(tmp_path / "asked")
    await sigkill_when(asking(tmp_path, Path(marker)), marker.exists, what="the prompt showed")
    approval_id = await marker.read_text()
    # Recovery (the next Host's open) ends the dead Host's turn needs_user on that approval.
    await answer_and_check(tmp_path, approval_id, recovered=True)


async def test_ctrl_c_at_the_prompt_leaves_the_approval_pending(tmp_path: Path) -> None:
    marker = anyio.Path(tmp_path / "asked")
    code = await interrupt_when_asked(asking(tmp_path, Path(marker)), marker)
    assert code != -signal.SIGKILL
    approval_id = await marker.read_text()
    # The interrupted process itself recorded the turn's end: needs_user, not cancelled.
    await answer_and_check(tmp_path, approval_id, recovered=False)
