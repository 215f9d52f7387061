"""Notebook inspectors, built headless from view-models: text, one bar segment per layer, escaped
HTML, and approval buttons that schedule their answer on the loop and update the row."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest

from hostkit.context import TokenizerEstimator
from hostkit.effects import PendingApproval, ToolContext, tool
from hostkit.errors import UserError
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
    cost_text,
)
from hostkit.notebook import (
    ApprovalsPanel,
    BudgetInspector,
    ContextInspector,
    SessionBrowser,
)
from hostkit.notebook._chart import axis_ticks
from hostkit.notebook._theme import GRAPHIC_PAIRS, INPUT, OUTPUT, TEXT_PAIRS
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import LayerSummary, ModelLimits, SessionRecord
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


def test_a_cut_approvals_panel_says_older_ones_are_not_shown() -> None:
    """A full page read as all there is: the panel and the dashboard's count said nothing."""
    cut = ApprovalsPanel(ApprovalRows((approval("apr_2"), approval("apr_1")), "pending", True))
    assert cut.text().splitlines()[-1] == "(the 2 newest; older approvals are not shown)"
    assert "older approvals are not shown" in "".join(w.value for w in _html_widgets(cut))
    whole = ApprovalsPanel(ApprovalRows((approval("apr_1"),), "pending", False))
    assert "not shown" not in whole.text()


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
        "Approve for this session",
        "Deny",
    ]
    session.click()
    assert all(b.disabled for b in panel.lines["apr_1"].buttons)
    once.click()  # a second click while answering is ignored
    await answered.wait()
    await panel.join()
    assert calls == [("apr_1", "approve_session")]
    assert "approved for this session" in panel.lines["apr_1"].outcome.value
    # A click that arrives on another thread (a comm handler) still runs on the loop.
    answered = anyio.Event()
    await anyio.to_thread.run_sync(panel.lines["apr_2"].buttons[2].click)
    await answered.wait()
    await panel.join()
    assert calls[-1] == ("apr_2", "deny")
    assert "apr_2  assistant  files.write  denied" in panel.text()


async def test_a_failed_answer_shows_its_message_and_can_be_tried_again() -> None:
    """A failure that says nothing of the approval itself (a timeout, the Host closing):
    the approval may still be pending, so the buttons come back."""

    async def answer(approval_id: str, decision: str) -> None:
        raise TimeoutError("the store did not answer in time")

    panel = ApprovalsPanel(ApprovalRows((approval("apr_1"),), "pending", False), answer=answer)
    line = panel.lines["apr_1"]
    line.buttons[0].click()
    await panel.join()
    assert "error: the store did not answer in time" in line.outcome.value
    assert not any(b.disabled for b in line.buttons)
    assert "error: the store did not answer in time" in panel.text()


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


# -- the budget chart, costs, exact estimates, theme colours ---------------------------------


def free_budget(*, exact_steps: tuple[int, ...] = ()) -> BudgetView:
    """Two turns on a free model (cost 0.0); ``exact_steps`` were counted by a real tokenizer."""
    steps = tuple(
        replace(usage(i, 400 + 300 * i, 20 + i, "scripted-1"), cost_usd=0.0,
                exact_estimate=i in exact_steps)
        for i in range(3)
    )  # fmt: skip
    turns = (
        TurnUsage("turn_1", "completed", "assistant", "t0", steps[:2], totals(2, 1_100, 41, 0.0),
                  False),
        TurnUsage("turn_2", "completed", "assistant", "t1", steps[2:], totals(1, 1_000, 22, 0.0),
                  False),
    )  # fmt: skip
    return BudgetView("ses_1", turns, None, totals(3, 2_100, 63, 0.0), False)


