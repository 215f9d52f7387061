"""The BudgetInspector's plot: tokens per provider call as inline SVG with axes and a legend.

Inline SVG rather than a plotting library: it lives inside the inspector's
own ``ipywidgets.HTML`` (a library figure is a separate output and cannot sit
in a widget tree such as the dashboard), takes JupyterLab's theme variables,
renders wherever HTML does (headless nbval, an exported page) and is
deterministic text, so a stored notebook compares. Hover values are SVG
``<title>`` elements, the browser's own tooltips.

The drawing has a fixed ``viewBox`` and scales to the cell's width as one
block, so nothing overlaps the header above it at any width.
"""

from __future__ import annotations

import math

from hostkit.inspect import BudgetView, StepUsage, TurnUsage
from hostkit.notebook._inspector_html import esc
from hostkit.notebook._theme import AXIS, GRID, INPUT, MUTED, OUTPUT, TEXT

__all__ = ["axis_ticks", "estimate_label", "usage_chart"]

WIDTH, HEIGHT = 640, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 34, 52
_PLOT_W, _PLOT_H = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
# At most this many turn labels on the x axis; with more turns every n-th is labelled.
_MAX_LABELS = 16


def axis_ticks(top: int, count: int = 5) -> tuple[int, ...]:
    """``0`` and round steps (1, 2, 2.5 or 5 x 10^k) up to the first tick at or above ``top``."""
    if top <= 0:
        return (0, 1)
    rough = top / count
    power = 10 ** math.floor(math.log10(rough))
    step = next(
        (m * power for m in (1, 2, 2.5, 5, 10) if m * power >= rough and m * power >= 1), power
    )
    step = max(1, math.ceil(step))
    last = math.ceil(top / step) * step
    return tuple(range(0, last + 1, step))


def estimate_label(step: StepUsage) -> str:
    """The estimate with what it is: ``1,225 exact`` only from the provider's tokenizer."""
    if step.estimated_input_tokens is None:
        return "no estimate"
    kind = "exact" if step.exact_estimate else "approximate"
    error = "" if step.error_pct is None else f", {step.error_pct:+.1f}% vs reported"
    return f"estimated {step.estimated_input_tokens:,} ({kind}{error})"


def usage_chart(view: BudgetView) -> str:
    """Input and output tokens of every shown step, grouped by turn, with the input estimate."""
    steps = [(n, turn, step) for n, turn in enumerate(view.turns, 1) for step in turn.steps]
    if not steps:
        return "<div><i>no usage recorded</i></div>"
    top = max(
        max(s.input_tokens, s.output_tokens, s.estimated_input_tokens or 0) for _, _, s in steps
    )
    ticks = axis_ticks(top)
    scale = _PLOT_H / ticks[-1]
    slot = _PLOT_W / len(steps)
    bar = max(1.0, min(18.0, slot * 0.4))
    marks: list[str] = []
    for index, (n, turn, step) in enumerate(steps):
        x = _LEFT + index * slot + (slot - 2 * bar) / 2
        who = f"turn {n} ({turn.turn_id}) step {step.step_id}, {step.model}"
        for offset, (tokens, colour, what) in enumerate(
            ((step.input_tokens, INPUT, "input"), (step.output_tokens, OUTPUT, "output"))
        ):
            height = tokens * scale
            if tokens:
                height = max(height, 1.0)  # a few tokens still show
            marks.append(
                f'<rect class="hk-{what}" x="{x + offset * bar:.1f}" '
                f'y="{_TOP + _PLOT_H - height:.1f}" width="{bar:.1f}" height="{height:.1f}" '
                f'style="fill:{colour}"><title>{esc(who)}: {tokens:,} {what} tokens'
                f"{_hover_estimate(step) if what == 'input' else ''}</title></rect>"
            )
        if step.estimated_input_tokens is not None:
            y = _TOP + _PLOT_H - step.estimated_input_tokens * scale
            marks.append(_estimate_mark(x, bar, y, step, who))
    exact = {step.exact_estimate for _, _, step in steps if step.estimated_input_tokens is not None}
    return (
        f'<svg class="hk-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="tokens per provider call" preserveAspectRatio="xMinYMin meet" '
        f'style="display:block;width:100%;max-width:{WIDTH}px;height:auto;margin:6px 0;'
        f'font-family:var(--jp-ui-font-family, sans-serif)">'
        f"<title>Tokens per provider call, by turn</title>"
        f"{_y_axis(ticks, scale)}{_x_axis(steps, slot)}{''.join(marks)}{_legend(exact)}</svg>"
    )


def _short(tokens: int) -> str:
    """A tick label that fits the margin: ``1,500``, ``20k``, ``2.5M``."""
    if tokens < 10_000:
        return f"{tokens:,}"
    if tokens < 1_000_000:
        return f"{tokens / 1000:g}k"
    return f"{tokens / 1_000_000:g}M"


