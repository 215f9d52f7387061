"""The inspectors' HTML: stacked layer bars, tables, an SVG usage plot, escaped throughout.

Pure functions of the view-models. Every value that came from the database
goes through ``esc``: ids, model names and approval views may have been
chosen by a model.
"""

from __future__ import annotations

from collections.abc import Iterable

from hostkit.effects import DIFF_KEY, PendingApproval
from hostkit.inspect import (
    BudgetView,
    ContextStep,
    ContextView,
    TokenTotals,
    cost_text,
    one_line,
)
from hostkit.notebook._approval_view import (
    diff_html,
    esc,
    hidden_html,
    pre_html,
    pretty_hides,
    pretty_view,
)
from hostkit.notebook._theme import (
    BADGE_BG,
    BADGE_TEXT,
    BORDER,
    ERROR,
    HEAD_BG,
    MUTED,
    SURFACE,
    TEXT,
    box_style,
)

__all__ = [
    "approval_html",
    "bar_html",
    "calibration_line",
    "cost_text",
    "esc",
    "estimate_text",
    "header_html",
    "legend_html",
    "number",
    "panel_html",
    "row_html",
    "step_html",
    "table_html",
    "title_html",
    "totals_line",
    "usage_table",
    "view_text",
]

# An approval's redacted view is shown up to this many characters.
VIEW_CHARS = 400
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
_BUDGET_COLOUR = "#d62728"


def number(value: int | None) -> str:
    """A token count with thousands separators, or ``-``."""
    return "-" if value is None else f"{value:,}"


def estimate_text(estimated: int | None, exact: bool) -> str:
    """An estimate as the tables show it: ``≈1,225``, or ``1,225 (exact)`` from a real tokenizer."""
    if estimated is None:
        return "-"
    return f"{estimated:,} (exact)" if exact else f"≈{estimated:,}"


# The tables' look, once per panel: inline on every cell it would be most of the HTML.
# Every selector starts with ``.hk-panel``, so nothing outside an inspector changes.
TABLE_CSS = (
    "<style>.hk-panel table.hk-table{border-collapse:collapse;margin:4px 0;"
    f"color:{TEXT};background:{SURFACE}}}"
    f".hk-panel .hk-table td,.hk-panel .hk-table th{{padding:2px 8px;text-align:left;"
    f"white-space:nowrap;border-bottom:1px solid {BORDER}}}"
    ".hk-panel .hk-scroll{overflow-x:auto;max-width:100%}"
    f".hk-panel .hk-table th{{background:{HEAD_BG};color:{TEXT};font-weight:600}}"
    ".hk-panel .hk-table td.hk-turn{padding-top:6px;white-space:normal}</style>"
)


def panel_html(*parts: str) -> str:
    """The inspector's block: its own surface and text colour, so both themes read."""
    return f'<div class="hk-panel" style="{box_style()}">{TABLE_CSS}{"".join(parts)}</div>'


def title_html(title: str, *facts: tuple[str, str]) -> str:
    """A header line: the title, then ``name value`` facts in muted labels (escaped)."""
    spans = "".join(
        f' <span style="color:{MUTED}">{esc(name)}</span> <code>{esc(value)}</code>'
        for name, value in facts
    )
    return (
        f'<div class="hk-title" style="display:block;margin:0 0 4px">'
        f"<b>{esc(title)}</b>{spans}</div>"
    )


def header_html(view: ContextView) -> str:
    """Which turn, session, status and agent the context view is of."""
    return title_html(
        "context",
        ("turn", view.turn_id or "(none yet)"),
        ("session", view.session_id),
        ("status", view.turn_status or "-"),
        ("agent", view.core_id or "-"),
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
            f'border-left:2px solid {_BUDGET_COLOUR}"></div>'
        )
    return (
        '<div class="hk-bar" style="position:relative;display:flex;width:100%;height:18px;'
        f'background:{HEAD_BG};border:1px solid {BORDER};margin:4px 0">{segments}{marker}</div>'
    )


