"""An approval widget always shows the true state of its approval (docs/notebook.md).

It never offers a button that cannot do anything, nor advice that can only
fail: after a kernel shutdown, after a stop that voided the approval, after an
answer given elsewhere, after an answer that can never succeed; and a turn
waiting for the session behind a waiting approval shows that approval's
buttons in its own panel, since re-running a cell replaces the panel that had
them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

import hostkit.notebook as hn
from hostkit.errors import ApprovalRefused, NotFoundOrUnauthorized
from hostkit.inspect import ApprovalRows
from hostkit.notebook import ApprovalsPanel
from hostkit.notebook import _shutdown as shutdown
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest
from tests.contract.test_notebook import notebook_config, stamp, stamped, until
from tests.contract.test_notebook_inspectors import approval

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


class Kernel:
    """What ipykernel's kernel offers the notebook: ``do_shutdown``, which a restart calls."""

    def __init__(self) -> None:
        self.shut: list[bool] = []

    def do_shutdown(self, restart: bool) -> dict[str, Any]:
        self.shut.append(restart)
        return {"status": "ok", "restart": restart}


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    """A kernel the NotebookHost hooks into as it does into ipykernel's."""
    fake = Kernel()
    monkeypatch.setattr(shutdown, "_kernel", lambda: fake)
    return fake


def stamping() -> ScriptedModel:
    def decide(request: ModelRequest) -> CallTools | Reply:
        if request.messages[-1].role == "tool":
            return Reply("stamped it")
        return CallTools(("desk_stamp", {"label": "one"}))

    return ScriptedModel([decide], repeat_last=True)


@pytest.fixture
async def nb(tmp_path: Path, kernel: Kernel) -> AsyncIterator[hn.NotebookHost]:
    stamped.clear()
    notebook = await hn.start(
        notebook_config(tmp_path, ask=["desk.stamp"]),
        capabilities=capabilities(stamping(), tools=[stamp]),
    )
    try:
        yield notebook
    finally:
        await notebook.aclose()


async def status_of(nb: hn.NotebookHost, approval_id: str) -> str:
    operator = await nb.host.operator("notebook", reason="read an approval")
    return (await nb.host.approvals.get(operator, approval_id)).status


@pytest.mark.parametrize("thread", ["loop", "control"])
async def test_a_kernel_shutdown_closes_every_live_row_saying_the_approval_stays_pending(
    nb: hn.NotebookHost, kernel: Kernel, thread: str
) -> None:
    """A restart ends the loop under the panel: its buttons, its Stop and its countdown
    would be left looking live. The kernel's shutdown request closes them first, on
    whatever thread it arrives (ipykernel 7 runs it on the control thread)."""
    view = nb.chat("stamp one")
    row = await view.approval()
    assert row is not None
    assert row.approval_id is not None
    operator = await nb.host.operator("notebook", reason="a panel of pending approvals")
    panel = await ApprovalsPanel.load(nb.host, operator)
    line = panel.lines[row.approval_id]
    assert not any(b.disabled for b in line.buttons)

    if thread == "loop":
        kernel.do_shutdown(True)
    else:
        await anyio.to_thread.run_sync(kernel.do_shutdown, True)

    assert kernel.shut == [True]  # the kernel's own shutdown still runs
    assert all(b.disabled for b in row.buttons)
    assert row.countdown.value == ""
    said = row.status.value
    assert "the kernel shut down" in said
    assert "still pending" in said
    assert f"hostkit approvals approve {row.approval_id}" in said
    assert view.stop_button.disabled
    assert "running…" not in view.outcome_html
    assert "needs_user" in view.outcome_html
    assert "the kernel shut down" in view.text()
    assert f"waiting for approval {row.approval_id}" not in view.text()
    # The durable approval panel's buttons answer through this kernel too: off, and why.
    assert all(b.disabled for b in line.buttons)
    assert f"hostkit approvals approve {row.approval_id}" in line.outcome.value
    # What the rows say is true: nothing answered it, it is still pending.
    assert await status_of(nb, row.approval_id) == "pending"
    assert nb.waiting_rows() == ()


async def test_interpreter_exit_without_a_shutdown_request_closes_the_rows_too(
    nb: hn.NotebookHost,
) -> None:
    view = nb.chat("stamp one")
    row = await view.approval()
    assert row is not None
    nb._emergency_stop()  # what atexit runs
    assert all(b.disabled for b in row.buttons)
    assert "the kernel shut down" in row.status.value
    assert view.stop_button.disabled


