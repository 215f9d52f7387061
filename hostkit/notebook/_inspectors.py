"""Inspector widgets: context decisions, budgets, sessions and approvals as ipywidgets.

Drawn only from the view-models of ``hostkit.inspect`` (``ContextView``,
``BudgetView``, ``ApprovalRows``; the SessionBrowser over ``SessionRows`` is in
``_browser``): no SQL and no policy here.
Each inspector is an ``ipywidgets.VBox`` with ``.model`` (its view-model) and
``.text()`` (a plain rendering for assertions and non-widget front ends); the
graphics are inline HTML/SVG in JupyterLab's theme colours (``_theme``), so
they render headless and read in light and dark themes. Every database value
is HTML-escaped: ids, model names and approval views may have been chosen by a
model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
import weakref
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import ipywidgets as widgets

from hostkit.effects import ApprovalDecision, ApprovalFilter, PendingApproval
from hostkit.errors import (
    ApprovalRefused,
    HostkitError,
    NotFoundOrUnauthorized,
    UserError,
    bounded,
)
from hostkit.host import Host
from hostkit.inspect import (
    ApprovalRows,
    BudgetView,
    ContextView,
    ModelPrice,
    approval_rows,
    budget_view,
    context_view,
)
from hostkit.notebook._approval_view import (
    APPROVE_ONCE,
    APPROVE_SESSION,
    DENY,
    answer_html,
    button_layout,
    buttons_layout,
)
from hostkit.notebook._chart import usage_chart
from hostkit.notebook._inspector_html import (
    approval_html,
    calibration_line,
    cost_text,
    esc,
    estimate_text,
    header_html,
    legend_html,
    number,
    panel_html,
    step_html,
    title_html,
    totals_line,
    usage_table,
    view_text,
)
from hostkit.notebook._plain import plain_bundle
from hostkit.types import PrincipalScope, plural

__all__ = [
    "Answer",
    "ApprovalsPanel",
    "BudgetInspector",
    "ContextInspector",
    "shut_down_panels",
]

# Refusals no later click can change: the approval was answered, voided or is not there.
_FINAL_REFUSALS = frozenset({"answered", "stale", "superseded", "indeterminate"})
# The panels whose buttons answer, for the kernel's shutdown to disable.
_ANSWERING: weakref.WeakSet[ApprovalsPanel] = weakref.WeakSet()

_DECISIONS: tuple[tuple[ApprovalDecision, str], ...] = (
    ("approve_once", APPROVE_ONCE),
    ("approve_session", APPROVE_SESSION),
    ("deny", DENY),
)
_SAID = {
    "approve_once": "approved once",
    "approve_session": "approved for this session",
    "deny": "denied",
}

Answer = Callable[[str, ApprovalDecision], Awaitable[object]]


class _Inspector(widgets.VBox):
    """A VBox whose plain-text representation is ``text()``, escaped (``plain_bundle``).

    Each inspector renders its own view-model as text; this default is only
    the HTML children with their tags stripped.
    """

    def text(self) -> str:
        parts = (child.value for child in self.children if isinstance(child, widgets.HTML))
        return "\n".join(html.unescape(re.sub(r"<[^>]+>", " ", part)).strip() for part in parts)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        bundle: dict[str, Any] | None = plain_bundle(
            super()._repr_mimebundle_(**kwargs), self.text()
        )
        return bundle


class ContextInspector(_Inspector):
    """One turn's context decisions: a stacked bar per step, a layer table, badges.

    The bar's full width is the context window; each layer is one segment
    proportional to its tokens; a red marker stands at the hard input budget.
    """

    def __init__(self, view: ContextView) -> None:
        self.model = view
        parts = [header_html(view)]
        parts += [step_html(step) for step in view.steps] or ["<i>no context decisions</i>"]
        if view.steps_truncated:
            parts.append(f"<i>only the first {plural(len(view.steps), 'step')} are shown</i>")
        parts.append(legend_html())
        super().__init__(children=[widgets.HTML(panel_html(*parts))])

    @classmethod
    async def load(
        cls,
        host: Host,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
    ) -> ContextInspector:
        """The inspector of ``turn_id``, or of the session's latest turn (owner-checked)."""
        return cls(await context_view(host, scope, session_id=session_id, turn_id=turn_id))

    def html(self) -> str:
        """The rendered HTML (what the widget shows)."""
        return "".join(child.value for child in self.children if isinstance(child, widgets.HTML))

    def text(self) -> str:
        view = self.model
        lines = [
            f"context of turn {view.turn_id or '(none yet)'} (session {view.session_id}, "
            f"{view.turn_status or '-'}, agent {view.core_id or '-'})"
        ]
        for step in view.steps:
            if step.kind == "overflow":
                lines.append(
                    f"step {step.step_id} overflow: {step.overflow_reason or 'unknown'} "
                    f"(needs {number(step.estimated_input_tokens)} tokens before history)"
                )
                continue
            lines.append(
                f"step {step.step_id} {step.kind}: estimated {number(step.estimated_input_tokens)}"
                f" / hard budget {number(step.hard_budget)} / window {number(step.context_window)}"
                f" / output budget {number(step.output_budget)}; reported"
                f" {number(step.reported_input_tokens)}; estimator {step.estimator or '-'}"
                f"{' (exact)' if step.exact_estimator else ''} calibration"
                f" {step.calibration if step.calibration is not None else '-'}"
            )
            if labels := step.badges:
                lines.append("  " + ", ".join(labels))
            lines.extend(
                f"  {layer.name}: {plural(layer.tokens, 'token')}, {plural(layer.items, 'item')},"
                f" {layer.pruned} pruned"
                for layer in step.layers
            )
        if view.steps_truncated:
            lines.append(f"(only the first {plural(len(view.steps), 'step')} are shown)")
        return "\n".join(lines)


