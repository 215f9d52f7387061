"""WidgetApprover: approvals as clicks in the turn's own panel.

The runtime calls ``decide`` inside the turn; it adds an Approve/Deny row to
that turn's panel and awaits a future that the button callbacks resolve
through ``loop.call_soon_threadsafe`` (comm handlers may run on another
thread). The cell that started the turn has already returned, so the kernel
is idle and delivers the click on every ipykernel version.

A row whose question goes away — its Host closed, its approval answered
elsewhere or no longer pending, voided by a stop, no answer in time, the
kernel shutting down — disables its buttons and says why and where the
approval can still be answered, instead of offering buttons that do nothing;
its turn's panel says the same in place of "waiting for approval".
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from hostkit.effects import ApprovalDecision, ApprovalRequest, still_pending
from hostkit.notebook._turn import KERNEL_GONE, ApprovalRow, TurnView

__all__ = ["STOPPED", "WidgetApprover"]

# Rows remembered after their prompt ended, so a late ``withdrawn`` can still explain them.
_MAX_ROWS = 200
STOPPED = (
    "not answered here (the turn stopped or the Host closed): if the approval is still "
    "pending, answer it with host.approvals or `hostkit approvals approve {id}`"
)

_SAID: dict[ApprovalDecision, str] = {
    "approve_once": "approved once",
    "approve_session": "approved for this session",
    "deny": "denied",
}


class WidgetApprover:
    """The notebook's ``ApprovalProvider``; decisions go through the ApprovalRuntime as any other.

    ``view_for(turn_id)`` finds the turn's panel; a turn without one (started
    outside ``chat``) gets its row in ``orphans``, a panel the notebook can show.
    """

    def __init__(self, view_for: Callable[[str], TurnView | None] | None = None) -> None:
        self._view_for = view_for or (lambda turn_id: None)
        self.orphans = TurnView.board("approvals for turns started outside chat")
        # Each prompt's row and the panel it is in.
        self._rows: OrderedDict[str, tuple[ApprovalRow, TurnView]] = OrderedDict()
        self._withdrawn: dict[str, str] = {}

    def withdrawn(self, request: ApprovalRequest, reason: str) -> None:
        """The runtime took the question back (Host closed, answered elsewhere, voided by a
        stop, timed out): the row disables its buttons and says why, and so does its panel."""
        self._withdraw(request.approval_id, reason)

    def _withdraw(self, approval_id: str, reason: str) -> None:
        self._withdrawn[approval_id] = reason
        if len(self._withdrawn) > _MAX_ROWS:
            self._withdrawn.pop(next(iter(self._withdrawn)))
        asked = self._rows.get(approval_id)
        if asked is not None:
            row, view = asked
            row.close(reason)
            view.withdrawn(approval_id, reason)

    def shut_down(self) -> None:
        """The kernel shuts down: no click can reach a row any more, and the approvals stay
        pending (the next Host pauses their turns ``needs_user``). Synchronous: the loop is
        stopping."""
        for approval_id, (row, _) in list(self._rows.items()):
            if row.waiting:
                self._withdraw(approval_id, still_pending(approval_id, KERNEL_GONE))

    def bind(self, view_for: Callable[[str], TurnView | None]) -> None:
        self._view_for = view_for

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ApprovalDecision] = loop.create_future()
        row = ApprovalRow(
            request.effect,
            request.view,
            secret_names=request.secret_names,
            warning=request.warning,
            approval_id=request.approval_id,
            expires_at=request.expires_at,
        )

        def choose(decision: ApprovalDecision) -> Callable[[object], None]:
            def clicked(_: object) -> None:
                row.choice = row.choice or decision  # the first click is the answer
                loop.call_soon_threadsafe(settle, decision)

            return clicked

        def settle(decision: ApprovalDecision) -> None:
            if not answer.done():
                answer.set_result(decision)

        for button, decision in zip(
            row.buttons, ("approve_once", "approve_session", "deny"), strict=True
        ):
            button.on_click(choose(decision))  # type: ignore[arg-type]
        view = await self._panel(request.turn_id)
        self._rows[request.approval_id] = (row, view)
        if len(self._rows) > _MAX_ROWS:
            self._rows.popitem(last=False)
        view.add_row(row)
        row.start_countdown()
        try:
            decision = await answer
        except asyncio.CancelledError:
            reason = self._withdrawn.pop(request.approval_id, None)
            row.close(reason or STOPPED.format(id=request.approval_id))
            if reason is not None:  # withdrawn before the row was in its panel
                view.withdrawn(request.approval_id, reason)
            raise
        row.close(_SAID[decision])
        return decision

    async def _panel(self, turn_id: str) -> TurnView:
        # The panel learns its turn id from the turn.started event, which its pump may
        # not have handled yet when the first effect asks: give it a few loop turns.
        for _ in range(100):
            view = self._view_for(turn_id)
            if view is not None:
                return view
            await asyncio.sleep(0.01)
        return self.orphans