async def test_a_rerun_cell_shows_the_waiting_approval_in_its_own_panel(
    nb: hn.NotebookHost,
) -> None:
    """Re-running a chat cell replaces the panel whose row waits: the new turn waits for
    the session that approval holds, so its panel shows the same row (one widget, two
    places); a click there answers it and the new turn goes on."""
    first = nb.chat("stamp one")
    row = await first.approval()
    assert row is not None
    second = nb.chat("stamp two")  # the re-run: its output replaces the first panel
    panel = second.panel
    await until(lambda: "waiting for the session" in second.text())
    await until(lambda: second.borrowed)
    assert second.borrowed == [(first.turn_id, row)]
    assert any(child is row.widget for child in panel.children[4].children)
    assert f"turn {first.turn_id} waits for your approval of desk.stamp" in second.text()
    with pytest.raises(hn.ApprovalPending) as refused:
        await asyncio.wait_for(second.wait(), 10)
    assert "in this turn's panel" in str(refused.value)
    assert "`await nb.dashboard()`" in str(refused.value)
    assert nb.waiting_rows() == (row,)  # one approval, however many panels show it
    second.borrowed[0][1].approve_once.click()  # the click in the new panel
    assert (await first).outcome == "completed"
    own = await second.approval()
    assert own is not None
    own.approve_once.click()
    assert (await second).outcome == "completed"
    assert stamped == ["one", "one"]
    second.close()  # closing the new panel leaves the first one's row alone
    assert row.widget.comm is not None


async def test_closing_the_holders_panel_leaves_the_row_the_rerun_panel_still_shows(
    nb: hn.NotebookHost,
) -> None:
    """The old cell's panel closed after its row was answered in the re-run cell's: the
    row stays open while that panel shows it, the re-run turn asks and completes in its
    own panel, and the last panel to close takes the row with it."""
    first = nb.chat("stamp one")
    row = await first.approval()
    assert row is not None
    second = nb.chat("stamp two")
    assert second.panel is not None
    await until(lambda: second.borrowed)
    second.borrowed[0][1].approve_once.click()
    assert (await first).outcome == "completed"
    first.close()
    assert row.widget.comm is not None  # the re-run panel still shows it
    own = await asyncio.wait_for(second.approval(), 10)
    assert own is not None
    own.approve_once.click()
    assert (await second).outcome == "completed", second.text()
    second.close()
    assert row.widget.comm is None


async def test_a_turn_never_admitted_says_the_shutdown_ran_nothing(
    nb: hn.NotebookHost, kernel: Kernel
) -> None:
    first = nb.chat("stamp one")
    assert await first.approval() is not None
    second = nb.chat("stamp two")
    await until(lambda: "waiting for the session" in second.text())
    kernel.do_shutdown(True)
    assert second.turn_id is None
    assert "before this turn started: nothing ran or was recorded" in second.text()
    assert "the next Host records" not in second.text()


async def test_a_panel_waiting_before_the_holder_asks_shows_the_row_once_asked(
    tmp_path: Path, kernel: Kernel
) -> None:
    stamped.clear()
    gate = asyncio.Event()

    async def decide(request: ModelRequest) -> CallTools | Reply:
        if request.messages[-1].role == "tool":
            return Reply("stamped it")
        await gate.wait()
        return CallTools(("desk_stamp", {"label": "one"}))

    nb = await hn.start(
        notebook_config(tmp_path, ask=["desk.stamp"]),
        capabilities=capabilities(ScriptedModel([decide], repeat_last=True), tools=[stamp]),
    )
    try:
        first = nb.chat("stamp one")
        second = nb.chat("stamp two")
        await until(lambda: "waiting for the session" in second.text())
        assert second.borrowed == []  # nothing asked yet
        gate.set()
        row = await first.approval()
        assert row is not None
        await until(lambda: second.borrowed)
        assert second.borrowed == [(first.turn_id, row)]
        row.deny.click()
        await first
        own = await second.approval()
        assert own is not None
        own.deny.click()
        await second
    finally:
        gate.set()
        await nb.aclose()


