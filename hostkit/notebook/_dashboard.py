"""The dashboard: sessions, running turns, pending approvals and budget in one widget.

A summary line over four tabs, each drawn from the same view-models and
widgets as the separate inspectors: a ``SessionBrowser`` whose rows open
their panels, the turns this kernel is running, the pending approvals, and
the ``BudgetInspector`` of the notebook's own session. Every pending
approval is stored from the moment it is asked; one a panel of this kernel
is asking is shown as that panel's row (the same widget, so a click here
answers it too), every other one in an ``ApprovalsPanel``, answered through
the Host. It is a snapshot: call ``nb.dashboard()`` again for a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ipywidgets as widgets

from hostkit.host import Host
from hostkit.inspect import budget_view
from hostkit.notebook._browser import SessionBrowser
from hostkit.notebook._inspector_html import (
    cost_text,
    esc,
    panel_html,
    row_html,
    table_html,
    title_html,
    totals_line,
)
from hostkit.notebook._inspectors import ApprovalsPanel, BudgetInspector
from hostkit.notebook._plain import plain_bundle
from hostkit.notebook._turn import ApprovalRow
from hostkit.types import PrincipalScope

__all__ = ["Dashboard", "RunningTurn", "running_html"]


@dataclass(frozen=True, slots=True)
class RunningTurn:
    """A turn this kernel is running, as the dashboard lists it."""

    agent: str
    turn_id: str | None
    message: str
    waiting_for: str | None  # the effect awaiting a click, if any


class Dashboard(widgets.VBox):
    """One widget: a summary line and the tabs *Sessions*, *Running*, *Approvals*, *Budget*."""

    TITLES = ("Sessions", "Running", "Approvals", "Budget")

    def __init__(
        self,
        *,
        database: str,
        sessions: SessionBrowser,
        running: Sequence[RunningTurn],
        waiting: Sequence[widgets.Widget],
        approvals: ApprovalsPanel,
        budget: BudgetInspector | None,
    ) -> None:
        self.sessions, self.approvals, self.budget = sessions, approvals, budget
        self.running, self.waiting = tuple(running), tuple(waiting)
        cost = "-" if budget is None else cost_text(budget.model.totals.cost_usd)
        stored = len(approvals.model.approvals)
        more = "+" if approvals.model.truncated else ""
        self.summary = (
            f"{len(sessions.model.sessions)}{'+' if sessions.model.truncated else ''} sessions, "
            f"{len(self.running)} running turns, {len(self.waiting) + stored}{more} pending "
            "approvals "
            f"({len(self.waiting)} waiting for a click here), this session's cost {cost}"
        )
        header = widgets.HTML(
            panel_html(
                title_html("hostkit", ("database", database)), f"<div>{esc(self.summary)}</div>"
            )
        )
        no_budget = widgets.HTML(panel_html("<i>this notebook has no session yet</i>"))
        pending = widgets.VBox(
            [
                widgets.HTML(panel_html(title_html(f"waiting for a click ({len(self.waiting)})"))),
                *self.waiting,
                widgets.HTML(panel_html(title_html(f"stored as pending ({stored})"))),
                approvals,
            ]
        )
        self.tabs = widgets.Tab(
            [sessions, widgets.HTML(running_html(self.running)), pending, budget or no_budget],
            titles=self.TITLES,
        )
        super().__init__([header, self.tabs])

    @classmethod
    async def load(
        cls,
        host: Host,
        scope: PrincipalScope,
        *,
        session_id: str | None,
        running: Sequence[RunningTurn] = (),
        waiting: Sequence[ApprovalRow] = (),
    ) -> Dashboard:
        """Read everything ``scope`` may see; the budget is of ``session_id`` (the notebook's).

        ``waiting`` are this kernel's rows asking now: their stored approvals
        are shown as those rows, not a second time.
        """
        budget = None
        if session_id is not None:
            budget = BudgetInspector(await budget_view(host, scope, session_id))
        asking = frozenset(row.approval_id for row in waiting if row.approval_id)
        return cls(
            database=host.config.store_location,
            sessions=await SessionBrowser.load(host, scope),
            running=running,
            waiting=[row.widget for row in waiting],
            approvals=await ApprovalsPanel.load(host, scope, exclude=asking),
            budget=budget,
        )

    def text(self) -> str:
        """The summary, then each tab's plain text under its title (the budget's totals only)."""
        parts = [self.summary]
        bodies = (
            self.sessions.text(),
            running_text(self.running),
            f"{len(self.waiting)} waiting for a click here\n{self.approvals.text()}",
            (
                f"session {self.budget.model.session_id}: {totals_line(self.budget.model.totals)}"
                if self.budget is not None
                else "no session yet"
            ),
        )
        for title, body in zip(self.TITLES, bodies, strict=True):
            parts.append(f"== {title}\n{body}")
        return "\n".join(parts)

    def _repr_mimebundle_(self, **kwargs: object) -> dict[str, object] | None:
        bundle: dict[str, object] | None = plain_bundle(
            super()._repr_mimebundle_(**kwargs), self.text()
        )
        return bundle


def running_text(running: Sequence[RunningTurn]) -> str:
    lines = [
        f"{turn.agent}  {turn.turn_id or '(starting)'}  "
        f"{'waiting for approval of ' + turn.waiting_for if turn.waiting_for else 'running'}  "
        f"{turn.message}"
        for turn in running
    ]
    return "\n".join(lines or ["no turns running"])


def running_html(running: Sequence[RunningTurn]) -> str:
    """The running turns as a table (or a note that there are none)."""
    if not running:
        return panel_html("<i>no turns running in this kernel</i>")
    body = "".join(
        row_html(
            turn.agent,
            turn.turn_id or "(starting)",
            f"waiting for approval of {turn.waiting_for}" if turn.waiting_for else "running",
            turn.message,
        )
        for turn in running
    )
    return panel_html(
        title_html(f"running turns ({len(running)})"),
        table_html(("agent", "turn", "state", "message"), body),
        f"<div><small>{esc('answer a waiting turn in its own panel or under Approvals')}"
        "</small></div>",
    )