def step_html(step: ContextStep) -> str:
    """One step: title and badges, its bar, budget numbers and layer table."""
    title = (
        f"<div><b>step {step.step_id}</b> {esc(step.kind)} <small>{esc(step.decision_id)}</small>"
    )
    badges = "".join(
        f'<span class="hk-badge" style="background:{BADGE_BG};color:{BADGE_TEXT};'
        f'border-radius:8px;padding:0 6px;margin-right:4px">{esc(badge)}</span>'
        for badge in step.badges
    )
    if step.kind == "overflow":
        return (
            f'{title} {badges}</div><div style="color:{ERROR}">needs '
            f"{number(step.estimated_input_tokens)} tokens before history</div>"
        )
    numbers = (
        f"<div>estimated {estimate_text(step.estimated_input_tokens, step.exact_estimator)}"
        f" / hard budget {number(step.hard_budget)} / window {number(step.context_window)}"
        f" (output budget {number(step.output_budget)}); reported"
        f" {number(step.reported_input_tokens)}; estimator {esc(step.estimator or '-')}"
        f" calibration {esc(step.calibration if step.calibration is not None else '-')}</div>"
    )
    layers = table_html(
        ("layer", "tokens", "items", "pruned"),
        "".join(row_html(x.name, f"{x.tokens:,}", x.items, x.pruned) for x in step.layers),
    )
    return f"{title} {badges}</div>{bar_html(step)}{numbers}{layers}"


def legend_html() -> str:
    """The colour of each layer and the budget marker."""
    return (
        '<div class="hk-legend">'
        + "".join(
            f'<span style="display:inline-block;width:10px;height:10px;background:{colour}"></span>'
            f" {esc(name)} &nbsp;"
            for name, colour in _COLOURS.items()
        )
        + f'<span style="border-left:2px solid {_BUDGET_COLOUR}"></span> hard budget</div>'
    )


def table_html(headers: Iterable[str], body: str) -> str:
    """A table with ``headers`` over the given ``<tr>`` rows (styled by ``TABLE_CSS``)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return (
        f'<div class="hk-scroll"><table class="hk-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def row_html(*cells: object) -> str:
    """One table row of escaped cells."""
    return "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>"


def usage_table(view: BudgetView) -> str:
    """Per turn a totals row, then one row per observed provider call (a compaction's
    summarizer call marked "(summary)" beside the step it was made before)."""
    body = []
    for number_of, turn in enumerate(view.turns, 1):
        body.append(
            f'<tr><td colspan="9" class="hk-turn"><b>turn {number_of}</b> '
            f"<code>{esc(turn.turn_id)}</code> {esc(turn.status)}: "
            f"{esc(totals_line(turn.totals))}</td></tr>"
        )
        body.extend(
            row_html(
                f"{s.step_id} (summary)" if s.summary else s.step_id,
                s.model,
                f"{s.input_tokens:,}",
                f"{s.output_tokens:,}",
                f"{s.cache_read_tokens:,}",
                f"{s.cache_write_tokens:,}",
                estimate_text(s.estimated_input_tokens, s.exact_estimate),
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
            "estimate",
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
    """An approval's redacted view as bounded JSON (its arguments are never stored here),
    on one line as ``one_line`` writes it: the view holds what a model chose."""
    return one_line(approval.view, VIEW_CHARS)


def approval_html(approval: PendingApproval) -> str:
    """An approval's effect, agent, id and redacted view (indented JSON, its diff drawn apart)."""
    diff = approval.view.get(DIFF_KEY)
    return (
        f"<div><b>{esc(approval.effect)}</b> by {esc(approval.core_id)} "
        f"<code>{esc(approval.approval_id)}</code> <small>{esc(approval.created_at)} · session "
        f"{esc(approval.session_id)}</small></div>"
        + pre_html(pretty_view(approval.view))
        + (hidden_html() if pretty_hides(approval.view) else "")
        + (diff_html(diff) if isinstance(diff, str) else "")
    )