@pytest.mark.parametrize(
    "refusal",
    [
        ApprovalRefused("apr_1", "answered", "it was already approved and run"),
        ApprovalRefused("apr_1", "superseded", "a newer turn ran in the session"),
        ApprovalRefused("apr_1", "stale", "the agent's policy changed since it was asked"),
        ApprovalRefused("apr_1", "indeterminate", "its call may have run"),
        NotFoundOrUnauthorized("approval"),
    ],
    ids=lambda e: getattr(e, "reason", type(e).__name__),
)
async def test_an_answer_refused_for_good_leaves_the_buttons_off(refusal: Exception) -> None:
    """Answered elsewhere, void or gone: no later click can succeed, so none is offered."""
    calls: list[str] = []

    async def answer(approval_id: str, decision: str) -> None:
        calls.append(decision)
        raise refusal

    panel = ApprovalsPanel(ApprovalRows((approval("apr_1"),), "pending", False), answer=answer)
    line = panel.lines["apr_1"]
    line.buttons[2].click()
    await panel.join()
    assert all(b.disabled for b in line.buttons)
    assert "no longer pending" in line.outcome.value
    assert "error" not in line.outcome.value
    line.buttons[0].click()
    await panel.join()
    assert calls == ["deny"]


async def test_a_panel_answer_after_the_approval_was_answered_elsewhere_shows_that(
    nb: hn.NotebookHost,
) -> None:
    view = nb.chat("stamp one")
    row = await view.approval()
    assert row is not None
    assert row.approval_id is not None
    operator = await nb.host.operator("notebook", reason="another notebook's panel")
    panel = await ApprovalsPanel.load(nb.host, operator)
    row.approve_once.click()  # answered in the turn's own panel first
    assert (await view).outcome == "completed"
    line = panel.lines[row.approval_id]
    line.buttons[2].click()  # then Deny in the other panel
    await panel.join()
    assert "no longer pending" in line.outcome.value
    assert "already approved" in line.outcome.value
    assert all(b.disabled for b in line.buttons)


async def test_stop_says_the_approval_is_void_not_that_it_may_be_pending(
    nb: hn.NotebookHost,
) -> None:
    """Stop voids the approval (``superseded``) before the turn is cancelled: the row and
    the panel say so, and never advise approving it."""
    view = nb.chat("stamp one")
    row = await view.approval()
    assert row is not None
    assert row.approval_id is not None
    await view.cancel()
    await until(lambda: view.done)
    await until(lambda: "void" in row.status.value)
    assert "stopped: the approval is void, the call never ran" in row.status.value
    assert "approve" not in row.status.value
    assert f"waiting for approval {row.approval_id}" not in view.text()
    assert "hostkit approvals approve" not in view.text()
    assert await status_of(nb, row.approval_id) == "superseded"
    assert stamped == []


async def test_an_answer_from_elsewhere_updates_the_whole_panel(nb: hn.NotebookHost) -> None:
    """Denied from the CLI while the row waits: the row, the effect's step and the turn's
    outcome all stop saying it waits, and say what is known and where to look."""
    view = nb.chat("stamp one")
    row = await view.approval()
    assert row is not None
    assert row.approval_id is not None
    operator = await nb.host.operator("cli", reason="deny from elsewhere")
    elsewhere = asyncio.ensure_future(
        nb.host.approvals.answer(row.approval_id, "deny", by=operator)
    )
    try:
        await until(lambda: view.done)
        text = view.text()
        assert f"waiting for approval {row.approval_id}" not in text
        assert "denied elsewhere" in text
        assert "`hostkit approvals list --all`" in text
        assert "denied elsewhere" in view.outcome_html
        assert "waiting for approval" not in view.outcome_html
        assert "denied elsewhere" in row.status.value
    finally:
        with anyio.fail_after(10):
            await elsewhere
    assert stamped == []


def test_the_shutdown_hook_wraps_the_kernel_once(kernel: Kernel) -> None:
    calls: list[str] = []
    shutdown.watch_shutdown(lambda: calls.append("first"))
    shutdown.watch_shutdown(lambda: calls.append("second"))
    assert kernel.do_shutdown(False) == {"status": "ok", "restart": False}
    assert calls == ["second"]
    assert kernel.shut == [False]


def test_outside_a_kernel_nothing_is_hooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """No IPython kernel, or an object with no ``do_shutdown``: nothing is set on it, no
    error, and the hook never runs."""
    calls: list[str] = []
    monkeypatch.setattr(shutdown, "_kernel", lambda: None)
    assert shutdown.watch_shutdown(lambda: calls.append("none")) is None
    shell = SimpleNamespace(name="not a kernel")
    monkeypatch.setattr(shutdown, "_kernel", lambda: shell)
    shutdown.watch_shutdown(lambda: calls.append("shell"))
    assert vars(shell) == {"name": "not a kernel"}  # no hook attribute, no do_shutdown
    assert calls == []