def _hover_estimate(step: StepUsage) -> str:
    return "" if step.estimated_input_tokens is None else f"; {esc(estimate_label(step))}"


def _estimate_mark(x: float, bar: float, y: float, step: StepUsage, who: str) -> str:
    # A line across the input bar at the estimate, a diamond on it: filled when exact.
    fill = TEXT if step.exact_estimate else "none"
    cx = x + bar / 2
    return (
        f'<g class="hk-estimate" data-exact="{str(step.exact_estimate).lower()}">'
        f"<title>{esc(who)}: {esc(estimate_label(step))}</title>"
        f'<line x1="{x - 2:.1f}" y1="{y:.1f}" x2="{x + bar + 2:.1f}" y2="{y:.1f}" '
        f'style="stroke:{TEXT};stroke-width:1.5"/>'
        f'<path d="M{cx:.1f} {y - 4:.1f}l4 4l-4 4l-4 -4z" style="fill:{fill};stroke:{TEXT};'
        f'stroke-width:1.2"/></g>'
    )


def _y_axis(ticks: tuple[int, ...], scale: float) -> str:
    parts = []
    for tick in ticks:
        y = _TOP + _PLOT_H - tick * scale
        parts.append(
            f'<line class="hk-grid" x1="{_LEFT}" y1="{y:.1f}" x2="{WIDTH - _RIGHT}" y2="{y:.1f}" '
            f'style="stroke:{GRID};stroke-width:1"/>'
            f'<text class="hk-ytick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'style="fill:{MUTED};font-size:11px">{_short(tick)}</text>'
        )
    middle = _TOP + _PLOT_H / 2
    parts.append(
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + _PLOT_H}" '
        f'style="stroke:{AXIS};stroke-width:1"/>'
        f'<text class="hk-axis-label" x="14" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle:.1f})" style="fill:{TEXT};font-size:12px">'
        "tokens per call</text>"
    )
    return "".join(parts)


def _x_axis(steps: list[tuple[int, TurnUsage, StepUsage]], slot: float) -> str:
    base = _TOP + _PLOT_H
    turns = len({n for n, _, _ in steps})
    every = max(1, math.ceil(turns / _MAX_LABELS))
    parts = [
        f'<line x1="{_LEFT}" y1="{base}" x2="{WIDTH - _RIGHT}" y2="{base}" '
        f'style="stroke:{AXIS};stroke-width:1"/>'
    ]
    first = 0
    while first < len(steps):
        n = steps[first][0]
        last = first
        while last + 1 < len(steps) and steps[last + 1][0] == n:
            last += 1
        left, right = _LEFT + first * slot, _LEFT + (last + 1) * slot
        parts.append(
            f'<line x1="{left:.1f}" y1="{base}" x2="{left:.1f}" y2="{base + 5}" '
            f'style="stroke:{AXIS};stroke-width:1"/>'
        )
        if (n - 1) % every == 0:
            parts.append(
                f'<text class="hk-xtick" x="{(left + right) / 2:.1f}" y="{base + 17}" '
                f'text-anchor="middle" style="fill:{MUTED};font-size:11px">{n}</text>'
            )
        first = last + 1
    parts.append(
        f'<text class="hk-axis-label" x="{_LEFT + _PLOT_W / 2:.1f}" y="{HEIGHT - 8}" '
        f'text-anchor="middle" style="fill:{TEXT};font-size:12px">'
        "turn (oldest shown first; one pair of bars per provider call)</text>"
    )
    return "".join(parts)


def _legend(exact: set[bool]) -> str:
    entries = [
        f'<rect x="0" y="-9" width="12" height="10" style="fill:{INPUT}"/>'
        f'<text x="17" y="0" style="fill:{TEXT};font-size:12px">input (reported)</text>',
        f'<rect x="130" y="-9" width="12" height="10" style="fill:{OUTPUT}"/>'
        f'<text x="147" y="0" style="fill:{TEXT};font-size:12px">output</text>',
    ]
    x = 210
    for is_exact in sorted(exact, reverse=True):
        fill = TEXT if is_exact else "none"
        label = "estimate (exact)" if is_exact else "estimate (approximate)"
        entries.append(
            f'<path d="M{x + 6} -8l4 4l-4 4l-4 -4z" style="fill:{fill};stroke:{TEXT};'
            f'stroke-width:1.2"/><text x="{x + 15}" y="0" style="fill:{TEXT};font-size:12px">'
            f"{label}</text>"
        )
        x += 130
    return f'<g class="hk-legend" transform="translate({_LEFT} 16)">{"".join(entries)}</g>'
