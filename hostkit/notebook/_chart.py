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
    """Input and output tokens of every shown step, grouped by turn, with the input estimate.

    Colours are set once per group (marks inherit them) and text marks use
    ``currentColor``, the theme's text colour set on the ``<svg>``.
    """
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
    inputs: list[str] = []
    outputs: list[str] = []
    estimates: list[str] = []
    for index, (n, turn, step) in enumerate(steps):
        x = _LEFT + index * slot + (slot - 2 * bar) / 2
        call = "summary before step" if step.summary else "step"
        who = f"turn {n} ({turn.turn_id}) {call} {step.step_id}, {step.model}"
        inputs.append(
            _bar(
                "input",
                x,
                bar,
                step.input_tokens * scale,
                f"{esc(who)}: {step.input_tokens:,} input tokens{_hover_estimate(step)}",
            )
        )
        outputs.append(_bar("output", x + bar, bar, step.output_tokens * scale,
                            f"{esc(who)}: {step.output_tokens:,} output tokens"))  # fmt: skip
        if step.estimated_input_tokens is not None:
            y = _TOP + _PLOT_H - step.estimated_input_tokens * scale
            estimates.append(_estimate_mark(x, bar, y, step, who))
    exact = {step.exact_estimate for _, _, step in steps if step.estimated_input_tokens is not None}
    return (
        f'<svg class="hk-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="tokens per provider call" preserveAspectRatio="xMinYMin meet" '
        f'style="display:block;width:100%;max-width:{WIDTH}px;height:auto;margin:6px 0;'
        f'color:{TEXT};font-family:var(--jp-ui-font-family, sans-serif);font-size:11px">'
        f"<title>Tokens per provider call, by turn</title>"
        f"{_y_axis(ticks, scale)}{_x_axis(steps, slot)}"
        f'<g class="hk-inputs" style="fill:{INPUT}">{"".join(inputs)}</g>'
        f'<g class="hk-outputs" style="fill:{OUTPUT}">{"".join(outputs)}</g>'
        f'<g class="hk-estimates" stroke="currentColor" stroke-width="1.5">{"".join(estimates)}</g>'
        f"{_legend(exact)}</svg>"
    )


def _bar(what: str, x: float, width: float, height: float, title: str) -> str:
    if height > 0:
        height = max(height, 1.0)  # a few tokens still show
    return (
        f'<rect class="hk-{what}" x="{x:.1f}" y="{_TOP + _PLOT_H - height:.1f}" '
        f'width="{width:.1f}" height="{height:.1f}"><title>{title}</title></rect>'
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
    fill = "currentColor" if step.exact_estimate else "none"
    return (
        f'<g class="hk-estimate" data-exact="{str(step.exact_estimate).lower()}">'
        f"<title>{esc(who)}: {esc(estimate_label(step))}</title>"
        f'<path d="M{x - 2:.1f} {y:.1f}h{bar + 4:.1f}"/>'
        f'<path d="M{x + bar / 2:.1f} {y - 4:.1f}l4 4l-4 4l-4 -4z" fill="{fill}" '
        'stroke-width="1.2"/></g>'
    )


def _y_axis(ticks: tuple[int, ...], scale: float) -> str:
    lines, labels = [], []
    for tick in ticks:
        y = _TOP + _PLOT_H - tick * scale
        lines.append(f'<path d="M{_LEFT} {y:.1f}H{WIDTH - _RIGHT}"/>')
        labels.append(
            f'<text class="hk-ytick" x="{_LEFT - 6}" y="{y + 4:.1f}">{_short(tick)}</text>'
        )
    middle = _TOP + _PLOT_H / 2
    return (
        f'<g class="hk-grid" style="stroke:{GRID}">{"".join(lines)}</g>'
        f'<g style="fill:{MUTED}" text-anchor="end">{"".join(labels)}</g>'
        f'<path d="M{_LEFT} {_TOP}V{_TOP + _PLOT_H}" style="stroke:{AXIS}"/>'
        f'<text class="hk-axis-label" x="14" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle:.1f})" fill="currentColor" font-size="12">'
        "tokens per call</text>"
    )


def _x_axis(steps: list[tuple[int, TurnUsage, StepUsage]], slot: float) -> str:
    base = _TOP + _PLOT_H
    turns = len({n for n, _, _ in steps})
    every = max(1, math.ceil(turns / _MAX_LABELS))
    ticks = [f"M{_LEFT} {base}H{WIDTH - _RIGHT}"]
    labels = []
    first = 0
    while first < len(steps):
        n = steps[first][0]
        last = first
        while last + 1 < len(steps) and steps[last + 1][0] == n:
            last += 1
        left, right = _LEFT + first * slot, _LEFT + (last + 1) * slot
        ticks.append(f"M{left:.1f} {base}v5")
        if (n - 1) % every == 0:
            labels.append(
                f'<text class="hk-xtick" x="{(left + right) / 2:.1f}" y="{base + 17}">{n}</text>'
            )
        first = last + 1
    return (
        f'<path d="{"".join(ticks)}" style="stroke:{AXIS}"/>'
        f'<g style="fill:{MUTED}" text-anchor="middle">{"".join(labels)}</g>'
        f'<text class="hk-axis-label" x="{_LEFT + _PLOT_W / 2:.1f}" y="{HEIGHT - 8}" '
        'text-anchor="middle" fill="currentColor" font-size="12">'
        "turn (oldest shown first; one pair of bars per provider call)</text>"
    )


def _legend(exact: set[bool]) -> str:
    entries = [
        f'<rect x="0" y="-9" width="12" height="10" style="fill:{INPUT}"/>'
        '<text x="17" y="0">input (reported)</text>',
        f'<rect x="130" y="-9" width="12" height="10" style="fill:{OUTPUT}"/>'
        '<text x="147" y="0">output</text>',
    ]
    x = 210
    for is_exact in sorted(exact, reverse=True):
        fill = "currentColor" if is_exact else "none"
        label = "estimate (exact)" if is_exact else "estimate (approximate)"
        entries.append(
            f'<path d="M{x + 6} -8l4 4l-4 4l-4 -4z" fill="{fill}" stroke="currentColor" '
            f'stroke-width="1.2"/><text x="{x + 15}" y="0">{label}</text>'
        )
        x += 130
    return (
        f'<g class="hk-legend" transform="translate({_LEFT} 16)" fill="currentColor" '
        f'font-size="12">{"".join(entries)}</g>'
    )
