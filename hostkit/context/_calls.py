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

from hostkit.context._assemble import CUT_MIN_CHARS, CalibratedEstimator, at_floor
from hostkit.freeze import thaw
from hostkit.types import (
    MAX_CALL_ID_CHARS,
    LayerSummary,
    ModelMessage,
    OversizedArguments,
    ToolCall,
)

__all__ = [
    "MARKER_CHARS",
    "REFUSAL",
    "RESULT_FLOOR",
    "fit_calls",
    "least_current",
    "room_for_current",
    "scaled",
]

# How much of refused arguments the marker keeps: enough for the model to know its call.
MARKER_CHARS = 200
# What each call's result takes at least at the next step: one cut to its floor
# (``cut_current``), prose, answering the longest call id.
RESULT_FLOOR = ModelMessage(
    "tool",
    at_floor(ModelMessage("tool", "word " * CUT_MIN_CHARS, tool_call_id="c")).content,
    tool_call_id="c" * MAX_CALL_ID_CHARS,
)
# What a refused call's result takes at the next step: its refusal, a few hundred chars.
REFUSAL = ModelMessage("tool", "refused " * 40, tool_call_id="c" * MAX_CALL_ID_CHARS)
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
        cut = at_floor(message)
        total += estimate.message(message) if cut is message else scaled(estimate, cut)
    return total


def scaled(estimate: CalibratedEstimator, message: ModelMessage) -> int:
    """``estimate.message(message)`` for a message made only to be counted: not memoized."""
    return math.ceil(estimate.base.message(message) * estimate.factor)


def fit_calls(
    calls: Sequence[ToolCall], estimate: CalibratedEstimator, room: int, floor: int
) -> tuple[ToolCall, ...] | None:
    """``calls`` with each that ``room`` cannot hold kept as ``OversizedArguments``; None
    when all fit.

    A kept call needs its own size and ``floor`` tokens for its result beside it; a
    refused one its marker and its refusal. Each call is counted as a message of its
    own (its framing too: errs high). In order: a call that fits what the calls before
    it left is kept, so one huge call among small ones costs only itself, and of many
    calls that together are too large the first ones run.
    """
    refusal = scaled(estimate, REFUSAL)
    left = room
    kept: list[ToolCall] = []
    for call in calls:
        size = scaled(estimate, ModelMessage("assistant", tool_calls=(call,)))
        if size + floor <= left:
            left -= size + floor
        else:
            call = _refused(call, size, left - floor)
            left -= scaled(estimate, ModelMessage("assistant", tool_calls=(call,))) + refusal
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