def test_the_budget_chart_has_axes_ticks_labels_a_legend_and_hover_values() -> None:
    page = BudgetInspector(free_budget()).html()
    (svg,) = re.findall(r"<svg.*?</svg>", page, re.S)
    # The y axis: round ticks from 0 past the largest value (1,010 tokens estimated), labelled.
    assert axis_ticks(1_010) == (0, 250, 500, 750, 1_000, 1_250)
    assert re.findall(r'class="hk-ytick"[^>]*>([^<]+)</text>', svg) == [
        "0", "250", "500", "750", "1,000", "1,250"
    ]  # fmt: skip
    assert ">tokens per call</text>" in svg
    # The x axis: one label per turn, and its title.
    assert re.findall(r'class="hk-xtick"[^>]*>([^<]+)</text>', svg) == ["1", "2"]
    assert ">turn (oldest shown first; one pair of bars per provider call)</text>" in svg
    # A legend naming every series drawn.
    (legend,) = re.findall(r'<g class="hk-legend".*?</g>', svg, re.S)
    for entry in ("input (reported)", "output", "estimate (approximate)"):
        assert f">{entry}</text>" in legend
    # Hover values: each bar and estimate carries its numbers in a <title>.
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert "turn 1 (turn_1) step 1, scripted-1: 700 input tokens; estimated 710 " \
        "(approximate, +1.0% vs reported)" in titles  # fmt: skip
    assert "turn 2 (turn_2) step 2, scripted-1: 22 output tokens" in titles
    assert svg.count('class="hk-input"') == svg.count('class="hk-output"') == 3
    assert svg.count('class="hk-estimate"') == 3
    assert page == BudgetInspector(free_budget()).html()  # deterministic: nbval compares it


def test_the_chart_is_a_block_below_the_header_that_scales_with_the_cell() -> None:
    page = BudgetInspector(free_budget()).html()
    header = page.index('class="hk-title"')
    assert page.index("</div>", header) < page.index("<svg")  # the header ends before the chart
    assert re.search(r'<div class="hk-title" style="display:block', page)
    svg_tag = re.search(r"<svg[^>]*>", page)
    assert svg_tag is not None
    tag = svg_tag.group(0)
    assert 'viewBox="0 0 640 280"' in tag
    assert "display:block;width:100%;max-width:640px;height:auto" in tag
    assert "width=" not in tag.replace("max-width", "").replace("width:100%", "")


def test_costs_show_0_for_free_models_and_significant_digits_otherwise() -> None:
    assert [
        cost_text(v) for v in (None, 0.0, 0.000198, 0.0002, 0.0123, 0.5, 0.999999, 1_234.5)
    ] == ["unknown", "$0", "$0.000198", "$0.0002", "$0.0123", "$0.50", "$1.00", "$1,234.50"]
    inspector = BudgetInspector(free_budget())
    for rendering in (inspector.html(), inspector.text()):
        assert "0.000000" not in rendering
    assert "totals: 3 steps, input 2,100, output 63, cache read 0, cache write 0; cost $0" in (
        inspector.text()
    )
    assert "cost $0.000198 (+1 unpriced step)" in BudgetInspector(budget()).text()


def test_an_estimate_is_labelled_exact_only_when_a_real_tokenizer_counted_it() -> None:
    approximate = BudgetInspector(free_budget())
    for rendering in (visible(approximate.html()), approximate.text()):
        assert "exact" not in rendering
    assert "estimated ≈710 (error +1.0%)" in approximate.text()
    exact = BudgetInspector(free_budget(exact_steps=(1,)))
    assert exact.html().count('data-exact="true"') == 1
    assert exact.html().count('data-exact="false"') == 2
    assert ">estimate (exact)</text>" in exact.html()
    assert ">710 (exact)</td>" in exact.html()
    lines = exact.text().splitlines()
    assert [line for line in lines if "exact" in line] == [
        "  step 1 scripted-1: input 700, output 21, cache read 0, cache write 0;"
        " estimated 710 (exact) (error +1.0%); cost $0"
    ]
    inspector = ContextInspector(replace(context(), steps=(step(0),)))
    assert "exact" not in visible(inspector.html())
    assert "exact" not in inspector.text()
    exact_context = ContextInspector(replace(context(), steps=(step(0, exact_estimator=True),)))
    assert "estimated 1,420 (exact)" in exact_context.html()


def visible(page: str) -> str:
    """What a reader sees of ``page``: its text and hover titles, without tags and attributes."""
    return re.sub(r"<[^>]+>", " ", page)


# JupyterLab 4's own values for the variables the inspectors use (theme-light-extension and
# theme-dark-extension variables.css). Unset variables fall back to what the HTML gives.
LIGHT = {
    "--jp-ui-font-color1": "rgba(0, 0, 0, 0.87)",
    "--jp-ui-font-color2": "rgba(0, 0, 0, 0.54)",
    "--jp-error-color1": "#d32f2f",
    "--jp-layout-color0": "#ffffff",
    "--jp-layout-color2": "#eeeeee",
    "--jp-border-color2": "#e0e0e0",
}
DARK = {
    "--jp-ui-font-color1": "rgba(255, 255, 255, 0.87)",
    "--jp-ui-font-color2": "rgba(255, 255, 255, 0.54)",
    "--jp-error-color1": "#f44336",
    "--jp-layout-color0": "#111111",
    "--jp-layout-color2": "#424242",
    "--jp-border-color2": "#424242",
}
_VAR = re.compile(r"var\((--[\w-]+), ([^()]+(?:\([^()]*\))?)\)")


