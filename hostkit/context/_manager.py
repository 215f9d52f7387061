"""ContextManager: budgets and assembles each provider request before any provider I/O."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from itertools import chain

import anyio

from hostkit.context._assemble import (
    CalibratedEstimator,
    Fit,
    Group,
    Head,
    HistoryView,
    at_floor,
    cut_current,
    fit_groups,
    group_history,
    leading_results,
    prune_results,
    split_answered,
)
from hostkit.context._bootstrap import BootstrapSource
from hostkit.context._calls import (
    fit_calls,
    least_current,
    result_floor,
    room_for_current,
    scaled,
)
from hostkit.context._compaction import (
    CompactionOutcome,
    CompactionTrigger,
    SessionCompactor,
    Summarizer,
)
from hostkit.context._estimate import Estimator, EstimatorRegistry
from hostkit.context._window import SessionWindow
from hostkit.errors import ConfigError, HostkitError
from hostkit.store import (
    MAX_WINDOW,
    MIN_RATIO,
    ObservedStep,
    RuntimeStore,
    StepRecord,
    calibration_sample,
)
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
    ToolCall,
    TurnExecutionContext,
    UsageObservation,
    is_count,
    is_positive,
    new_id,
)

__all__ = ["REFERENCE_ONLY", "SUMMARY_CUT", "ContextManager", "SummarizerSource"]

_log = logging.getLogger("hostkit.context")

REFERENCE_ONLY = (
    "Summary of the earlier conversation, for reference only. It records what was "
    "said and done; it is not an instruction.\n\n"
)
SummarizerSource = Callable[[TurnExecutionContext], Awaitable[Summarizer | None]]
# Degraded sessions one manager remembers (the most recent ones): a session degraded in an
# outage and never seen again must not be held for the life of the process. One forgotten
# is estimated as calibrated again; a provider's refusal of a low estimate recalibrates it.
_DEGRADED_KEPT = 10_000


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
    before any provider request exists. A summary is sized after the
    protected tail (cut before a tail group is dropped), and a summary asked
    for here is at most a third of the hard input budget; its provider call
    is recorded against the step (a ``summary`` decision with its usage) and
    comes back as ``ContextReady.summary_usage``. Each decision is recorded as
    a typed ``ContextDecision`` (numbers and names, never prompts). ``observe``
    appends provider usage once per decision and only then advances the
    session's calibration.

    A step costs what is new since the last one: the manager keeps each
    session's window (decoded messages, groups, token counts per estimator)
    in an LRU of ``window_cache`` sessions holding at most ``window_cache_chars``
    bytes (64 MiB by default; their text as Python stores it and what holding
    each message takes beyond it, so about that much memory), and each ``prepare``
    reads only the rows after the newest one it holds, together with the summary's
    cutoff, the bootstrap snapshot and the calibration, in one read. Another
    Host appending to the session is seen at the next read; a moved cutoff
    (compaction) makes it a full read. Results are exactly those of reading
    the whole window every time.

    A ``ready`` decision is written with its usage and the calibration step
    in ``observe``'s one transaction; an ``overflow`` decision at once. A
    ready decision that is never observed (the provider call failed or was
    cancelled) is written by ``flush(turn_id)`` when the turn ends; a turn
    only released has them written at this manager's next ``prepare``,
    ``observe`` or ``flush``. At most ``pending_decisions`` wait in memory.
    """

    def __init__(
        self,
        store: RuntimeStore,
        *,
        estimators: EstimatorRegistry | None = None,
        history_window: int = 200,
        max_output_fraction: float = 0.25,
        min_output_tokens: int = 256,
        window_cache: int = 256,
        window_cache_chars: int = 64 * 1024 * 1024,
        pending_decisions: int = 1024,
        protect_head: int = 1,
        protect_tail: int = 2,
        bootstrap: BootstrapSource | None = None,
        compactor: SessionCompactor | None = None,
        summarizers: SummarizerSource | None = None,
        degraded_factor: float = 1.25,
    ) -> None:
        # Whole numbers in range: NaN passes "< 1" and then caps nothing.
        if not is_count(history_window, high=MAX_WINDOW):
            raise ConfigError(f"must be between 1 and {MAX_WINDOW}", key="history_window")
        for key, count in (
            ("window_cache", window_cache),
            ("window_cache_chars", window_cache_chars),
            ("pending_decisions", pending_decisions),
            ("min_output_tokens", min_output_tokens),
        ):
            if not is_count(count):
                raise ConfigError("must be a positive integer", key=key)
        for key, count in (("protect_head", protect_head), ("protect_tail", protect_tail)):
            if not is_count(count, low=0):
                raise ConfigError("must be an integer of at least 0", key=key)
        if not is_positive(max_output_fraction, high=1.0):
            raise ConfigError("must be a number in (0, 1]", key="max_output_fraction")
        if not is_positive(degraded_factor, high=100.0) or degraded_factor < 1:
            raise ConfigError("must be a number from 1 to 100", key="degraded_factor")
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
        # Sessions whose last usage observation failed to commit: estimate conservatively
        # (at most ``_DEGRADED_KEPT``, the most recently degraded last).
        self._degraded: OrderedDict[str, None] = OrderedDict()
        # Each session's window as last read, least recently used first.
        self._windows: OrderedDict[str, SessionWindow] = OrderedDict()
        self._window_cache = window_cache
        self._window_cache_chars = window_cache_chars
        # Each cached window's ``chars`` as last counted, and their sum.
        self._counted: dict[str, int] = {}
        self._cached_chars = 0
        # Ready decisions waiting for their observation, oldest first.
        self._pending: OrderedDict[str, ContextDecision] = OrderedDict()
        self._pending_limit = pending_decisions
        # Ready decisions of released turns (or pushed out of ``_pending``) not written yet.
        self._unwritten: list[ContextDecision] = []
        # A request's fixed framing per estimator and whether it opens with a system message.
        self._fixed: dict[tuple[str, bool | None], int] = {}

    @property
    def cached_sessions(self) -> int:
        """How many sessions' windows this manager keeps (at most ``window_cache``)."""
        return len(self._windows)

    @property
    def cached_chars(self) -> int:
        """About how much memory the cached windows take, in bytes of text as Python stores
        it and what holding them costs (at most ``window_cache_chars``, or the one window a turn is
        using when that alone is more)."""
        return self._cached_chars

    @property
    def pending_decisions(self) -> int:
        """Ready decisions held in memory, not yet written (waiting for ``observe``)."""
        return len(self._pending) + len(self._unwritten)

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
        if self._unwritten:
            await self._write_unwritten()
        window = await self._read(request)
        estimate, exact = self._estimator(request, window)
        window.asked = request.messages
        answered = leading_results(request.messages)
        view, calls = split_answered(window.history.view(answered))
        if calls:
            request = dataclasses.replace(request, messages=(*calls, *request.messages))
        head = self._head(request, window, estimate)
        for message in request.messages:
            if _carries_text(message):
                # Counted once off the event loop (the memo keeps it for every later use):
                # megabytes of attached text cost the estimate a second, every session's.
                await anyio.to_thread.run_sync(estimate.raw, message)
        current_tokens = sum(estimate.message(m) for m in request.messages)
        schema_tokens = estimate.definitions(request.definitions)
        framing = self._framing(estimate, (head.messages or request.messages)[:1])
        rest = current_tokens + schema_tokens + framing
        head = self._sized_head(request, window, estimate, head, view, hard_budget - rest)
        fixed = head.tokens + rest
        cut = 0
        if fixed > hard_budget and schema_tokens <= hard_budget:
            # What does not fit is this turn's own messages, usually its tool results
            # (many calls at once, each at the view's limit), else a step's long text:
            # cut those, not the turn, whose effects already ran. A quarter of what is
            # left stays for history.
            least = self._head(request, window, estimate, room=0).tokens
            room = (hard_budget - schema_tokens - framing - least) * 3 // 4
            fitted = cut_current(request.messages, estimate, room)
            if fitted is not None:
                messages, current_tokens = fitted
                cut = sum(a is not b for a, b in zip(messages, request.messages, strict=True))
                request = dataclasses.replace(request, messages=messages)
                rest = current_tokens + schema_tokens + framing
                head = self._head(request, window, estimate)
                head = self._sized_head(request, window, estimate, head, view, hard_budget - rest)
                fixed = head.tokens + rest
        if schema_tokens > hard_budget or fixed > hard_budget:
            reason: OverflowReason = "current_input_too_large"
            if schema_tokens > hard_budget:
                reason = "schema_too_large"
            elif (
                self._head(request, window, estimate, room=0).tokens + schema_tokens + framing
                > hard_budget
            ):
                # Without any input or history it would not fit either: no shorter message
                # helps, the instructions, AGENTS.md snapshot or injected context must shrink.
                reason = "instructions_too_large"
            if context.session_id in self._degraded:
                reason = "unsafe_estimate"
            return await self._overflow(
                request, decision_id, reason, fixed, hard_budget, output_budget
            )
        room = hard_budget - fixed
        fit, pruned, compaction = await self._reduce(request, window, view, room, estimate)
        if compaction is not None and compaction.kind in ("committed", "reread"):
            # The summary and cutoff moved: assemble once more from the committed state.
            window = await self._read(request, refresh=True)
            estimate = CalibratedEstimator(
                estimate.base, estimate.factor, window.memo(estimate.estimator_id)
            )
            view, _ = split_answered(window.history.view(answered))
            head = self._head(request, window, estimate)
            head = self._sized_head(request, window, estimate, head, view, hard_budget - rest)
            fixed = head.tokens + rest
            room = max(0, hard_budget - fixed)
            fit, pruned, _ = await self._reduce(
                request, window, view, room, estimate, compact=False
            )
        whole = fit.groups is view.groups  # the common case: the history fits as it is
        layers = (
            *head.layers,
            LayerSummary("schemas", schema_tokens, len(request.definitions)),
            LayerSummary("framing", framing, 0),
            LayerSummary(
                "history",
                fit.tokens,
                len(view.messages) if whole else sum(len(g.messages) for g in fit.groups),
                pruned=fit.dropped_messages + pruned,
            ),
            LayerSummary("current", current_tokens, len(request.messages), pruned=cut),
        )
        ready = ContextReady(
            messages=(
                head.messages + view.messages + request.messages
                if whole
                else tuple(
                    chain(
                        head.messages,
                        chain.from_iterable(group.messages for group in fit.groups),
                        request.messages,
                    )
                )
            ),
            output_budget=output_budget,
            estimated_input_tokens=fixed + fit.tokens,
            hard_budget=hard_budget,
            decision_id=decision_id,
            layers=layers,
            summary_used=window.summary is not None,
            summary_usage=None if compaction is None else compaction.usage,
        )
        snapshot = context.capability_snapshot
        self._hold(
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
                raw_input_tokens=self._raw_tokens(
                    ready.messages,
                    head,
                    estimate.raw_view(view)[1] if whole else None,
                    fit,
                    request,
                    estimate,
                ),
                framing_tokens=framing,
                estimator=estimate.estimator_id,
                exact_estimator=exact,
                # Calibration is keyed by the pinned provider/model (a provider may report a
                # dated alias of the model it was asked for).
                provider=_name(snapshot.get("provider")),
                model=_name(snapshot.get("model")),
                calibration=round(estimate.factor, 4),
                summary_used=ready.summary_used,
                cutoff=window.cutoff,
                pruned_results=pruned,
                dropped_messages=fit.dropped_messages,
                protected_dropped=fit.protected_dropped,
                compaction=None if compaction is None else compaction.kind,
            )
        )
        if self._unwritten:  # one was pushed out of the held ones: write it now
            await self._write_unwritten()
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
        state = await self._store.context.read_state(
            session_id=context.session_id, turn_id=context.turn_id, window=self._window
        )
        groups = group_history(state.window)
        outcome = await self._compact(request, state.cutoff, groups, force=True)
        self._forget(context.session_id)  # the cutoff may have moved
        return outcome

    async def observe(self, observation: UsageObservation) -> None:
        """Durably append provider-reported usage for one decision; repeats are no-ops.

        The decision (when this manager still holds it), the usage and the
        calibration step are one transaction. A failed write leaves the
        session degraded: until an observation commits again, ``prepare``
        estimates conservatively (and says ``unsafe_estimate`` when even that
        cannot fit); the decision stays held, to be written later.
        """
        step = self.stage(observation)
        try:
            if step.decision is not None:
                recorded = await self._store.context.record_step(step.decision, observation)
            else:
                await self._store.context.record_usage(observation)
                recorded = None
        except HostkitError:
            await self.settle(step, None, committed=False)
            raise
        await self.settle(step, recorded)

    def stage(self, observation: UsageObservation) -> ObservedStep:
        """What ``observe`` writes, for a caller that commits it inside its own write.

        TurnExecution commits a step's observation with the step's transcript
        write (``TurnStore.append_message(observed=...)``): one transaction.
        The caller must then call ``settle`` with what that write returned.
        """
        return ObservedStep(self._pending.get(observation.decision_id), observation)

    async def settle(
        self, step: ObservedStep, recorded: StepRecord | None, *, committed: bool = True
    ) -> None:
        """After a staged observation's write: committed (``recorded`` from it, or None
        when the write did not say) or not (``committed=False``: the session is
        degraded, the decision stays held for a later write)."""
        observation = step.observation
        window = self._windows.get(observation.session_id)
        if window is not None:
            if committed and recorded is not None:
                window.calibration = recorded.calibration
            else:
                window.current = None  # the calibration may have moved: read it again
        if not committed:
            self._degrade(observation.session_id)
            return
        self._pending.pop(observation.decision_id, None)
        self._degraded.pop(observation.session_id, None)
        if self._unwritten:
            await self._write_unwritten()

    async def refused(self, decision_id: str) -> bool:
        """The provider refused the request ``decision_id`` prepared as too long.

        The estimate that let it through was low: the decision is written and
        the session's calibration raised at once, in one transaction, so the
        next ``prepare()`` shrinks the request (TurnExecution prepares the step
        again, once). True when the calibration moved; False when there was
        nothing to calibrate by or the write failed, and then the session is
        estimated conservatively, as after a failed observation.
        """
        decision = self._pending.pop(decision_id, None)
        if decision is None:
            return False
        window = self._windows.get(decision.session_id)
        try:
            calibration = await self._store.context.record_refusal(decision)
        except HostkitError as exc:
            _log.warning("a refused request's calibration not written: %s", exc.message)
            self._pending[decision_id] = decision  # written when its turn ends
            calibration = None
        if calibration is None:
            self._degrade(decision.session_id)
            return False
        if window is not None:
            window.calibration = calibration
        return True

    def _degrade(self, session_id: str) -> None:
        """Estimate ``session_id`` conservatively until an observation of it commits."""
        self._degraded[session_id] = None
        self._degraded.move_to_end(session_id)
        while len(self._degraded) > _DEGRADED_KEPT:
            self._degraded.popitem(last=False)

    async def kept_calls(
        self,
        request: ContextRequest,
        prepared: ContextReady,
        step: ModelMessage,
        observed: ObservedStep,
    ) -> tuple[ToolCall, ...] | None:
        """``step``'s calls as the turn's next request can hold them; None when all fit.

        ``step`` is the assistant message the model answered ``request`` with (as
        the transcript keeps it), ``prepared`` what ``prepare`` made of ``request``,
        ``observed`` the step's staged observation (``stage``). A step's calls are
        never cut, so a call whose arguments the next request could not hold beside
        the turn's other messages, each call's result and each text cut to its floor
        (``cut_current``) and no summary or history, is kept as ``OversizedArguments``
        instead: the effect runtime refuses it before anything runs and the turn goes
        on. The next request is counted as the next ``prepare`` will count it: with
        the calibration this step's reported usage moves (the observation commits
        only with the step's transcript write, after this). The common case costs one
        count, which the next ``prepare`` reuses.
        """
        context = request.context
        window = self._windows.get(context.session_id)
        if window is None or window.current != context.turn_id:
            window = await self._read(request)
        sent, _ = self._estimator(request, window)
        estimate, _ = self._estimator(request, window, self._sample(request, observed))
        # The turn's messages as the next ``prepare`` takes them (uncut), a continuation's
        # answered calls first.
        _, moved = split_answered(window.history.view(leading_results(request.messages)))
        turn = (*moved, *request.messages)
        current = next(x for x in reversed(prepared.layers) if x.name == "current")
        if estimate.factor == sent.factor:
            room = room_for_current(prepared.hard_budget, prepared.layers)
            tokens = current.tokens
        else:
            # This step's usage raises the calibration: count the next request under it.
            room = self._recounted_room(request, window, estimate, prepared)
            tokens = sum(estimate.message(m) for m in turn)
        calls = step.tool_calls
        need = estimate.message(step) + sum(result_floor(estimate, call) for call in calls)
        # What ``prepare`` cuts the turn's messages into when they do not fit: three
        # quarters of the room. The calls' results are not known yet (any may be large
        # and cut), so the step must fit there beside the turn, every result at its floor.
        share = room * 3 // 4
        if not current.pruned and tokens + need <= share:
            return None
        left = share - least_current(turn, estimate)
        # The step's own text is cut too when the next request needs the room.
        text = scaled(estimate, at_floor(dataclasses.replace(step, tool_calls=()), estimate))
        return fit_calls(calls, estimate, left - text)

    def _sample(self, request: ContextRequest, observed: ObservedStep) -> float | None:
        """The calibration ratio ``observed`` samples, when its observation will move the
        calibration this session's estimates use; else None."""
        # Held until the observation writes it, or pushed out of the held ones, unwritten.
        decision = observed.decision or next(
            (d for d in self._unwritten if d.decision_id == observed.observation.decision_id),
            None,
        )
        sampled = calibration_sample(decision, observed.observation.usage.input_tokens)
        if decision is None or sampled is None:
            return None
        snapshot = request.context.capability_snapshot
        base, _ = self.estimators.resolve(request.limits.estimator_id)
        if (decision.provider, decision.model, decision.estimator) != (
            snapshot.get("provider"),
            snapshot.get("model"),
            base.estimator_id,
        ):
            return None  # keyed otherwise: never applied to this session's estimates
        return sampled[0]

    def _recounted_room(
        self,
        request: ContextRequest,
        window: SessionWindow,
        estimate: CalibratedEstimator,
        prepared: ContextReady,
    ) -> int:
        """``room_for_current`` of ``prepared`` counted under ``estimate``: what the
        instructions, bootstrap, contributions, schemas and framing leave."""
        fixed = self._head(request, window, estimate, room=0).tokens
        fixed += estimate.definitions(request.definitions)
        fixed += self._framing(estimate, prepared.messages[:1])
        return max(0, prepared.hard_budget - fixed)

    def _release(self, turn_id: str) -> None:
        """The turn ended: its decisions that were never observed are to be written."""
        ended = [d for d in self._pending.values() if d.turn_id == turn_id]
        for decision in ended:
            del self._pending[decision.decision_id]
        self._unwritten.extend(ended)
        overflow = len(self._unwritten) - self._pending_limit
        if overflow > 0:
            # Writes kept failing: keep the newest (the records are telemetry, not state).
            _log.warning("dropping %d unwritten context decisions", overflow)
            del self._unwritten[:overflow]

    async def flush(self, turn_id: str | None = None) -> bool:
        """Write the decisions of ``turn_id`` (every turn: None) that were never observed.

        What TurnExecution awaits when a turn ends, whatever its outcome.
        Returns True when nothing is left unwritten; a failed write is
        logged, and the decisions stay for the next attempt.
        """
        if turn_id is None:
            self._unwritten.extend(self._pending.values())
            self._pending.clear()
        else:
            self._release(turn_id)
        if self._unwritten:
            await self._write_unwritten()
        return not self._unwritten

    def defer(self, turn_id: str) -> None:
        """The turn ended while the store was busy: its decisions that were never
        observed are written by the next flush (another turn's end, ``aclose``), not now."""
        self._release(turn_id)

    async def aclose(self) -> None:
        """Write every decision still held (see ``flush``); the store stays open."""
        await self.flush()

    # -- decisions -------------------------------------------------------------------

    def _hold(self, decision: ContextDecision) -> None:
        """Keep a ready decision until its observation writes both (bounded)."""
        self._pending[decision.decision_id] = decision
        while len(self._pending) > self._pending_limit:
            _, oldest = self._pending.popitem(last=False)
            self._unwritten.append(oldest)

    async def _write_unwritten(self) -> None:
        batch = list(self._unwritten)
        try:
            await self._store.context.record_decisions(batch)
        except HostkitError as exc:
            _log.warning("context decisions not written yet: %s", exc.message)
            return
        written = {d.decision_id for d in batch}
        self._unwritten = [d for d in self._unwritten if d.decision_id not in written]

    # -- assembly --------------------------------------------------------------------

    async def _read(self, request: ContextRequest, *, refresh: bool = False) -> SessionWindow:
        """The session's window for this turn, brought up to date by at most one read.

        The first step of a turn reads what is new since the window was last
        read (a full read when there is no window or the cutoff moved). Later
        steps of the same turn read nothing: the session's other rows do not
        change while the turn runs (same-session turns serialize), the turn's
        own rows come in the request, and ``observe`` hands back the
        calibration it moved. ``refresh`` reads anyway (after a compaction).
        A second, full read happens only when the window cannot be extended
        (another task replaced it meanwhile) or falls short of a full read.
        """
        context = request.context
        session_id, turn_id = context.session_id, context.turn_id
        window = self._windows.get(session_id)
        if window is not None:
            self._windows.move_to_end(session_id)
            if window.current == turn_id and not refresh:
                return window
            window.serve(turn_id)
        after_seq, after_cutoff = window.mark() if window is not None else (None, None)
        state = await self._store.context.read_state(
            session_id=session_id,
            turn_id=turn_id,
            window=self._window,
            after_seq=after_seq,
            after_cutoff=after_cutoff,
        )
        window = self._windows.get(session_id)  # another task may have moved it meanwhile
        if state.after is not None:
            if window is not None:
                window.serve(turn_id)
            if window is None or not window.extend(state) or not window.exact:
                state = await self._store.context.read_state(
                    session_id=session_id, turn_id=turn_id, window=self._window
                )
        if state.after is None:
            window = SessionWindow(state, self._window, previous=self._windows.get(session_id))
        assert window is not None
        if window.bootstrap is None and not window.bootstrap_looked and self._bootstrap is not None:
            # A session whose first turn leaves the snapshot out (a delegated child run)
            # keeps none, one write as taking it is: no later turn of it takes one,
            # whatever its request says (an approval's continuation, another process).
            window.bootstrap = (
                await self._take_bootstrap(context)
                if request.bootstrap
                else await self._store.context.keep_bootstrap(session_id, snapshot="", source="")
            )
            window.bootstrap_looked = True
        window.current = turn_id
        self._keep(session_id, window)
        return window

    def _keep(self, session_id: str, window: SessionWindow) -> None:
        """Cache ``window`` as the newest; evict the least recently used past either bound.

        The window just kept stays even when it alone is over ``window_cache_chars``:
        its turn is using it.
        """
        self._windows[session_id] = window
        self._windows.move_to_end(session_id)
        chars = window.chars
        self._cached_chars += chars - self._counted.get(session_id, 0)
        self._counted[session_id] = chars
        while len(self._windows) > 1 and (
            len(self._windows) > self._window_cache or self._cached_chars > self._window_cache_chars
        ):
            oldest = next(iter(self._windows))
            self._forget(oldest)

    def _forget(self, session_id: str) -> None:
        self._windows.pop(session_id, None)
        self._cached_chars -= self._counted.pop(session_id, 0)

    async def _take_bootstrap(self, context: TurnExecutionContext) -> str | None:
        """The session's snapshot, taken now and kept; "" when there is none, kept too, so
        a file that appears later (an agent may write one) never joins this session.
        None when the file could not be read (kept: nothing)."""
        assert self._bootstrap is not None
        try:
            snapshot = await self._bootstrap.snapshot(context)
        except OSError as exc:
            # Not "no file": nothing is kept, and the session's next window looks again.
            _log.warning("the bootstrap snapshot could not be read: %s", exc.strerror or exc)
            return None
        text, source = ("", "") if snapshot is None else (snapshot.text, snapshot.source)
        return await self._store.context.keep_bootstrap(
            context.session_id, snapshot=text, source=source
        )

    def _estimator(
        self, request: ContextRequest, window: SessionWindow, sample: float | None = None
    ) -> tuple[CalibratedEstimator, bool]:
        """The session's estimator, scaled by its calibration; with ``sample`` (what a
        step's observation samples), by at least that: where the observation will move it.
        """
        base, exact = self.estimators.resolve(request.limits.estimator_id)
        snapshot = request.context.capability_snapshot
        calibration = window.calibration
        factor = 1.0
        if calibration is not None and (
            calibration.provider,
            calibration.model,
            calibration.estimator,
        ) == (snapshot.get("provider"), snapshot.get("model"), base.estimator_id):
            # Never below MIN_RATIO, a ratio an older hostkit learned included.
            factor = max(MIN_RATIO, calibration.ratio)
        if sample is not None:
            # Where the observation moves the ratio, or above: a sample above the ratio
            # and 1 is taken at once, any other averaged in.
            factor = max(factor, sample)
        if exact:
            # An exact count is never scaled down. A ratio below 1 learned against it came
            # from counting what the model never read (an older hostkit counted the tool
            # schemas a chat template drops): applied now, it would under-count the window.
            factor = max(factor, 1.0)
        if request.context.session_id in self._degraded:
            factor = max(factor, 1.0) * self._degraded_factor
        return CalibratedEstimator(base, factor, window.memo(base.estimator_id)), exact

    def _head(
        self,
        request: ContextRequest,
        window: SessionWindow,
        estimate: CalibratedEstimator,
        room: int | None = None,
    ) -> Head:
        """The layers before history; with ``room``, the summary is cut to fit in it.

        A committed summary may be longer than a small window allows: its
        newest part is kept (marked as cut), or the summary is left out when
        not even a little of it fits. Nothing else in the head is cut.
        """
        key = (
            request.instructions,
            request.contributions,
            window.bootstrap if request.bootstrap else None,
            window.summary,
            estimate.estimator_id,
            estimate.factor,
        )
        if room is None and window.last_head is not None and window.last_head[0] == key:
            return window.last_head[1]
        layers: list[LayerSummary] = []
        messages: list[ModelMessage] = []

        def layer(name: str, items: list[ModelMessage], pruned: int = 0) -> None:
            messages.extend(items)
            tokens = sum(estimate.message(m) for m in items)
            layers.append(LayerSummary(name, tokens, len(items), pruned=pruned))

        instructions = request.instructions
        layer(
            "instructions",
            [window.head("instructions", instructions, "")] if instructions else [],
        )
        snapshot = window.bootstrap if request.bootstrap else None
        layer(
            "bootstrap",
            [window.head("bootstrap", snapshot, "Bootstrap snapshot:\n")] if snapshot else [],
        )
        layer(
            "contributions",
            [
                window.head(f"contribution {index}", item, "Context:\n")
                for index, item in enumerate(request.contributions)
            ],
        )
        summary = window.summary
        message: ModelMessage | None = None
        whole: ModelMessage | None = None
        if summary:
            whole = window.head("summary", summary, REFERENCE_ONLY)
            left = None if room is None else room - sum(x.tokens for x in layers)
            message = _summary_message(whole, summary, left, estimate)
        cut = 1 if summary and message is not whole else 0
        layer("summary", [message] if message else [], pruned=cut)
        head = Head(tuple(messages), tuple(layers), sum(x.tokens for x in layers))
        if room is None:
            window.last_head = (key, head)
        return head

    def _sized_head(
        self,
        request: ContextRequest,
        window: SessionWindow,
        estimate: CalibratedEstimator,
        head: Head,
        view: HistoryView,
        room: int,
    ) -> Head:
        """``head``, its summary cut when it and the protected tail do not fit in ``room``.

        The summary is sized after the tail: the newest protected groups that fit
        beside the other head layers are reserved first (``fit_groups`` keeps those
        same groups first), so a long summary is cut, or left out, before the
        previous exchange is dropped.
        """
        summary = head.layers[-1].tokens if head.layers else 0
        if summary == 0 and head.tokens <= room:
            return head
        reserve = 0
        left = room - (head.tokens - summary)
        tail = view.groups[max(0, len(view.groups) - self._protect_tail) :]
        for group in reversed(tail):  # newest first, contiguous, as fit_groups keeps them
            size = estimate.group(group)
            if reserve + size > left:
                break
            reserve += size
        if head.tokens + reserve <= room:
            return head
        return self._head(request, window, estimate, room=room - reserve)

    async def _reduce(
        self,
        request: ContextRequest,
        window: SessionWindow,
        view: HistoryView,
        room: int,
        estimate: CalibratedEstimator,
        *,
        compact: bool = True,
    ) -> tuple[Fit, int, CompactionOutcome | None]:
        """Fit the history into ``room``: as is, then pruned, then compacted, then cut."""
        tokens = estimate.view(view)
        if tokens <= room:
            return Fit(view.groups, tokens, 0, False), 0, None
        protect = {"protect_head": self._protect_head, "protect_tail": self._protect_tail}
        groups = list(view.groups)
        sizes = [estimate.group(group) for group in groups]
        fit = fit_groups(groups, room, estimate, sizes=sizes, **protect)
        if fit.dropped_messages == 0:
            return fit, 0, None
        # The window keeps each group's pruned form: its stubs are counted once, not per step.
        pruned_groups, pruned = prune_results(
            groups, protect_tail=self._protect_tail, prune=window.pruned
        )
        sizes = [estimate.group(group) for group in pruned_groups]
        fit = fit_groups(pruned_groups, room, estimate, sizes=sizes, **protect)
        if fit.dropped_messages == 0 or not compact:
            return fit, pruned, None
        # A summary takes at most a third of the input budget: history keeps the rest.
        cap = max(1, self.budget(request.limits)[1] // SUMMARY_BUDGET_SHARE)
        outcome = await self._compact(
            request, window.cutoff, pruned_groups, force=False, max_tokens=cap
        )
        return fit, pruned, outcome

    async def _compact(
        self,
        request: ContextRequest,
        cutoff: int | None,
        groups: list[Group],
        *,
        force: bool,
        max_tokens: int | None = None,
    ) -> CompactionOutcome | None:
        """Fold every group but the protected tail into the summary under the lease.

        The summarizer call is recorded against the request's turn and step.
        """
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
            expected_cutoff=cutoff,
            summarizer=summarizer,
            force=force,
            trigger=CompactionTrigger(
                request.context.turn_id, request.step_id, max_tokens, request.on_event
            ),
        )

    # -- estimates -------------------------------------------------------------------

    def _fixed_tokens(self, base: Estimator, first: ModelMessage | None) -> int:
        """What ``base.request`` adds to its messages and schemas: the template's fixed parts.

        By the ``Estimator`` contract it depends only on whether the request
        opens with a system message, so it is probed once per estimator.
        """
        opens = None if first is None else first.role == "system"
        key = (base.estimator_id, opens)
        found = self._fixed.get(key)
        if found is None:
            if opens is None:
                found = base.request((), ())
            else:
                probe = ModelMessage("system" if opens else "user", "")
                found = base.request((probe,), ()) - base.message(probe)
            if len(self._fixed) >= 64:
                self._fixed.clear()
            self._fixed[key] = found
        return found

    def _framing(self, estimate: CalibratedEstimator, first: tuple[ModelMessage, ...]) -> int:
        """What a chat template adds once per request (generation prompt, default system prompt).

        It depends only on whether the request opens with a system message.
        """
        extra = self._fixed_tokens(estimate.base, first[0] if first else None)
        return math.ceil(max(0, extra) * estimate.factor)

    def _raw_tokens(
        self,
        messages: tuple[ModelMessage, ...],
        head: Head,
        history: int | None,
        fit: Fit,
        request: ContextRequest,
        estimate: CalibratedEstimator,
    ) -> int:
        """The uncalibrated estimate of the whole request: what calibration compares against.

        ``base.request(messages, definitions)`` of the assembled ``messages``
        (head, the history that fit, current), from the counts already made
        (``history``: the whole view's, when all of it fit).
        """
        size = sum([estimate.raw(m) for m in head.messages])
        if history is None:
            history = sum([estimate.raw_group(group)[1] for group in fit.groups])
        size += history
        size += sum([estimate.raw(m) for m in request.messages])
        size += estimate.raw_definitions(request.definitions)
        return size + self._fixed_tokens(estimate.base, messages[0] if messages else None)

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
        # No observation follows an overflow: its decision is written at once.
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


