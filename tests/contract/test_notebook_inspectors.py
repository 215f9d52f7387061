"""Notebook inspectors, built headless from view-models: text, one bar segment per layer, escaped
HTML, and approval buttons that schedule their answer on the loop and update the row."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest

from hostkit.effects import PendingApproval, ToolContext, tool
from hostkit.errors import ApprovalRefused, UserError
from hostkit.inspect import (
    ApprovalRows,
    BudgetView,
    CalibrationView,
    ContextStep,
    ContextView,
    SessionRows,
    StepUsage,
    TokenTotals,
    TurnUsage,
)
from hostkit.notebook import (
    ApprovalsPanel,
    BudgetInspector,
    ContextInspector,
    SessionBrowser,
)
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import LayerSummary, SessionRecord
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

LAYERS = (
    LayerSummary("instructions", 20, 1),
    LayerSummary("bootstrap", 0, 0),
    LayerSummary("contributions", 0, 0),
    LayerSummary("summary", 120, 1),
    LayerSummary("schemas", 300, 4),
    LayerSummary("framing", 30, 0),
    LayerSummary("history", 900, 12, pruned=3),
    LayerSummary("current", 50, 1),
)


def step(step_id: int = 0, **fields: Any) -> ContextStep:
    values: dict[str, Any] = {
        "step_id": step_id,
        "decision_id": f"ctx_{step_id}",
        "kind": "ready",
        "at": "2025-01-01T00:00:00.000Z",
        "layers": LAYERS,
        "estimated_input_tokens": 1_420,
        "raw_input_tokens": 1_400,
        "framing_tokens": 30,
        "hard_budget": 1_650,
        "output_budget": 300,
        "context_window": 2_000,
        "summary_used": True,
        "cutoff": 8,
        "pruned_results": 3,
        "dropped_messages": 2,
        "protected_dropped": 0,
        "compaction": "committed",
        "estimator": "charclass/3.5/1.5",
        "exact_estimator": False,
        "calibration": 1.02,
        "overflow_reason": None,
        "reported_input_tokens": 1_380,
    }
    values.update(fields)
    return ContextStep(**values)


def overflow_step(step_id: int) -> ContextStep:
    blank = dict.fromkeys(
        (
            "raw_input_tokens",
            "framing_tokens",
            "hard_budget",
            "output_budget",
            "context_window",
            "cutoff",
            "compaction",
            "estimator",
            "calibration",
            "reported_input_tokens",
        )
    )
    return step(
        step_id,
        **blank,
        kind="overflow",
        layers=(),
        estimated_input_tokens=1_761,
        summary_used=False,
        pruned_results=0,
        dropped_messages=0,
        overflow_reason="current_input_too_large",
    )


def context() -> ContextView:
    return ContextView(
        session_id="ses_1",
        turn_id="turn_1",
        turn_status="completed",
        core_id="assistant",
        started_at="2025-01-01T00:00:00.000Z",
        steps=(step(0), step(1, summary_used=False, compaction=None), overflow_step(2)),
        steps_truncated=False,
    )


def totals(steps: int, inp: int, out: int, cost: float | None) -> TokenTotals:
    return TokenTotals(steps, inp, out, 0, 0, cost, 0 if cost is not None else steps)


def usage(step_id: int, inp: int, out: int, model: str = "gpt-4o-mini") -> StepUsage:
    cost = (inp * 0.15 + out * 0.6) / 1_000_000 if model == "gpt-4o-mini" else None
    return StepUsage(
        step_id, f"ctx_{step_id}", "openai", model, inp, out, 0, 0, inp + 10, inp, 1.0, "stop",
        cost, "2025-01-01T00:00:00.000Z",
    )  # fmt: skip


def budget() -> BudgetView:
    steps = (usage(0, 400, 20), usage(1, 700, 35))
    turn = TurnUsage(
        "turn_1", "completed", "assistant", "t0", steps, totals(2, 1_100, 55, 0.000198), False
    )
    other = TurnUsage(
        "turn_2", "completed", "assistant", "t1", (usage(0, 90, 9, "<b>odd</b>"),),
        totals(1, 90, 9, None), False,
    )  # fmt: skip
    return BudgetView(
        session_id="ses_1",
        turns=(turn, other),
        calibration=CalibrationView("openai", "gpt-4o-mini", "charclass", 0.97, 3, "t1"),
        totals=TokenTotals(3, 1_190, 64, 0, 0, 0.000198, 1),
        turns_truncated=False,
    )


def approval(approval_id: str, status: str = "pending", **view: Any) -> PendingApproval:
    return PendingApproval(
        approval_id, "ses_1", "turn_1", "test:alice", "assistant", "rev", "files.write",
        "call_1", {"arguments": view or {"path": "a.md"}}, "fp", "rule", status,  # type: ignore[arg-type]
        None, None, None, "2025-01-01T00:00:00.000Z", None,
    )  # fmt: skip


def test_the_context_inspector_draws_one_segment_per_layer_and_a_budget_marker() -> None:
    view = context()
    inspector = ContextInspector(view)
    assert isinstance(inspector, widgets.VBox)
    assert inspector.model is view
    page = inspector.html()
    bars = re.findall(r'<div class="hk-bar".*?</div></div>', page)
    assert len(bars) == 2  # the overflow step has no layers and no bar
    for bar in bars:
        assert re.findall(r'data-layer="(\w+)"', bar) == [layer.name for layer in LAYERS]
        assert bar.count('class="hk-budget"') == 1
    # Widths are tokens over the window; the marker sits at hard budget over the window.
    assert 'data-layer="history" title="history: 900 tokens" style="width:45.0000%' in page
    assert "left:82.5000%" in page
    for badge in ("summary used", "pruned 3", "dropped 2", "compaction committed"):
        assert f">{badge}</span>" in page
    text = inspector.text()
    assert "context of turn turn_1 (session ses_1, completed, agent assistant)" in text
    assert "step 0 ready: estimated 1,420 / hard budget 1,650 / window 2,000" in text
    assert "summary used, pruned 3, dropped 2, compaction committed" in text
    assert "  history: 900 tokens, 12 items, 3 pruned" in text
    assert "step 2 overflow: current_input_too_large (needs 1,761 tokens before history)" in text
    bundle = inspector._repr_mimebundle_()
    assert bundle is not None
    assert bundle["text/plain"] == text
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_the_budget_inspector_plots_input_and_output_per_step_and_totals_cost() -> None:
    inspector = BudgetInspector(budget())
    page = inspector.html()
    assert page.count('class="hk-input"') == page.count('class="hk-output"') == 3
    assert "<svg" in page
    assert "matplotlib" not in page
    assert "&lt;b&gt;odd&lt;/b&gt;" in page
    assert "<b>odd</b>" not in page
    text = inspector.text()
    assert "turn turn_1 (completed): 2 steps, input 1,100, output 55" in text
    assert "step 1 gpt-4o-mini: input 700, output 35" in text
    assert "cost unknown" in text  # the unpriced model's step and turn
    assert "calibration: openai/gpt-4o-mini estimator charclass ratio 0.970 over 3" in text
    assert "totals: 3 steps, input 1,190, output 64" in text
    assert "cost $0.000198 (+1 unpriced step)" in text


def test_the_session_browser_lists_rows_escaped() -> None:
    rows = SessionRows(
        (
            SessionRecord("ses_2", "t2", "active", "<script>x</script>", "conversation"),
            SessionRecord("ses_1", "t1", "active", None, "operator"),
        ),
        truncated=True,
    )
    browser = SessionBrowser(rows)
    assert browser.model is rows
    assert browser.text().splitlines() == [
        "ses_2  t2  conversation  active  <script>x</script>",
        "ses_1  t1  operator  active",
    ]
    assert browser.buttons == {}  # without ``open`` nothing opens
    page = "".join(w.value for w in _html_widgets(browser))
    assert "&lt;script&gt;" in page
    assert "<script>" not in page
    assert "more sessions exist" in page


def test_an_approvals_panel_without_answer_has_no_buttons_and_never_shows_arguments() -> None:
    rows = ApprovalRows((approval("apr_1", path="<img src=x onerror=alert(1)>"),), "pending", False)
    panel = ApprovalsPanel(rows)
    line = panel.lines["apr_1"]
    assert line.buttons == ()
    described = line.widget.children[0].value
    assert "&lt;img" in described
    assert "<img" not in described
    assert "apr_1  assistant  files.write  pending" in panel.text()


def test_an_answering_panel_needs_a_running_loop() -> None:
    async def answer(approval_id: str, decision: str) -> None:
        return None

    with pytest.raises(UserError):
        ApprovalsPanel(ApprovalRows((approval("apr_1"),), "pending", False), answer=answer)


async def test_a_click_schedules_the_answer_on_the_loop_and_updates_the_row() -> None:
    calls: list[tuple[str, str]] = []
    answered = anyio.Event()

    async def answer(approval_id: str, decision: str) -> None:
        calls.append((approval_id, decision))
        answered.set()

    rows = ApprovalRows(
        (approval("apr_1"), approval("apr_2"), approval("apr_3", status="executed")),
        None,
        False,
    )
    panel = ApprovalsPanel(rows, answer=answer)
    assert panel.lines["apr_3"].buttons == ()  # only pending rows can be answered
    once, session, deny = panel.lines["apr_1"].buttons
    assert [b.description for b in (once, session, deny)] == [
        "Approve once",
        "Approve for session",
        "Deny",
    ]
    session.click()
    assert all(b.disabled for b in panel.lines["apr_1"].buttons)
    once.click()  # a second click while answering is ignored
    await answered.wait()
    await panel.join()
    assert calls == [("apr_1", "approve_session")]
    assert "approved for session" in panel.lines["apr_1"].outcome.value
    # A click that arrives on another thread (a comm handler) still runs on the loop.
    answered = anyio.Event()
    await anyio.to_thread.run_sync(panel.lines["apr_2"].buttons[2].click)
    await answered.wait()
    await panel.join()
    assert calls[-1] == ("apr_2", "deny")
    assert "apr_2  assistant  files.write  denied" in panel.text()


async def test_a_failed_answer_shows_its_message_and_can_be_tried_again() -> None:
    async def answer(approval_id: str, decision: str) -> None:
        raise ApprovalRefused(approval_id, "answered", "it was already approved and run")

    panel = ApprovalsPanel(ApprovalRows((approval("apr_1"),), "pending", False), answer=answer)
    line = panel.lines["apr_1"]
    line.buttons[0].click()
    await panel.join()
    assert "error: approval apr_1: it was already approved and run" in line.outcome.value
    assert not any(b.disabled for b in line.buttons)
    assert "error: approval apr_1" in panel.text()


@tool("files.stamp")
async def stamp(ctx: ToolContext, label: str, api_key: str = "") -> str:
    """Stamp a label."""
    return f"stamped {label}"


async def test_loaded_inspectors_read_a_real_host_and_the_panel_answers_through_it(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [CallTools(("files_stamp", {"label": "one", "api_key": "sk-live-1"})), Reply("done")]
    )
    policy = {"allow": ["*"], "ask": ["files.stamp"]}
    async with open_host(tmp_path, model, tools=[stamp], policy=policy) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.outcome == "needs_user"
        operator = await host.operator("ops", reason="notebook inspectors")
        inspector = await ContextInspector.load(host, operator, session_id=paused.session_id)
        assert inspector.model.turn_id == paused.turn_id
        assert inspector.html().count('class="hk-bar"') == len(inspector.model.steps) == 1
        budget_inspector = await BudgetInspector.load(host, operator, paused.session_id)
        assert budget_inspector.text().endswith("cost $0")  # scripted-1 costs nothing
        assert "0.000000" not in budget_inspector.html()
        browser = await SessionBrowser.load(host, operator)
        assert paused.session_id in browser.text()
        panel = await ApprovalsPanel.load(host, operator)
        line = panel.lines[paused.pending_approval or ""]
        assert "sk-live-1" not in panel.text()
        assert "sk-live-1" not in line.widget.children[0].value
        line.buttons[0].click()
        await panel.join()
        assert "approved once; continuation completed" in line.outcome.value
        assert await host.approvals.list(operator) == []


def _html_widgets(widget: widgets.Widget) -> list[widgets.HTML]:
    """Every HTML widget under ``widget``, depth first."""
    found = [widget] if isinstance(widget, widgets.HTML) else []
    for child in getattr(widget, "children", ()):
        found.extend(_html_widgets(child))
    return found