class BudgetInspector(_Inspector):
    """A session's usage: a plot of tokens per call, a table per turn and step, calibration, cost.

    Estimates are marked exact only when the model's own tokenizer counted
    them; ``≈`` marks a stand-in's approximation. A free model costs ``$0``.
    """

    def __init__(self, view: BudgetView) -> None:
        self.model = view
        parts = [
            title_html("budget", ("session", view.session_id)),
            f"<div><b>totals</b>: {esc(totals_line(view.totals))}</div>",
            usage_chart(view),
            usage_table(view),
            f"<div>{esc(calibration_line(view))}</div>",
        ]
        if view.turns_truncated:
            parts.append(f"<i>the newest {len(view.turns)} turns are shown</i>")
        super().__init__(children=[widgets.HTML(panel_html(*parts))])

    @classmethod
    async def load(
        cls,
        host: Host,
        scope: PrincipalScope,
        session_id: str,
        *,
        prices: dict[str, ModelPrice] | None = None,
    ) -> BudgetInspector:
        """The inspector of ``session_id`` (owner-checked); ``prices`` extend ``PRICES``."""
        return cls(await budget_view(host, scope, session_id, prices=prices))

    def html(self) -> str:
        """The rendered HTML (what the widget shows)."""
        return "".join(child.value for child in self.children if isinstance(child, widgets.HTML))

    def text(self) -> str:
        view = self.model
        lines = [f"budget of session {view.session_id}"]
        for turn in view.turns:
            lines.append(f"turn {turn.turn_id} ({turn.status}): {totals_line(turn.totals)}")
            lines.extend(
                f"  step {s.step_id}{' summary' if s.summary else ''} {s.model}:"
                f" input {number(s.input_tokens)},"
                f" output {number(s.output_tokens)},"
                f" cache read {number(s.cache_read_tokens)},"
                f" cache write {number(s.cache_write_tokens)};"
                f" estimated {estimate_text(s.estimated_input_tokens, s.exact_estimate)}"
                f" (error {'-' if s.error_pct is None else f'{s.error_pct:+.1f}%'});"
                f" cost {cost_text(s.cost_usd)}"
                for s in turn.steps
            )
        lines.append(calibration_line(view))
        lines.append(f"totals: {totals_line(view.totals)}")
        return "\n".join(lines)


def _final(exc: Exception) -> bool:
    """Whether an answer's error is the approval's own state, which no retry changes."""
    if isinstance(exc, ApprovalRefused):
        return exc.reason in _FINAL_REFUSALS
    return isinstance(exc, NotFoundOrUnauthorized)


def shut_down_panels() -> None:
    """Disable the buttons of every answering ApprovalsPanel (the kernel shuts down)."""
    for panel in list(_ANSWERING):
        panel.shut_down()


class _ApprovalLine:
    """One approval's widgets: description, buttons (pending rows only), outcome and answer.

    ``answer`` stays empty until a click ran the continuation turn; it then
    shows what the agent answered.
    """

    def __init__(self, approval: PendingApproval, answerable: bool) -> None:
        self.approval = approval
        self.outcome = widgets.HTML(esc(approval.status))
        self.answer = widgets.HTML("")
        self.buttons = (
            tuple(
                widgets.Button(description=label, layout=button_layout()) for _, label in _DECISIONS
            )
            if answerable
            else ()
        )
        for button, style in zip(self.buttons, ("success", "", "danger"), strict=False):
            button.button_style = style
        self.widget = widgets.VBox(
            [
                widgets.HTML(approval_html(approval)),
                widgets.HBox([*self.buttons, self.outcome], layout=buttons_layout()),
                self.answer,
            ],
            layout=widgets.Layout(border="1px solid #d0d7de", padding="4px", margin="2px 0"),
        )
        self.said: str = approval.status
        self.answer_text: str | None = None
        self.final = False  # answered here, or refused for good: the buttons stay off

    def set_busy(self, busy: bool) -> None:
        for button in self.buttons:
            button.disabled = busy or self.final

    def end(self, said: str, html_text: str) -> None:
        """No click on this row can do anything any more: buttons off for good, and why."""
        self.final = True
        self.set_busy(True)
        self.said = said
        self.outcome.value = html_text


