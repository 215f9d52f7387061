"""Pure, deterministic assembly steps: groups, cheap pruning, fitting with protected ends.

Nothing here reads the store or the clock: the same inputs give the same
messages, which is what makes ``prepare()`` deterministic and testable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hostkit.context._estimate import Estimator
from hostkit.types import ModelMessage, ToolDefinition

__all__ = [
    "UNANSWERED",
    "CalibratedEstimator",
    "Fit",
    "Group",
    "group_history",
    "fit_groups",
    "leading_results",
    "prune_results",
    "pruned_stub",
]

UNANSWERED = "[no result: the turn ended before this call completed]"
# Tool results at most this long are kept even when old: a stub would save nothing.
PRUNE_MIN_CHARS = 240


@dataclass(frozen=True, slots=True)
class Group:
    """Messages that must stay together: an assistant turn with its tool results, or one message.

    ``seqs`` are the stored sequence numbers (stubs added here have none).
    """

    messages: tuple[ModelMessage, ...]
    seqs: tuple[int, ...]

    @property
    def last_seq(self) -> int:
        return max(self.seqs)


class CalibratedEstimator:
    """An estimator scaled by a calibration ratio (and a safety factor when degraded)."""

    def __init__(self, base: Estimator, factor: float) -> None:
        self.base = base
        self.factor = factor

    @property
    def estimator_id(self) -> str:
        return self.base.estimator_id

    def text(self, text: str) -> int:
        return math.ceil(self.base.text(text) * self.factor)

    def message(self, message: ModelMessage) -> int:
        return math.ceil(self.base.message(message) * self.factor)

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        return math.ceil(self.base.definitions(definitions) * self.factor)

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        return math.ceil(self.base.request(messages, definitions) * self.factor)


def leading_results(messages: Sequence[ModelMessage]) -> frozenset[str]:
    """Call ids answered by tool results that open the current turn (a continuation)."""
    ids: set[str] = set()
    for message in messages:
        if message.role != "tool":
            break
        if message.tool_call_id:
            ids.add(message.tool_call_id)
    return frozenset(ids)


def group_history(
    window: Sequence[tuple[int, ModelMessage]], answered_now: frozenset[str] = frozenset()
) -> list[Group]:
    """Whole groups, oldest first; orphaned results dropped, unanswered calls stubbed.

    An assistant message with tool calls and the results answering it form
    one group. A result whose call is outside the window is dropped (providers
    reject orphans). A call with no result (a turn that was cancelled, lost or
    failed mid-effect) gets a stub saying so, unless the current turn's
    leading results answer it (an approved call run by a continuation turn).
    """
    raw: list[tuple[list[ModelMessage], list[int]]] = []
    for seq, message in window:
        if message.role == "tool":
            head = raw[-1][0][0] if raw else None
            # Only a result for a call the group's head made belongs to it.
            if head is not None and any(c.call_id == message.tool_call_id for c in head.tool_calls):
                raw[-1][0].append(message)
                raw[-1][1].append(seq)
            continue
        raw.append(([message], [seq]))
    groups: list[Group] = []
    for messages, seqs in raw:
        head = messages[0]
        if head.tool_calls:
            answered = {m.tool_call_id for m in messages[1:]} | answered_now
            messages = messages + [
                ModelMessage("tool", UNANSWERED, tool_call_id=call.call_id, name=call.name)
                for call in head.tool_calls
                if call.call_id not in answered
            ]
        groups.append(Group(tuple(messages), tuple(seqs)))
    return groups


def pruned_stub(message: ModelMessage) -> str:
    return (
        f"[pruned: the result of {message.name or 'a tool'} ({len(message.content):,} characters)]"
    )


def prune_results(groups: Sequence[Group], *, protect_tail: int) -> tuple[list[Group], int]:
    """Replace long tool results outside the protected tail by stubs; returns (groups, count).

    The cheapest reduction: the call stays, the model learns what was there
    and how large it was, and the group stays whole.
    """
    cut = max(0, len(groups) - protect_tail)
    pruned = 0
    out: list[Group] = []
    for index, group in enumerate(groups):
        if index >= cut:
            out.append(group)
            continue
        messages = []
        for message in group.messages:
            if message.role == "tool" and len(message.content) > PRUNE_MIN_CHARS:
                messages.append(replace(message, content=pruned_stub(message)))
                pruned += 1
            else:
                messages.append(message)
        out.append(Group(tuple(messages), group.seqs))
    return out, pruned


@dataclass(frozen=True, slots=True)
class Fit:
    """The groups that fit, how many messages were dropped, and whether a protected end was."""

    groups: tuple[Group, ...]
    tokens: int
    dropped_messages: int
    protected_dropped: bool


def fit_groups(
    groups: Sequence[Group],
    budget: int,
    estimate: Estimator,
    *,
    protect_head: int,
    protect_tail: int,
) -> Fit:
    """Keep the protected head and tail, then as many middle groups as fit, newest first.

    If even the protected ends do not fit, the head goes first, then the
    oldest tail groups: the newest context is the last to go.
    """
    sizes = [sum(estimate.message(m) for m in group.messages) for group in groups]
    count = len(groups)
    head = set(range(min(protect_head, count)))
    tail = set(range(max(0, count - protect_tail), count))
    order = [i for i in reversed(range(count)) if i in tail]
    order += [i for i in range(count) if i in head and i not in tail]
    order += [i for i in reversed(range(count)) if i not in head and i not in tail]
    kept: set[int] = set()
    used = 0
    protected_dropped = False
    for index in order:
        if used + sizes[index] > budget:
            protected_dropped = protected_dropped or index in head or index in tail
            if index in head:
                continue
            # Tail and middle are taken newest first and stay contiguous: never an
            # older group without the newer ones that follow it.
            break
        kept.add(index)
        used += sizes[index]
    chosen = tuple(groups[i] for i in sorted(kept))
    total = sum(len(g.messages) for g in groups)
    return Fit(chosen, used, total - sum(len(g.messages) for g in chosen), protected_dropped)
