"""The inspectors' HTML: stacked layer bars, tables, an SVG usage plot, escaped throughout.

Pure functions of the view-models. Every value that came from the database
goes through ``esc``: ids, model names and approval views may have been
chosen by a model.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable

from hostkit.effects import PendingApproval
from hostkit.errors import bounded
from hostkit.freeze import thaw
from hostkit.inspect import BudgetView, ContextStep, ContextView, TokenTotals

__all__ = [
    "approval_html",
    "bar_html",
    "calibration_line",
    "cost_text",
    "esc",
    "header_html",
    "legend_html",
    "number",
    "row_html",
    "step_html",
    "table_html",
    "totals_line",
    "usage_plot",
    "usage_table",
    "view_text",
]

# An approval's redacted view is shown up to this many characters.
VIEW_CHARS = 400
# Width and bar height of the budget plot, in pixels.
PLOT_WIDTH, PLOT_HEIGHT = 480, 120
_COLOURS = {
    "instructions": "#4c78a8",
    "bootstrap": "#72b7b2",
    "contributions": "#b279a2",
    "summary": "#eeca3b",
    "schemas": "#9d9d9d",
    "framing": "#d0d0d0",
    "history": "#54a24b",
    "current": "#f58518",
}
_OTHER_COLOUR = "#e45756"
_INPUT_COLOUR, _OUTPUT_COLOUR = "#4c78a8", "#f58518"


def esc(value: object) -> str:
    """HTML-escaped text, quotes included (safe in attributes too)."""
    return html.escape(str(value), quote=True)


def number(value: int | None) -> str:
    """A token count with thousands separators, or ``-``."""
    return "-" if value is None else f"{value:,}"


def cost_text(value: float | None) -> str:
    """A cost in USD, or ``unknown`` for an unpriced model."""
    return "unknown" if value is None else f"${value:.6f}"


def header_html(view: ContextView) -> str:
    """Which turn, session, status and agent the context view is of."""
    return (
        f"<div><b>turn</b> <code>{esc(view.turn_id or '(none yet)')}</code> "
        f"<b>session</b> <code>{esc(view.session_id)}</code> "
        f"<b>status</b> {esc(view.turn_status or '-')} "
        f"<b>agent</b> {esc(view.core_id or '-')}</div>"
    )


def bar_html(step: ContextStep) -> str:
    """Segments in a flex row whose full width is the window; the budget marker on top."""
    window = step.context_window or 0
    if window <= 0:
        return "<i>no budget recorded</i>"
    segments = "".join(
        f'<div class="hk-seg" data-layer="{esc(layer.name)}" '
        f'title="{esc(layer.name)}: {layer.tokens:,} tokens" style="width:'
        f"{min(100.0, 100 * layer.tokens / window):.4f}%;flex:none;"
        f'background:{_COLOURS.get(layer.name, _OTHER_COLOUR)}"></div>'
        for layer in step.layers
    )
    marker = ""
    if step.hard_budget is not None:
        left = min(100.0, max(0.0, 100 * step.hard_budget / window))
        marker = (
            f'<div class="hk-budget" title="hard budget {step.hard_budget:,}" '
            f'style="position:absolute;left:{left:.4f}%;top:-3px;bottom:-3px;'
            'border-left:2px solid #d62728"></div>'
        )
    return (
        '<div class="hk-bar" style="position:relative;display:flex;width:100%;height:18px;'
        f'background:#f3f3f3;border:1px solid #ccc;margin:4px 0">{segments}{marker}</div>'
    )


def step_html(step: ContextStep) -> str:
    """One step: title and badges, its bar, budget numbers and layer table."""
    title = (
        f"<div><b>step {step.step_id}</b> {esc(step.kind)} <small>{esc(step.decision_id)}</small>"
    )
    badges = "".join(
        '<span class="hk-badge" style="background:#fff3bf;border-radius:8px;padding:0 6px;'
        f'margin-right:4px">{esc(badge)}</span>'
        for badge in step.badges
    )
    if step.kind == "overflow":
        return (
            f"{title} {badges}</div><div style='color:#cf222e'>needs "
            f"{number(step.estimated_input_tokens)} tokens before history</div>"
        )
    numbers = (
        f"<div>estimated {number(step.estimated_input_tokens)} / hard budget "
        f"{number(step.hard_budget)} / window {number(step.context_window)} (output budget "
        f"{number(step.output_budget)}); reported {number(step.reported_input_tokens)}; estimator "
        f"{esc(step.estimator or '-')}{' (exact)' if step.exact_estimator else ''} calibration "
        f"{esc(step.calibration if step.calibration is not None else '-')}</div>"
    )
    layers = table_html(
        ("layer", "tokens", "items", "pruned"),
        "".join(row_html(x.name, f"{x.tokens:,}", x.items, x.pruned) for x in step.layers),
    )
    return f"{title} {badges}</div>{bar_html(step)}{numbers}{layers}"


def legend_html() -> str:
    """The colour of each layer and the budget marker."""
    return (
        "<div>"
        + "".join(
            f'<span style="display:inline-block;width:10px;height:10px;background:{colour}"></span>'
            f" {esc(name)} &nbsp;"
            for name, colour in _COLOURS.items()
        )
        + '<span style="border-left:2px solid #d62728"></span> hard budget</div>'
    )


def table_html(headers: Iterable[str], body: str) -> str:
    """A table with ``headers`` over the given ``<tr>`` rows."""
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def row_html(*cells: object) -> str:
    """One table row of escaped cells."""
    return "<tr>" + "".join(f"<td style='padding:0 8px'>{esc(c)}</td>" for c in cells) + "</tr>"


def usage_plot(view: BudgetView) -> str:
    """Input and output tokens per step as paired SVG bars, scaled to the largest."""
    steps = [(turn, step) for turn in view.turns for step in turn.steps]
    if not steps:
        return "<i>no usage recorded</i>"
    top = max(max(s.input_tokens, s.output_tokens) for _, s in steps) or 1
    slot = PLOT_WIDTH / len(steps)
    bar = max(1.0, slot / 2 - 1)
    rects = []
    for index, (turn, step) in enumerate(steps):
        for offset, (tokens, colour, what) in enumerate(
            (
                (step.input_tokens, _INPUT_COLOUR, "input"),
                (step.output_tokens, _OUTPUT_COLOUR, "output"),
            )
        ):
            height = PLOT_HEIGHT * tokens / top
            rects.append(
                f'<rect class="hk-{what}" x="{index * slot + offset * bar:.2f}" '
                f'y="{PLOT_HEIGHT - height:.2f}" width="{bar:.2f}" height="{height:.2f}" '
                f'fill="{colour}"><title>{esc(turn.turn_id)} step {step.step_id}: '
                f"{tokens:,} {what} tokens</title></rect>"
            )
    return (
        f'<svg width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" role="img" '
        f'style="border-bottom:1px solid #999">{"".join(rects)}</svg>'
        f'<div><span style="color:{_INPUT_COLOUR}">■</span> input '
        f'<span style="color:{_OUTPUT_COLOUR}">■</span> output (max {top:,})</div>'
    )


def usage_table(view: BudgetView) -> str:
    """Per turn a totals row, then one row per observed step."""
    body = []
    for turn in view.turns:
        body.append(
            f"<tr><td colspan='10'><b>{esc(turn.turn_id)}</b> {esc(turn.status)}: "
            f"{esc(totals_line(turn.totals))}</td></tr>"
        )
        body.extend(
            row_html(
                s.step_id,
                s.model,
                s.input_tokens,
                s.output_tokens,
                s.cache_read_tokens,
                s.cache_write_tokens,
                number(s.estimated_input_tokens),
                "-" if s.error_pct is None else f"{s.error_pct:+.1f}",
                cost_text(s.cost_usd),
            )
            for s in turn.steps
        )
    return table_html(
        (
            "step",
            "model",
            "input",
            "output",
            "cache read",
            "cache write",
            "estimated",
            "error %",
            "cost",
        ),
        "".join(body),
    )


def calibration_line(view: BudgetView) -> str:
    """The session's calibration row, on one line."""
    c = view.calibration
    if c is None:
        return "calibration: none yet"
    return (
        f"calibration: {c.provider}/{c.model} estimator {c.estimator} "
        f"ratio {c.ratio:.3f} over {c.samples} samples"
    )