def resolve(value: str, theme: dict[str, str]) -> str:
    found = _VAR.fullmatch(value)
    return value if found is None else theme.get(found.group(1), found.group(2))


def rgba(colour: str) -> tuple[float, float, float, float]:
    if colour.startswith("#"):
        return (*(int(colour[i : i + 2], 16) for i in (1, 3, 5)), 1.0)  # type: ignore[return-value]
    r, g, b, a = (float(x) for x in colour[colour.index("(") + 1 : -1].split(","))
    return r, g, b, a


def contrast(foreground: str, background: str) -> float:
    fr, fg, fb, alpha = rgba(foreground)
    br, bg, bb, _ = rgba(background)
    mixed = [f * alpha + b * (1 - alpha) for f, b in ((fr, br), (fg, bg), (fb, bb))]

    def luminance(channels: list[float] | tuple[float, ...]) -> float:
        linear = [
            c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
            for c in (x / 255 for x in channels)
        ]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(mixed), luminance((br, bg, bb))), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("theme", [LIGHT, DARK, {}], ids=["light", "dark", "no-theme"])
def test_text_and_marks_keep_their_contrast_in_light_and_dark_themes(theme: dict[str, str]) -> None:
    for foreground, background in TEXT_PAIRS:
        ratio = contrast(resolve(foreground, theme), resolve(background, theme))
        assert ratio >= 4.5, (foreground, background, ratio)
    for foreground, background in GRAPHIC_PAIRS:
        ratio = contrast(resolve(foreground, theme), resolve(background, theme))
        assert ratio >= 3.0, (foreground, background, ratio)


def test_every_text_colour_drawn_is_a_checked_theme_colour() -> None:
    checked = {colour for pair in (*TEXT_PAIRS, *GRAPHIC_PAIRS) for colour in pair}
    pages = (
        BudgetInspector(free_budget(exact_steps=(0,))).html(),
        ContextInspector(context()).html(),
    )
    for page in pages:
        assert "var(--jp-ui-font-color1" in page
        assert "var(--jp-layout-color0" in page
        texts = re.findall(r"(?<![-\w])(?:color|fill):((?:var\([^;\"]*?\)\)?|[^;\"]+))", page)
        backgrounds = re.findall(r"(?<![-\w])background:((?:var\([^;\"]*?\)\)?|[^;\"]+))", page)
        assert texts
        assert backgrounds
        # Every text colour and text background is one of the checked ones; marks (bars,
        # layer segments) may use fixed colours, but never white or black text.
        for colour in texts:
            assert colour in checked or colour in (INPUT, OUTPUT, "none"), colour
        for colour in backgrounds:
            assert colour in checked or colour.startswith("#"), colour


class _WithTokenizer:
    """A provider source that knows its model's exact tokenizer (the seam LocalModel uses)."""

    def __init__(self, inner: Any, estimator: TokenizerEstimator) -> None:
        self._inner = inner
        self.estimators = (estimator,)

    async def model_provider(self, request: Any) -> Any:
        return await self._inner.model_provider(request)


async def test_the_budget_marks_a_real_hosts_estimate_exact_only_with_its_tokenizer(
    tmp_path: Path,
) -> None:
    words = TokenizerEstimator(lambda text: len(text.split()) + 1, estimator_id="words")
    for exact in (True, False):
        limits = ModelLimits(4_096, 256, estimator_id="words" if exact else "chars/4")
        model = ScriptedModel([Reply("done")], limits=limits)
        caps = capabilities(model)
        caps = replace(caps, providers=_WithTokenizer(caps.providers, words))
        async with open_host(tmp_path / str(exact), model, caps=caps) as host:
            result = await host.turns.run(request("count me"))
            operator = await host.operator("ops", reason="exact estimates")
            inspector = await BudgetInspector.load(host, operator, result.session_id)
            (step_usage,) = inspector.model.turns[0].steps
            assert step_usage.exact_estimate is exact
            assert step_usage.estimator == ("words" if exact else "charclass/3.5/1.5")
            assert ("(exact)" in inspector.text()) is exact
            assert ('data-exact="true"' in inspector.html()) is exact
