"""WidgetApprover: approvals as clicks in the turn's own panel.

The runtime calls ``decide`` inside the turn; it adds an Approve/Deny row to
that turn's panel and awaits a future that the button callbacks resolve
through ``loop.call_soon_threadsafe`` (comm handlers may run on another
thread). The cell that started the turn has already returned, so the kernel
is idle and delivers the click on every ipykernel version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.notebook._turn import ApprovalRow, TurnView

__all__ = ["WidgetApprover"]

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

    def bind(self, view_for: Callable[[str], TurnView | None]) -> None:
        self._view_for = view_for

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ApprovalDecision] = loop.create_future()
        row = ApprovalRow(
            request.effect, request.view, secret_names=request.secret_names, warning=request.warning
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
        (await self._panel(request.turn_id)).add_row(row)
        try:
            decision = await answer
        except asyncio.CancelledError:
            row.close(
                "not answered here (no answer in time, or the Host closed): "
                "if the turn waits (needs_user), answer it later"
            )
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
