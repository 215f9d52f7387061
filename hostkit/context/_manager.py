"""ContextManager: budgets and assembles each provider request before any provider I/O."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from hostkit.context import _history
from hostkit.context._estimate import CharEstimator, Estimator
from hostkit.store import RuntimeStore
from hostkit.types import (
    ContextOverflowed,
    ContextReady,
    ContextRequest,
    LayerSummary,
    ModelLimits,
    ModelMessage,
    PreparedContext,
    UsageObservation,
    new_id,
)

__all__ = ["ContextManager"]


class ContextManager:
    """``prepare(ContextRequest) -> PreparedContext`` and ``observe(UsageObservation)``.

    ``prepare`` reads a bounded window of history through the context's
    session, chooses the output reservation and input budget from the
    provider's normalized limits, assembles layers deterministically
    (instructions, contributions, history, current turn), keeps assistant
    tool-call groups whole, and returns ``ready`` or a typed ``overflow``
    before any provider request exists. The decision's non-sensitive summary
    is persisted; prompts never are. ``observe`` appends provider-reported
    usage once per decision (idempotent).
    """

    def __init__(
        self,
        store: RuntimeStore,
        *,
        estimator: Estimator | None = None,
        history_window: int = 200,
        max_output_fraction: float = 0.25,
        min_output_tokens: int = 256,
        window_cache: int = 64,
    ) -> None:
        self._store = store
        self._estimator = estimator or CharEstimator()
        self._window = history_window
        self._output_fraction = max_output_fraction
        self._min_output = min_output_tokens
        # The window excludes the current turn and same-session turns serialize, so it
        # is constant for a turn's steps: read it once per turn (bounded LRU by turn id).
        self._windows: OrderedDict[str, tuple[ModelMessage, ...]] = OrderedDict()
        self._window_cache = window_cache

    def budget(self, limits: ModelLimits) -> tuple[int, int]:
        """(output reservation, hard input budget) for these limits."""
        output = min(
            limits.max_output_tokens,
            max(self._min_output, int(limits.context_window * self._output_fraction)),
        )
        return output, limits.context_window - output - limits.safety_margin_tokens

    async def prepare(self, request: ContextRequest) -> PreparedContext:
        context = request.context
        output_budget, hard_budget = self.budget(request.limits)
        history = await self._history(context.session_id, context.turn_id)
        estimate = self._estimator
        head = [ModelMessage("system", request.instructions)] if request.instructions else []
        head += [ModelMessage("system", f"Context:\n{item}") for item in request.contributions]
        head_tokens = sum(estimate.message(m) for m in head)
        current_tokens = sum(estimate.message(m) for m in request.messages)
        schema_tokens = estimate.definitions(request.definitions)
        decision_id = new_id("ctx")
        fixed = head_tokens + current_tokens + schema_tokens
        if schema_tokens > hard_budget or fixed > hard_budget:
            reason = (
                "schema_too_large" if schema_tokens > hard_budget else "current_input_too_large"
            )
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
            await self._record(request, decision_id, "overflow", {"reason": reason, "fixed": fixed})
            return overflow
        kept, dropped = _fit_history(
            history, hard_budget - fixed, estimate, answered_now=_leading_results(request.messages)
        )
        history_tokens = sum(estimate.message(m) for m in kept)
        layers = (
            LayerSummary("instructions", head_tokens, len(head)),
            LayerSummary("schemas", schema_tokens, len(request.definitions)),
            LayerSummary("history", history_tokens, len(kept), pruned=dropped),
            LayerSummary("current", current_tokens, len(request.messages)),
        )
        ready = ContextReady(
            messages=(*head, *kept, *request.messages),
            output_budget=output_budget,
            estimated_input_tokens=fixed + history_tokens,
            hard_budget=hard_budget,
            decision_id=decision_id,
            layers=layers,
        )
        await self._record(
            request,
            decision_id,
            "ready",
            {
                "estimated_input_tokens": ready.estimated_input_tokens,
                "hard_budget": hard_budget,
                "output_budget": output_budget,
                "context_window": request.limits.context_window,
                "estimator": estimate.estimator_id,
                "layers": [
                    {"name": x.name, "tokens": x.tokens, "items": x.items, "pruned": x.pruned}
                    for x in layers
                ],
            },
        )
        return ready

    def release(self, turn_id: str) -> None:
        """The turn ended: drop its cached history window (an internal hint, not a seam)."""
        self._windows.pop(turn_id, None)

    async def _history(self, session_id: str, turn_id: str) -> tuple[ModelMessage, ...]:
        cached = self._windows.get(turn_id)
        if cached is not None:
            self._windows.move_to_end(turn_id)
            return cached
        window = tuple(
            await self._store.read(
                lambda conn: _history.read_window(
                    conn, session_id=session_id, turn_id=turn_id, limit=self._window
                )
            )
        )
        self._windows[turn_id] = window
        while len(self._windows) > self._window_cache:
            self._windows.popitem(last=False)
        return window

    async def _record(
        self, request: ContextRequest, decision_id: str, kind: str, summary: dict[str, object]
    ) -> None:
        context = request.context
        await self._store.write(
            lambda conn: _history.insert_decision(
                conn,
                decision_id=decision_id,
                session_id=context.session_id,
                turn_id=context.turn_id,
                step_id=request.step_id,
                kind=kind,
                summary=summary,
            )
        )

    async def observe(self, observation: UsageObservation) -> None:
        """Durably append provider-reported usage for one decision; repeats are no-ops."""
        await self._store.write(lambda conn: _history.insert_usage(conn, observation))


UNANSWERED = "[no result: the turn ended before this call completed]"


def _leading_results(messages: Sequence[ModelMessage]) -> frozenset[str]:
    """Call ids answered by tool results that open the current turn (a continuation)."""
    ids: set[str] = set()
    for message in messages:
        if message.role != "tool":
            break
        if message.tool_call_id:
            ids.add(message.tool_call_id)
    return frozenset(ids)


def _answered(group: list[ModelMessage], answered_now: frozenset[str]) -> list[ModelMessage]:
    """Give every tool call of an assistant group a result.

    A turn that was cancelled, lost or failed mid-effect leaves a call with no
    result in the transcript; providers reject such a history, which would
    break every later turn of the session. The stub says what happened. Calls
    answered by the current turn's leading results (an approved call run by a
    continuation turn) are left for those results.
    """
    head = group[0]
    if not head.tool_calls:
        return group
    answered = {m.tool_call_id for m in group[1:]} | answered_now
    stubs = [
        ModelMessage("tool", UNANSWERED, tool_call_id=call.call_id, name=call.name)
        for call in head.tool_calls
        if call.call_id not in answered
    ]
    return [*group, *stubs]


def _fit_history(
    history: Sequence[ModelMessage],
    budget: int,
    estimate: Estimator,
    *,
    answered_now: frozenset[str] = frozenset(),
) -> tuple[list[ModelMessage], int]:
    """The newest whole groups that fit ``budget``, oldest first, and how many messages were cut.

    An assistant message with tool calls and the tool results answering it form
    one group; a tool result whose call fell outside the window is dropped, as
    providers reject orphaned results.
    """
    groups: list[list[ModelMessage]] = []
    for message in history:
        if message.role == "tool":
            if groups and groups[-1][0].tool_calls:
                groups[-1].append(message)
            continue
        groups.append([message])
    groups = [_answered(group, answered_now) for group in groups]
    kept: list[list[ModelMessage]] = []
    used = 0
    for group in reversed(groups):
        size = sum(estimate.message(m) for m in group)
        if used + size > budget:
            break
        kept.append(group)
        used += size
    messages = [m for group in reversed(kept) for m in group]
    return messages, len(history) - len(messages)
