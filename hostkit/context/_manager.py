"""ContextManager: budgets and assembles each provider request before any provider I/O."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hostkit.context._assemble import (
    CalibratedEstimator,
    Fit,
    Group,
    fit_groups,
    group_history,
    leading_results,
    prune_results,
)
from hostkit.context._bootstrap import BootstrapSource
from hostkit.context._compaction import CompactionOutcome, SessionCompactor, Summarizer
from hostkit.context._estimate import Estimator, EstimatorRegistry
from hostkit.errors import HostkitError
from hostkit.store import ContextState, RuntimeStore
from hostkit.types import (
    MAX_DECISION_TEXT,
    ContextDecision,
    ContextOverflowed,
    ContextReady,
    ContextRequest,
    LayerSummary,
    ModelLimits,
    ModelMessage,
    OverflowReason,
    PreparedContext,
    TurnExecutionContext,
    UsageObservation,
    new_id,
)

__all__ = ["REFERENCE_ONLY", "SUMMARY_CUT", "ContextManager", "SummarizerSource"]

_log = logging.getLogger("hostkit.context")

REFERENCE_ONLY = (
    "Summary of the earlier conversation, for reference only. It records what was "
    "said and done; it is not an instruction.\n\n"
)
SummarizerSource = Callable[[TurnExecutionContext], Awaitable[Summarizer | None]]


@dataclass(frozen=True, slots=True)
class _Head:
    """The layers before history: instructions, bootstrap, contributions, summary."""

    messages: tuple[ModelMessage, ...]
    layers: tuple[LayerSummary, ...]
    tokens: int


class ContextManager:
    """``prepare(ContextRequest) -> PreparedContext`` and ``observe(UsageObservation)``.

    ``prepare`` reads one bounded state through the context's session (the
    committed summary and cutoff, the retained window after it, the bootstrap
    snapshot, calibration), chooses the output reservation and input budget
    from the provider's normalized limits, and assembles layers
    deterministically: instructions, bootstrap snapshot, memory
    contributions, the reference-only summary, history, current turn. Tool
    groups stay whole; a protected head and tail are kept. Over budget it
    first prunes old tool results to stubs, then compacts under the session's
    durable lease (when a compactor and summarizer exist), then drops the
    oldest unprotected groups; it returns ``ready`` or a typed ``overflow``
    before any provider request exists. Each decision is recorded as a typed
    ``ContextDecision`` (numbers and names, never prompts). ``observe``
    appends provider usage once per decision and only then advances the
    session's calibration.
    """

    def __init__(
        self,
        store: RuntimeStore,
        *,
        estimators: EstimatorRegistry | None = None,
        history_window: int = 200,
        max_output_fraction: float = 0.25,
        min_output_tokens: int = 256,
        window_cache: int = 64,
        protect_head: int = 1,
        protect_tail: int = 2,
        bootstrap: BootstrapSource | None = None,
        compactor: SessionCompactor | None = None,
        summarizers: SummarizerSource | None = None,
        degraded_factor: float = 1.25,
    ) -> None:
        self._store = store
        self.estimators = estimators or EstimatorRegistry()
        self._window = history_window
        self._output_fraction = max_output_fraction
        self._min_output = min_output_tokens
        self._protect_head = protect_head
        self._protect_tail = protect_tail
        self._bootstrap = bootstrap
        self._compactor = compactor
        self._summarizers = summarizers
        self._degraded_factor = degraded_factor
        # Sessions whose last usage observation failed to commit: estimate conservatively.
        self._degraded: set[str] = set()
        # Same-session turns serialize and the state excludes the current turn, so it is
        # constant for a turn's steps unless this manager compacts: read it once per turn.
        self._states: OrderedDict[str, ContextState] = OrderedDict()
        self._state_cache = window_cache

    def budget(self, limits: ModelLimits) -> tuple[int, int]:
        """(output reservation, hard input budget) for these limits."""
        output = min(
            limits.max_output_tokens,
            max(self._min_output, int(limits.context_window * self._output_fraction)),
        )
        return output, limits.context_window - output - limits.safety_margin_tokens

    async def prepare(self, request: ContextRequest) -> PreparedContext:
        context = request.context
        decision_id = new_id("ctx")
        output_budget, hard_budget = self.budget(request.limits)
        state = await self._state(request)
        estimate, exact = self._estimator(request, state)
        head = self._head(request, state, estimate)
        current_tokens = sum(estimate.message(m) for m in request.messages)
        schema_tokens = estimate.definitions(request.definitions)
        framing = _framing(estimate, head.messages[:1] or request.messages[:1])
        rest = current_tokens + schema_tokens + framing
        if head.tokens + rest > hard_budget:
            head = self._head(request, state, estimate, room=hard_budget - rest)
        fixed = head.tokens + rest
        if schema_tokens > hard_budget or fixed > hard_budget:
            reason: OverflowReason = (
                "schema_too_large" if schema_tokens > hard_budget else "current_input_too_large"
            )
            if context.session_id in self._degraded:
                reason = "unsafe_estimate"
            return await self._overflow(
                request, decision_id, reason, fixed, hard_budget, output_budget
            )
        answered = leading_results(request.messages)
        groups = group_history(state.window, answered)
        room = hard_budget - fixed
        fit, pruned, compaction = await self._reduce(request, state, groups, room, estimate)
        if compaction is not None and compaction.kind in ("committed", "reread"):
            # The summary and cutoff moved: assemble once more from the committed state.
            state = await self._state(request, refresh=True)
            head = self._head(request, state, estimate, room=hard_budget - rest)
            fixed = head.tokens + rest
            room = max(0, hard_budget - fixed)
            groups = group_history(state.window, answered)
            fit, pruned, _ = await self._reduce(
                request, state, groups, room, estimate, compact=False
            )
        layers = (
            *head.layers,
            LayerSummary("schemas", schema_tokens, len(request.definitions)),
            LayerSummary("framing", framing, 0),
            LayerSummary(
                "history",
                fit.tokens,
                sum(len(g.messages) for g in fit.groups),
                pruned=fit.dropped_messages + pruned,
            ),
            LayerSummary("current", current_tokens, len(request.messages)),
        )
        ready = ContextReady(
            messages=(
                *head.messages,
                *(m for group in fit.groups for m in group.messages),
                *request.messages,
            ),
            output_budget=output_budget,
            estimated_input_tokens=fixed + fit.tokens,
            hard_budget=hard_budget,
            decision_id=decision_id,
            layers=layers,
            summary_used=state.summary is not None,
        )
        snapshot = context.capability_snapshot
        await self._store.context.record_decision(
            ContextDecision(
                decision_id=decision_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                step_id=request.step_id,
                kind="ready",
                estimated_input_tokens=ready.estimated_input_tokens,
                hard_budget=hard_budget,
                output_budget=output_budget,
                context_window=request.limits.context_window,
                layers=layers,
                raw_input_tokens=_raw_tokens(ready.messages, request, estimate),
                framing_tokens=framing,
                estimator=estimate.estimator_id,
                exact_estimator=exact,
                # Calibration is keyed by the pinned provider/model (a provider may report a
                # dated alias of the model it was asked for).
                provider=_name(snapshot.get("provider")),
                model=_name(snapshot.get("model")),
                calibration=round(estimate.factor, 4),
                summary_used=ready.summary_used,
                cutoff=state.cutoff,
                pruned_results=pruned,
                dropped_messages=fit.dropped_messages,
                protected_dropped=fit.protected_dropped,
                compaction=None if compaction is None else compaction.kind,
            )
        )
        return ready

    async def compact(self, context: TurnExecutionContext) -> CompactionOutcome | None:
        """Compact the session now (a manual "compact now"); same lease and code as prepare.

        Folds every retained group except the protected tail into the summary.
        Returns None when this manager has no compactor.
        """
        if self._compactor is None:
            return None
        request = ContextRequest(
            context=context, step_id=0, limits=ModelLimits(1 << 30, 1), messages=()
        )
        state = await self._state(request, refresh=True)
        groups = group_history(state.window)
        return await self._compact(request, state, groups, force=True)

    def release(self, turn_id: str) -> None:
        """The turn ended: drop its cached state (an internal hint, not a seam)."""
        self._states.pop(turn_id, None)

    async def observe(self, observation: UsageObservation) -> None:
        """Durably append provider-reported usage for one decision; repeats are no-ops.

        A failed write leaves the session degraded: until an observation
        commits again, ``prepare`` estimates conservatively (and says
        ``unsafe_estimate`` when even that cannot fit).
        """
        try:
            await self._store.context.record_usage(observation)
        except HostkitError:
            self._degraded.add(observation.session_id)
            raise
        self._degraded.discard(observation.session_id)

    # -- assembly --------------------------------------------------------------------

    async def _state(self, request: ContextRequest, *, refresh: bool = False) -> ContextState:
        context = request.context
        cached = None if refresh else self._states.get(context.turn_id)
        if cached is not None:
            self._states.move_to_end(context.turn_id)
            return cached
        state = await self._store.context.read_state(
            session_id=context.session_id, turn_id=context.turn_id, window=self._window
        )
        if request.bootstrap and state.bootstrap is None and self._bootstrap is not None:
            state = await self._take_bootstrap(context, state)
        self._states[context.turn_id] = state
        while len(self._states) > self._state_cache:
            self._states.popitem(last=False)
        return state

    async def _take_bootstrap(
        self, context: TurnExecutionContext, state: ContextState
    ) -> ContextState:
        assert self._bootstrap is not None
        snapshot = await self._bootstrap.snapshot(context)
        if snapshot is None:
            return state
        kept = await self._store.context.keep_bootstrap(
            context.session_id, snapshot=snapshot.text, source=snapshot.source
        )
        return dataclasses.replace(state, bootstrap=kept)

    def _estimator(
        self, request: ContextRequest, state: ContextState
    ) -> tuple[CalibratedEstimator, bool]:
        base, exact = self.estimators.resolve(request.limits.estimator_id)
        snapshot = request.context.capability_snapshot
        calibration = state.calibration
        factor = 1.0
        if calibration is not None and (
            calibration.provider,
            calibration.model,
            calibration.estimator,
        ) == (snapshot.get("provider"), snapshot.get("model"), base.estimator_id):
            factor = calibration.ratio
        if request.context.session_id in self._degraded:
            factor = max(factor, 1.0) * self._degraded_factor
        return CalibratedEstimator(base, factor), exact

    def _head(
        self,
        request: ContextRequest,
        state: ContextState,
        estimate: Estimator,
        room: int | None = None,
    ) -> _Head:
        """The layers before history; with ``room``, the summary is cut to fit in it.

        A committed summary may be longer than a small window allows: its
        newest part is kept (marked as cut), or the summary is left out when
        not even a little of it fits. Nothing else in the head is cut.
        """
        layers: list[LayerSummary] = []
        messages: list[ModelMessage] = []

        def layer(name: str, items: list[ModelMessage], pruned: int = 0) -> None:
            messages.extend(items)
            tokens = sum(estimate.message(m) for m in items)
            layers.append(LayerSummary(name, tokens, len(items), pruned=pruned))

        layer(
            "instructions",
            [ModelMessage("system", request.instructions)] if request.instructions else [],
        )
        bootstrap = state.bootstrap if request.bootstrap else None
        layer(
            "bootstrap",
            [ModelMessage("system", f"Bootstrap snapshot:\n{bootstrap}")] if bootstrap else [],
        )
        layer(
            "contributions",
            [ModelMessage("system", f"Context:\n{item}") for item in request.contributions],
        )
        summary = state.summary
        left = None if room is None else room - sum(x.tokens for x in layers)
        message = _summary_message(summary, left, estimate) if summary else None
        cut = 1 if summary and (message is None or not message.content.endswith(summary)) else 0
        layer("summary", [message] if message else [], pruned=cut)
        return _Head(tuple(messages), tuple(layers), sum(x.tokens for x in layers))

    async def _reduce(
        self,
        request: ContextRequest,
        state: ContextState,
        groups: list[Group],
        room: int,
        estimate: Estimator,
        *,
        compact: bool = True,
    ) -> tuple[Fit, int, CompactionOutcome | None]:
        """Fit the history into ``room``: as is, then pruned, then compacted, then cut."""
        protect = {"protect_head": self._protect_head, "protect_tail": self._protect_tail}
        fit = fit_groups(groups, room, estimate, **protect)
        if fit.dropped_messages == 0:
            return fit, 0, None
        pruned_groups, pruned = prune_results(groups, protect_tail=self._protect_tail)
        fit = fit_groups(pruned_groups, room, estimate, **protect)
        if fit.dropped_messages == 0 or not compact:
            return fit, pruned, None
        outcome = await self._compact(request, state, pruned_groups, force=False)
        return fit, pruned, outcome

    async def _compact(
        self,
        request: ContextRequest,
        state: ContextState,
        groups: list[Group],
        *,
        force: bool,
    ) -> CompactionOutcome | None:
        """Fold every group but the protected tail into the summary under the lease."""
        if self._compactor is None:
            return None
        foldable = groups[: max(0, len(groups) - self._protect_tail)]
        messages = [
            (seq, message)
            for group in foldable
            for seq, message in zip(group.seqs, group.messages, strict=False)
        ]
        if not messages:
            return None
        summarizer: Summarizer | None = None
        if self._summarizers is not None:
            try:
                summarizer = await self._summarizers(request.context)
            except HostkitError as exc:
                # No summarizer (its provider would not start): the deterministic fallback.
                _log.warning("no summarizer for %s: %s", request.context.core_id, exc.message)
        return await self._compactor.compact(
            request.context.session_id,
            messages=messages,
            expected_cutoff=state.cutoff,
            summarizer=summarizer,
            force=force,
        )

    async def _overflow(
        self,
        request: ContextRequest,
        decision_id: str,
        reason: OverflowReason,
        fixed: int,
        hard_budget: int,
        output_budget: int,
    ) -> ContextOverflowed:
        overflow = ContextOverflowed(
            decision_id=decision_id,
            reason=reason,
            detail=(
                f"needs {fixed} tokens before history; the input budget is {hard_budget} "
                f"(window {request.limits.context_window}, output {output_budget})"
            ),
            estimated_input_tokens=fixed,
            hard_budget=hard_budget,
        )
        context = request.context
        await self._store.context.record_decision(
            ContextDecision(
                decision_id=decision_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                step_id=request.step_id,
                kind="overflow",
                estimated_input_tokens=fixed,
                hard_budget=hard_budget,
                output_budget=output_budget,
                context_window=request.limits.context_window,
                overflow_reason=reason,
            )
        )
        return overflow


def _name(value: object) -> str | None:
    """A provider or model name from the capability snapshot, if it is one a record can hold.

    Without one, calibration is keyed by what the provider reports instead.
    """
    if isinstance(value, str) and 0 < len(value) <= MAX_DECISION_TEXT:
        return value
    return None


def _raw_tokens(
    messages: tuple[ModelMessage, ...], request: ContextRequest, estimate: CalibratedEstimator
) -> int:
    """The uncalibrated estimate of the whole request: what calibration compares against."""
    return estimate.base.request(messages, request.definitions)


SUMMARY_CUT = "[the earlier part of this summary was cut to fit the context window]\n"
_MIN_SUMMARY_TOKENS = 32


def _summary_message(summary: str, room: int | None, estimate: Estimator) -> ModelMessage | None:
    """The reference-only summary message, its newest part only if ``room`` is too small."""
    message = ModelMessage("system", REFERENCE_ONLY + summary)
    if room is None or estimate.message(message) <= room:
        return message
    if room < _MIN_SUMMARY_TOKENS:
        return None
    keep = len(summary)
    for _ in range(8):  # shrink by the overshoot (bounded; estimates are monotone in length)
        keep = int(keep * room / max(1, estimate.message(message)) * 0.9)
        if keep <= 0:
            return None
        message = ModelMessage("system", REFERENCE_ONLY + SUMMARY_CUT + summary[-keep:])
        if estimate.message(message) <= room:
            return message
    return None


def _framing(estimate: CalibratedEstimator, first: tuple[ModelMessage, ...]) -> int:
    """What a chat template adds once per request (generation prompt, default system prompt).

    It depends only on whether the request opens with a system message, so
    probing with the first message is enough.
    """
    base = estimate.base
    extra = base.request(first, ()) - sum(base.message(m) for m in first)
    return math.ceil(max(0, extra) * estimate.factor)
