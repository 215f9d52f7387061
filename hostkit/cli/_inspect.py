"""Terminal rendering of the inspector view-models: ``hostkit context`` and ``hostkit budget``.

Drawn only from ``ContextView`` and ``BudgetView`` (token counts, budgets and
layer names, never message content). Every cell is ``Text``, not markup, and
every stored value (ids, provider and model names, estimators) is written as
``printable`` escapes it, in the tables and in the lines around them alike:
a model name is what a provider's server chose.
"""

from __future__ import annotations

from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hostkit.cli._render import Column, fit_table
from hostkit.inspect import (
    BudgetView,
    ContextStep,
    ContextView,
    TokenTotals,
    cost_text,
    printable,
)
from hostkit.store import INTERRUPTED

__all__ = [
    "BAR_WIDTH",
    "budget_report",
    "context_report",
    "layer_bar",
    "no_decisions_line",
    "totals_line",
]

# Columns of the stacked bar that stands for the whole context window.
BAR_WIDTH = 60
# Each layer's glyph and colour: the glyph keeps the bar readable without colour.
_LAYERS: dict[str, tuple[str, str]] = {
    "instructions": ("I", "blue"),
    "bootstrap": ("B", "cyan"),
    "contributions": ("C", "magenta"),
    "summary": ("S", "yellow"),
    "schemas": ("T", "bright_black"),
    "framing": ("F", "white"),
    "history": ("H", "green"),
    "current": ("U", "bright_blue"),
}
_OTHER = ("#", "red")


def layer_bar(step: ContextStep, *, width: int = BAR_WIDTH) -> Text:
    """One step's layers stacked left to right against the window; ``|`` marks the hard budget."""
    window = step.context_window or 0
    if window <= 0:
        return Text("(no budget recorded)", style="dim")
    cells: list[tuple[str, str]] = []
    for layer in step.layers:
        if layer.tokens <= 0:
            continue
        glyph, colour = _LAYERS.get(layer.name, _OTHER)
        count = max(1, round(layer.tokens * width / window))
        cells.extend([(glyph, f"bold black on {colour}")] * count)
    cells = cells[:width] + [("·", "dim")] * max(0, width - len(cells))
    if step.hard_budget is not None:
        mark = min(width - 1, max(0, round(step.hard_budget * width / window)))
        cells[mark] = ("|", "bold red")
    bar = Text()
    for glyph, style in cells:
        bar.append(glyph, style=style)
    return bar


def context_report(view: ContextView) -> RenderableType:
    """A header, then per step: the stacked bar, a budget line, badges and a layer table."""
    parts: list[RenderableType] = [
        Text.assemble(
            ("session ", "bold"),
            printable(view.session_id),
            ("  turn ", "bold"),
            printable(view.turn_id or "(none yet)"),
            ("  status ", "bold"),
            printable(view.turn_status or "-"),
            ("  agent ", "bold"),
            printable(view.core_id or "-"),
        )
    ]
    if not view.steps:
        parts.append(Text(no_decisions_line(view.turn_status), style="dim"))
    for step in view.steps:
        parts.extend(_step(step))
    if view.steps_truncated:
        parts.append(Text(f"(only the first {len(view.steps)} steps are shown)", style="dim"))
    parts.append(_legend())
    return Group(*parts)


def no_decisions_line(turn_status: str | None) -> str:
    """Why a turn shows no context decision, in the words of docs/context.md.

    A decision is held in memory until its step's usage is observed or its
    turn ends: a running turn's are not written yet, and a lost turn's were
    held by the process that died (a crash loses them), as an interrupted one's (its
    holder gone, not yet recovered) were.
    """
    if turn_status == "running":
        return (
            "no context decisions written yet: a running turn's are held in memory until "
            "its step's usage is observed or the turn ends"
        )
    if turn_status == "lost":
        return (
            "no context decisions recorded: this lost turn's were held in memory by the "
            "process that died, and a crash loses them"
        )
    if turn_status == INTERRUPTED:
        return (
            "no context decisions recorded: this interrupted turn's holder is gone (its "
            "process died, or its lease lapsed a lease's length ago) with the ones it held "
            "in memory; a Host that next opens ends it"
        )
    return "no context decisions recorded"