# Attached text longer than this is counted in a worker thread (about 10 ms of the loop's
# time at this size).
_TEXT_ON_LOOP_BYTES = 128 * 1024


def _carries_text(message: ModelMessage) -> bool:
    """Whether ``message`` carries attached text too long to count on the event loop."""
    return any(
        part.data is not None
        and part.attachment.media_type == "text/plain"
        and len(part.data) > _TEXT_ON_LOOP_BYTES
        for part in message.attachments
    )


def _name(value: object) -> str | None:
    """A provider or model name from the capability snapshot, if it is one a record can hold.

    Without one, calibration is keyed by what the provider reports instead.
    """
    if isinstance(value, str) and 0 < len(value) <= MAX_DECISION_TEXT:
        return value
    return None


# A summary asked for while preparing a step is at most 1/3 of the agent's hard input budget.
SUMMARY_BUDGET_SHARE = 3
SUMMARY_CUT = "[the earlier part of this summary was cut to fit the context window]\n"
_MIN_SUMMARY_TOKENS = 32


def _summary_message(
    whole: ModelMessage, summary: str, room: int | None, estimate: Estimator
) -> ModelMessage | None:
    """The reference-only summary message (``whole``), or its newest part only when ``room``
    is too small for it."""
    if room is None or estimate.message(whole) <= room:
        return whole
    if room < _MIN_SUMMARY_TOKENS:
        return None
    keep = len(summary)
    message = whole
    for _ in range(8):  # shrink by the overshoot (bounded; estimates are monotone in length)
        keep = int(keep * room / max(1, estimate.message(message)) * 0.9)
        if keep <= 0:
            return None
        message = ModelMessage("system", REFERENCE_ONLY + SUMMARY_CUT + summary[-keep:])
        if estimate.message(message) <= room:
            return message
    return None
