"""The budget view: a session's observed usage per turn and step, priced where known."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hostkit.errors import InvalidValue
from hostkit.inspect._prices import FREE, FREE_KINDS, PRICES, ModelPrice, price_for
from hostkit.inspect._source import MAX_STEPS, MAX_TURNS, Source, bounded, id_arg, store_of
from hostkit.store import RuntimeStore, TurnUsageRows, UsageRow, UsageSums
from hostkit.types import PrincipalScope

__all__ = [
    "BudgetView",
    "CalibrationView",
    "StepUsage",
    "TokenTotals",
    "TurnUsage",
    "budget_view",
]


@dataclass(frozen=True, slots=True)
class TokenTotals:
    """Summed usage; ``cost_usd`` covers the priced steps (None when none is priced).

    ``steps`` counts every observed provider call, summarizer calls included.
    """

    steps: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    unpriced_steps: int


@dataclass(frozen=True, slots=True)
class StepUsage:
    """One observed provider call: reported buckets, the estimate, the error and the cost.

    ``error_pct`` is (estimate - reported) / reported * 100, against
    ``input_tokens`` (which includes the cache buckets); positive errs high.
    ``exact_estimate`` is True only when the decision counted with the
    provider's own tokenizer (a registered estimator); a stand-in such as the
    character-class default is an approximation, whatever its error.
    ``summary`` marks a context compaction's summarizer call (made while
    preparing step ``step_id``; its estimate is of the summarizer request).
    """

    step_id: int
    decision_id: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    estimated_input_tokens: int | None
    raw_input_tokens: int | None
    error_pct: float | None
    finish_reason: str | None
    cost_usd: float | None
    at: str
    estimator: str | None = None
    exact_estimate: bool = False
    summary: bool = False


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """One turn's observed steps (at most ``MAX_STEPS``) and its totals over every step."""

    turn_id: str
    status: str
    core_id: str
    started_at: str
    steps: tuple[StepUsage, ...]
    totals: TokenTotals
    steps_truncated: bool


@dataclass(frozen=True, slots=True)
class CalibrationView:
    """The session's calibration row: reported / raw estimate for one provider/model/estimator."""

    provider: str
    model: str
    estimator: str
    ratio: float
    samples: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class BudgetView:
    """A session's usage: its newest turns oldest first, calibration, totals over every turn."""

    session_id: str
    turns: tuple[TurnUsage, ...]
    calibration: CalibrationView | None
    totals: TokenTotals
    turns_truncated: bool


async def budget_view(
    source: Source,
    scope: PrincipalScope,
    session_id: str,
    *,
    prices: Mapping[str, ModelPrice] | None = None,
    turns: int = MAX_TURNS,
    steps: int = MAX_STEPS,
) -> BudgetView:
    """Usage of the session's newest ``turns`` turns, per step, with cost where priced.

    Raises ``NotFoundOrUnauthorized`` for a missing or foreign session and
    ``InvalidValue`` for a bound outside 1..``MAX_TURNS``/``MAX_STEPS``.
    """
    turn_limit = bounded("turns", turns, MAX_TURNS)
    step_limit = bounded("steps", steps, MAX_STEPS)
    session_id = id_arg("session_id", session_id)
    if prices is not None and not isinstance(prices, Mapping):
        raise InvalidValue("prices must be a mapping of model names to ModelPrice, or None")
    table = _Pricing({**PRICES, **(prices or {})}, _free_providers(source))
    usage = await store_of(source).inspect.session_usage(
        scope, session_id, turns=turn_limit, steps=step_limit
    )
    calibration = usage.calibration
    return BudgetView(
        session_id=usage.session_id,
        turns=tuple(_turn_usage(turn, table) for turn in usage.turns),
        calibration=(
            None
            if calibration is None
            else CalibrationView(
                provider=calibration.provider,
                model=calibration.model,
                estimator=calibration.estimator,
                ratio=calibration.ratio,
                samples=calibration.samples,
                updated_at=calibration.updated_at,
            )
        ),
        totals=_totals(usage.sums, table),
        turns_truncated=usage.turns_truncated,
    )


@dataclass(frozen=True, slots=True)
class _Pricing:
    """The price table, and the providers that run on this machine (free, whatever model)."""

    table: Mapping[str, ModelPrice]
    free: frozenset[str]

    def price(self, provider: str, model: str) -> ModelPrice | None:
        return FREE if provider in self.free else price_for(model, self.table)


def _free_providers(source: Source) -> frozenset[str]:
    """The configured providers of a kind in ``FREE_KINDS``: a usage row names its provider
    as configured, and its model name (a GGUF file's stem) says nothing of what it cost.
    A bare store has no configuration: only the price table applies."""
    if isinstance(source, RuntimeStore):
        return frozenset()
    providers = source.config.providers
    return frozenset(name for name, config in providers.items() if config.kind in FREE_KINDS)


def _turn_usage(rows: TurnUsageRows, table: _Pricing) -> TurnUsage:
    turn = rows.turn
    return TurnUsage(
        turn_id=turn.turn_id,
        status=turn.status,
        core_id=turn.core_id,
        started_at=turn.started_at,
        steps=tuple(_step_usage(row, table) for row in rows.steps),
        totals=_totals(rows.sums, table),
        steps_truncated=rows.steps_truncated,
    )


def _step_usage(row: UsageRow, table: _Pricing) -> StepUsage:
    price = table.price(row.provider, row.model)
    estimated, reported = row.estimated_input_tokens, row.input_tokens
    return StepUsage(
        step_id=row.step_id,
        decision_id=row.decision_id,
        provider=row.provider,
        model=row.model,
        input_tokens=reported,
        output_tokens=row.output_tokens,
        cache_read_tokens=row.cache_read_tokens,
        cache_write_tokens=row.cache_write_tokens,
        estimated_input_tokens=estimated,
        raw_input_tokens=row.raw_input_tokens,
        error_pct=(
            round((estimated - reported) / reported * 100, 2)
            if estimated is not None and reported > 0
            else None
        ),
        finish_reason=row.finish_reason,
        cost_usd=(
            None
            if price is None
            else price.cost(
                input_tokens=reported,
                output_tokens=row.output_tokens,
                cache_read_tokens=row.cache_read_tokens,
                cache_write_tokens=row.cache_write_tokens,
            )
        ),
        at=row.at,
        estimator=row.estimator,
        exact_estimate=row.exact_estimator,
        summary=row.summary,
    )


def _totals(sums: Iterable[UsageSums], table: _Pricing) -> TokenTotals:
    """Totals over per-model sums.

    Cost is linear in the buckets, so pricing each model's sums equals summing step costs.
    """
    groups = tuple(sums)
    # Nothing used costs nothing: a session before its first step is $0, not "unknown".
    cost: float | None = None if groups else 0.0
    unpriced = 0
    for group in groups:
        price = table.price(group.provider, group.model)
        if price is None:
            unpriced += group.steps
            continue
        cost = (cost or 0.0) + price.cost(
            input_tokens=group.input_tokens,
            output_tokens=group.output_tokens,
            cache_read_tokens=group.cache_read_tokens,
            cache_write_tokens=group.cache_write_tokens,
        )
    return TokenTotals(
        steps=sum(g.steps for g in groups),
        input_tokens=sum(g.input_tokens for g in groups),
        output_tokens=sum(g.output_tokens for g in groups),
        cache_read_tokens=sum(g.cache_read_tokens for g in groups),
        cache_write_tokens=sum(g.cache_write_tokens for g in groups),
        cost_usd=cost,
        unpriced_steps=unpriced,
    )