class ApprovalsPanel(_Inspector):
    """Approvals with their redacted views; with ``answer``, buttons that answer them.

    ``answer(approval_id, decision)`` is scheduled on the event loop that was
    running when the panel was built (button callbacks may arrive on another
    thread); the row then shows the outcome, or the error's message. Only
    pending rows get buttons. ``join()`` waits for the answers in flight.
    """

    def __init__(self, rows: ApprovalRows, *, answer: Answer | None = None) -> None:
        self.model = rows
        self._answer = answer
        self._loop: asyncio.AbstractEventLoop | None = None
        if answer is not None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError as exc:
                raise UserError(
                    "an ApprovalsPanel that answers must be built on a running event loop "
                    "(in a notebook cell or async code)"
                ) from exc
        self._tasks: set[asyncio.Task[None]] = set()
        self.lines = {
            a.approval_id: _ApprovalLine(a, answer is not None and a.status == "pending")
            for a in rows.approvals
        }
        for line in self.lines.values():
            if not line.buttons:
                continue
            for button, (decision, _) in zip(line.buttons, _DECISIONS, strict=True):
                button.on_click(self._clicked(line, decision))
        if answer is not None:
            _ANSWERING.add(self)
        notes = [] if self.lines else [widgets.HTML("<i>no approvals</i>")]
        if rows.truncated:
            notes.append(widgets.HTML(f"<i>{esc(self._more())}</i>"))
        super().__init__(children=[*(line.widget for line in self.lines.values()), *notes])

    def _more(self) -> str:
        """What a cut panel says under its rows: older approvals exist that are not shown."""
        return f"(the {len(self.model.approvals)} newest; older approvals are not shown)"

    @classmethod
    async def load(
        cls,
        host: Host,
        scope: PrincipalScope,
        *,
        status: ApprovalFilter | None = "pending",
        limit: int = 50,
        exclude: Collection[str] = (),
    ) -> ApprovalsPanel:
        """The scope's approvals, answered through ``host.approvals.answer(..., by=scope)``.

        ``exclude`` names approvals shown elsewhere (a panel asking them now).
        """

        async def answer(approval_id: str, decision: ApprovalDecision) -> object:
            return await host.approvals.answer(approval_id, decision, by=scope)

        rows = await approval_rows(host, scope, status=status, limit=limit)
        if exclude:
            kept = tuple(a for a in rows.approvals if a.approval_id not in exclude)
            rows = dataclasses.replace(rows, approvals=kept)
        return cls(rows, answer=answer)

    def _clicked(self, line: _ApprovalLine, decision: ApprovalDecision) -> Callable[[Any], None]:
        def clicked(_: Any) -> None:
            loop = self._loop
            if loop is None or any(button.disabled for button in line.buttons):
                return
            line.set_busy(True)
            line.outcome.value = f"<i>{esc(_SAID[decision])}…</i>"
            loop.call_soon_threadsafe(self._start, line, decision)

        return clicked

    def _start(self, line: _ApprovalLine, decision: ApprovalDecision) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._run(line, decision))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, line: _ApprovalLine, decision: ApprovalDecision) -> None:
        assert self._answer is not None
        try:
            result = await self._answer(line.approval.approval_id, decision)
        except Exception as exc:  # shown in the row; the panel must outlive any failure
            message = exc.message if isinstance(exc, HostkitError) else bounded(str(exc), 300)
            if _final(exc):
                # Answered elsewhere, void or gone: every later click would say the same.
                said = f"no longer pending: {message}"
                line.end(said, f"<span style='color:#57606a'>{esc(said)}</span>")
                return
            line.said = f"error: {message}"  # a timeout, the Host closing: try again
            line.outcome.value = f"<span style='color:#cf222e'>{esc(line.said)}</span>"
            line.set_busy(False)
            return
        outcome = getattr(result, "outcome", None)
        said = _SAID[decision] + (f"; continuation {outcome}" if outcome else "")
        line.end(said, f"<b>{esc(said)}</b>")
        text = getattr(result, "text", None)
        if isinstance(text, str) and outcome is not None:
            line.answer_text = text
            line.answer.value = answer_html(text)

    def shut_down(self) -> None:
        """The kernel shuts down: its buttons can answer nothing now; the CLI still can."""
        for line in self.lines.values():
            if line.buttons and not line.final:
                approval_id = line.approval.approval_id
                said = (
                    "the kernel shut down; the approval stays pending: "
                    f"`hostkit approvals approve {approval_id}`"
                )
                line.end(said, f"<i>{esc(said)}</i>")

    async def join(self) -> None:
        """Wait for every answer clicked so far to finish (its row is then updated)."""
        await asyncio.sleep(0)  # let clicks scheduled with call_soon_threadsafe start
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def text(self) -> str:
        lines = []
        for line in self.lines.values():
            lines.append(
                f"{line.approval.approval_id}  {line.approval.core_id}  {line.approval.effect}  "
                f"{line.said}  {view_text(line.approval)}"
            )
            if line.answer_text is not None:
                lines.append(f"  answered: {bounded(line.answer_text.strip(), 300)}")
        if self.model.truncated:
            lines.append(self._more())
        return "\n".join(lines or ["no approvals"])