def _step(step: ContextStep) -> list[RenderableType]:
    title = Text.assemble(("\nstep ", "bold"), str(step.step_id), f"  {printable(step.kind)}  ")
    title.append(printable(step.decision_id), style="dim")
    lines: list[RenderableType] = [title]
    if step.kind == "overflow":
        lines.append(
            Text(
                f"overflow: {printable(step.overflow_reason or 'unknown')} "
                f"(needs {_n(step.estimated_input_tokens)} tokens before history)",
                style="bold red",
            )
        )
        return lines
    lines.append(layer_bar(step))
    lines.append(
        Text(
            f"estimated {_n(step.estimated_input_tokens)} / hard budget {_n(step.hard_budget)}"
            f" / window {_n(step.context_window)} (output budget {_n(step.output_budget)})"
            f"  reported {_n(step.reported_input_tokens)}"
            f"  estimator {printable(step.estimator or '-')}"
            f"{' (exact)' if step.exact_estimator else ''}"
            f" x{step.calibration if step.calibration is not None else '-'}"
        )
    )
    badges = step.badges
    if badges:
        shown = "  ".join(f"[{printable(badge)}]" for badge in badges)
        lines.append(Text(shown, style="yellow"))
    table = Table("layer", "tokens", "items", "pruned", "of hard budget")
    budget = max(1, step.hard_budget or 1)
    for layer in step.layers:
        table.add_row(
            Text(printable(layer.name)),
            f"{layer.tokens:,}",
            str(layer.items),
            str(layer.pruned),
            Bar(size=budget, begin=0, end=min(layer.tokens, budget), width=24),
        )
    lines.append(table)
    return lines


def _legend() -> Text:
    legend = Text("\n")
    for name, (glyph, colour) in _LAYERS.items():
        legend.append(glyph, style=f"bold black on {colour}")
        legend.append(f" {name}  ")
    legend.append("|", style="bold red")
    legend.append(" hard budget")
    return legend


def budget_report(view: BudgetView, *, width: int = 80) -> RenderableType:
    """Per turn and step: reported buckets, estimate and error, cost; calibration and totals.

    Every observed provider call is a row: a compaction's summarizer call is
    marked ``*`` beside the step it was made before, and counts in the totals.

    Turn ids are never cut or wrapped (they are what ``hostkit context
    --turn`` takes): on a narrow terminal the cache columns, the estimate and
    its error are left out first, in that order (``--json`` has them all).
    """
    columns = (
        Column("turn", whole=True),
        Column("step", cap=5, justify="right"),
        Column("model", flexible=True, wrap=True, drop=5),
        Column("input", cap=14, justify="right"),
        Column("output", cap=14, justify="right"),
        Column("cache read", cap=14, justify="right", drop=2),
        Column("cache write", cap=14, justify="right", drop=1),
        Column("estimated", cap=14, justify="right", drop=3),
        Column("error %", cap=8, justify="right", drop=4),
        Column("cost", cap=12, justify="right"),
    )
    rows: list[tuple[str, ...]] = []
    for turn in view.turns:
        if not turn.steps:
            rows.append((turn.turn_id, "-", f"({turn.status}, no usage)", *[""] * 7))
        for index, step in enumerate(turn.steps):
            rows.append(
                (
                    turn.turn_id if index == 0 else "",
                    f"{step.step_id}*" if step.summary else str(step.step_id),
                    f"{step.model} (summary)" if step.summary else step.model,
                    f"{step.input_tokens:,}",
                    f"{step.output_tokens:,}",
                    f"{step.cache_read_tokens:,}",
                    f"{step.cache_write_tokens:,}",
                    _n(step.estimated_input_tokens),
                    "-" if step.error_pct is None else f"{step.error_pct:+.1f}",
                    cost_text(step.cost_usd),
                )
            )
        if turn.steps_truncated:
            rows.append(("", "", f"(first {len(turn.steps)} steps shown)", *[""] * 7))
    table = fit_table(columns, rows, width)
    # Whole, on its own line: the session id is copied into the next command too.
    title = Text.assemble(("session ", "bold"), printable(view.session_id), no_wrap=True)
    parts: list[RenderableType] = [title, table]
    if view.turns_truncated:
        parts.append(Text(f"(the newest {len(view.turns)} turns are shown)", style="dim"))
    if any(step.summary for turn in view.turns for step in turn.steps):
        parts.append(
            Text("* a context compaction's summarizer call, made before that step", style="dim")
        )
    calibration = view.calibration
    parts.append(
        Text(
            "calibration: none yet"
            if calibration is None
            else printable(
                f"calibration: {calibration.provider}/{calibration.model} "
                f"estimator {calibration.estimator} ratio {calibration.ratio:.3f} "
                f"over {calibration.samples} samples"
            )
        )
    )
    parts.append(Text(f"totals: {totals_line(view.totals)}", style="bold"))
    return Group(*parts)


def totals_line(totals: TokenTotals) -> str:
    """Steps, buckets and cost of a total, on one line."""
    cost = f"cost {cost_text(totals.cost_usd)}"
    if totals.cost_usd is not None and totals.unpriced_steps:
        cost += f" (+{totals.unpriced_steps} unpriced steps)"
    return (
        f"{totals.steps} steps, input {totals.input_tokens:,}, output {totals.output_tokens:,}, "
        f"cache read {totals.cache_read_tokens:,}, cache write {totals.cache_write_tokens:,}; "
        f"{cost}"
    )


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