def totals_line(totals: TokenTotals) -> str:
    """Steps, buckets and cost of a total, on one line."""
    cost = f"cost {cost_text(totals.cost_usd)}"
    if totals.cost_usd is not None and totals.unpriced_steps:
        unpriced = totals.unpriced_steps
        cost += f" (+{unpriced} unpriced step{'' if unpriced == 1 else 's'})"
    return (
        f"{totals.steps} step{'' if totals.steps == 1 else 's'}, "
        f"input {totals.input_tokens:,}, output {totals.output_tokens:,}, "
        f"cache read {totals.cache_read_tokens:,}, cache write {totals.cache_write_tokens:,}; "
        f"{cost}"
    )


def view_text(approval: PendingApproval) -> str:
    """An approval's redacted view as bounded JSON (its arguments are never stored here)."""
    text = json.dumps(thaw(approval.view), ensure_ascii=False, sort_keys=True, default=str)
    return bounded(text, VIEW_CHARS)


def approval_html(approval: PendingApproval) -> str:
    """An approval's effect, agent, id and redacted view."""
    return (
        f"<div><b>{esc(approval.effect)}</b> by {esc(approval.core_id)} "
        f"<code>{esc(approval.approval_id)}</code> <small>{esc(approval.created_at)} · session "
        f"{esc(approval.session_id)}</small></div>"
        f"<pre style='white-space:pre-wrap;margin:2px 0'>{esc(view_text(approval))}</pre>"
    )
