"""A step's tool calls as the turn's next request can hold them: too large is refused, not run.

A step's calls go back to the model with every later step of its turn and are
never cut (each result answers its call). Arguments the window cannot hold
beside the turn's other messages would run their tool, then fail the next
step's ``prepare`` (``current_input_too_large``) with the effect done. So the
calls that do not fit are kept as ``OversizedArguments`` instead: a bounded
marker the model reads, refused ``invalid`` by the effect runtime before
anything runs; the model gets the refusal and the turn goes on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from hostkit.context._assemble import CalibratedEstimator, at_floor, floor_tokens
from hostkit.freeze import thaw
from hostkit.types import (
    LayerSummary,
    ModelMessage,
    OversizedArguments,
    ToolCall,
)

__all__ = [
    "MARKER_CHARS",
    "fit_calls",
    "least_current",
    "result_floor",
    "room_for_current",
    "scaled",
]

# How much of refused arguments the marker keeps: enough for the model to know its call.
MARKER_CHARS = 200
# Layers every request of the turn holds as they are: all but these.
_SIZED = frozenset({"summary", "history", "current"})


def room_for_current(hard_budget: int, layers: Sequence[LayerSummary]) -> int:
    """Tokens the turn's own messages may take at a step: what the instructions, bootstrap,
    contributions, schemas and framing leave (the summary and history make way)."""
    return max(0, hard_budget - sum(x.tokens for x in layers if x.name not in _SIZED))


def least_current(messages: Sequence[ModelMessage], estimate: CalibratedEstimator) -> int:
    """Tokens of the turn's ``messages`` with every tool result and assistant text cut to
    its floor."""
    total = 0
    for message in messages:
        cut = at_floor(message, estimate)
        total += estimate.message(message) if cut is message else scaled(estimate, cut)
    return total


def result_floor(estimate: CalibratedEstimator, call: ToolCall) -> int:
    """The most tokens ``call``'s result takes at the next step, whatever the tool returns:
    its text at its floor (``at_floor``) and the framing and id around it."""
    framing = ModelMessage("tool", "", tool_call_id=call.call_id, name=call.name)
    return floor_tokens(estimate) + scaled(estimate, framing)


def scaled(estimate: CalibratedEstimator, message: ModelMessage) -> int:
    """``estimate.message(message)`` for a message made only to be counted: not memoized."""
    return math.ceil(estimate.base.message(message) * estimate.factor)


def fit_calls(
    calls: Sequence[ToolCall], estimate: CalibratedEstimator, room: int
) -> tuple[ToolCall, ...] | None:
    """``calls`` with each that ``room`` cannot hold kept as ``OversizedArguments``; None
    when all fit.

    Kept or refused, every call goes back with the turn: refused, as its marker and
    its refusal (a tool result too). So each is reserved its marker and its result's
    floor (``result_floor``) first, and what is left goes to the calls in order, a
    kept call taking its own size instead of its marker's: one huge call among small
    ones costs only itself, and of many calls that together are too large the first
    ones run. When not even every call refused fits, none runs. Each call is counted
    as a message of its own (its framing too: errs high).
    """
    left = room
    sized: list[tuple[ToolCall, int, int]] = []
    for call in calls:
        size = scaled(estimate, ModelMessage("assistant", tool_calls=(call,)))
        marker = scaled(estimate, ModelMessage("assistant", tool_calls=(_refused(call, size, 0),)))
        left -= marker + result_floor(estimate, call)
        sized.append((call, size, marker))
    room_for_all = left >= 0
    kept: list[ToolCall] = []
    for call, size, marker in sized:
        if room_for_all and size - marker <= left:
            left -= size - marker
        else:
            call = _refused(call, size, left + marker)
        kept.append(call)
    if all(new is old for new, old in zip(kept, calls, strict=True)):
        return None
    return tuple(kept)


def _refused(call: ToolCall, size: int, left: int) -> ToolCall:
    """``call`` as a marker: the beginning of its arguments, their size and what fits now."""
    text = json.dumps(thaw(call.arguments), ensure_ascii=False)
    # What fits, in this call's own characters per token.
    fits = len(text) * max(0, left) // max(1, size)
    if fits == 0:
        # Not this call's size: the step's own text and the turn so far fill the window.
        reason = (
            f"could not be kept ({len(text):,} characters): the step's text, the calls "
            "before it and the turn so far leave the context window no room for it"
        )
    else:
        reason = (
            f"are too large to keep in the context window ({len(text):,} characters; "
            f"about {fits:,} fit now)"
        )
    return ToolCall(call.call_id, call.name, OversizedArguments(text[:MARKER_CHARS], reason))
