"""Pure, deterministic assembly steps: groups, cheap pruning, fitting with protected ends.

Nothing here reads the store or the clock: the same inputs give the same
messages, which is what makes ``prepare()`` deterministic and testable.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import TypeVar

from hostkit.context._estimate import Estimator, arguments_text
from hostkit.types import LayerSummary, ModelMessage, ToolDefinition

__all__ = [
    "CUT_MIN_TOKENS",
    "CUT_STUB",
    "UNANSWERED",
    "CalibratedEstimator",
    "Fit",
    "Group",
    "Head",
    "History",
    "HistoryView",
    "SizeMemo",
    "at_floor",
    "cut_current",
    "fit_groups",
    "floor_tokens",
    "group_history",
    "leading_results",
    "prune_group",
    "prune_results",
    "pruned_stub",
]

UNANSWERED = "[no result: the turn ended before this call completed]"
# Tool results at most this long are kept even when old: a stub would save nothing.
PRUNE_MIN_CHARS = 240
# A result or assistant text of the current turn is never cut below what this many tokens
# of text hold, its note included, as the estimator in use counts them, calibrated (by
# CharEstimator about 110 characters of English, 10 of Chinese). A floor in tokens, not
# characters, is what lets a step's calls be checked before they run (``kept_calls``),
# whatever their results hold; a small one, what lets a small window answer many calls.
CUT_MIN_TOKENS = 64
# A text not even a character of which fits that floor: the same for every text.
CUT_STUB = "[cut to fit the model's context window: not even its beginning fits]"
# The cutting tries this many shares before it settles on the floors (each round
# re-estimates the cut messages).
_CUT_ROUNDS = 6


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


@dataclass(frozen=True, slots=True, eq=False)
class _Counted:
    """A history view's base counts, in order, their sum, and how often each count occurs."""

    view: HistoryView
    counts: tuple[int, ...]
    total: int
    histogram: dict[int, int]


class SizeMemo:
    """Uncalibrated token counts of messages and of one definitions tuple, for one estimator.

    Messages are looked up by identity; each entry holds its message, so an
    id is never reused while its entry exists. The window that owns the memo
    forgets the entries of the rows (and their groups and stubs) that leave
    it, so what it still holds is never counted again; past ``limit``
    entries, the oldest is dropped: one that nothing forgot (a turn's own
    messages, a cut text), older than every row still held.

    A turn's own messages are not the rows the store gives back for them
    (those are decoded anew, at the next turn's read): when the turn ends,
    the counts of what its last step asked with are ``retire``d, and a row
    equal to one of them takes its count instead of being counted again.
    """

    __slots__ = ("definitions", "groups", "limit", "messages", "retired", "view")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.messages: dict[int, tuple[ModelMessage, int]] = {}
        # A group's messages' counts and their sum.
        self.groups: dict[int, tuple[Group, tuple[int, ...], int]] = {}
        self.definitions: tuple[Sequence[ToolDefinition], int] | None = None
        # The counts of one ``HistoryView``'s messages, in order, and their sum.
        self.view: _Counted | None = None
        # The retired counts by what a row equal to their message holds (see ``adopt``).
        self.retired: dict[_Key, tuple[ModelMessage, int]] = {}

    def retire(self, messages: Iterable[ModelMessage]) -> None:
        """Keep the counts of ``messages``, a turn's that ended, for the rows equal to them
        until the next turn ends (in place of those of the turn before): one turn's
        messages at most."""
        retired: dict[_Key, tuple[ModelMessage, int]] = {}
        for message in messages:
            found = self.messages.get(id(message))
            if found is not None and found[0] is message:
                del self.messages[id(message)]
                # Attached bytes never come back (a row holds the reference): not kept.
                if not any(part.data is not None for part in message.attachments):
                    retired[_key(message)] = found
        self.retired = retired

    def adopt(self, message: ModelMessage) -> int | None:
        """The count a retired message equal to ``message`` has, if there is one; taken
        once (the row now holds it), so the retired copy's text is not held beside it."""
        if not self.retired:
            return None
        key = _key(message)
        found = self.retired.get(key)
        if found is None or not _same_message(found[0], message):
            return None
        del self.retired[key]
        return found[1]

    def forget(self, message: ModelMessage) -> None:
        """Drop ``message``'s count: it left the window."""
        found = self.messages.get(id(message))
        if found is not None and found[0] is message:
            del self.messages[id(message)]

    def forget_group(self, group: Group) -> None:
        """Drop ``group``'s counts: it left the window (its messages are forgotten apart)."""
        found = self.groups.get(id(group))
        if found is not None and found[0] is group:
            del self.groups[id(group)]


_T = TypeVar("_T")
# What finds a retired message a row may equal: its role, text and the call it answers.
_Key = tuple[str, str, str | None]


def _key(message: ModelMessage) -> _Key:
    return message.role, message.content, message.tool_call_id


def _same_message(counted: ModelMessage, other: ModelMessage) -> bool:
    """Whether every estimator counts ``other`` as ``counted``: equal messages whose calls'
    arguments are the same JSON text (1, 1.0 and True are equal in Python, not in a
    request, nor are two orders of the same keys)."""
    return counted == other and all(
        arguments_text(a) == arguments_text(b)
        for a, b in zip(counted.tool_calls, other.tool_calls, strict=True)
    )


def _make_room(entries: dict[int, _T], limit: int) -> None:
    """Drop ``entries``' oldest until one more fits in ``limit``."""
    while len(entries) >= limit:
        del entries[next(iter(entries))]


class CalibratedEstimator:
    """An estimator scaled by a calibration ratio (and a safety factor when degraded).

    With a ``SizeMemo``, each message and the definitions are counted by the
    base estimator once, however many steps use them; the scaled figures are
    exactly those without the memo (``ceil(base count * factor)``).
    """

    def __init__(self, base: Estimator, factor: float, memo: SizeMemo | None = None) -> None:
        self.base = base
        self.factor = factor
        self._memo = memo

    @property
    def estimator_id(self) -> str:
        return self.base.estimator_id

    def raw(self, message: ModelMessage) -> int:
        """The base estimator's count of ``message`` (uncalibrated)."""
        memo = self._memo
        if memo is None:
            return self.base.message(message)
        found = memo.messages.get(id(message))
        if found is not None and found[0] is message:
            return found[1]
        size = memo.adopt(message)
        if size is None:
            size = self.base.message(message)
        _make_room(memo.messages, memo.limit)
        memo.messages[id(message)] = (message, size)
        return size

    def raw_group(self, group: Group) -> tuple[tuple[int, ...], int]:
        """The base counts of ``group``'s messages and their sum (uncalibrated)."""
        memo = self._memo
        if memo is None:
            counts = tuple(self.base.message(m) for m in group.messages)
            return counts, sum(counts)
        found = memo.groups.get(id(group))
        if found is not None and found[0] is group:
            return found[1], found[2]
        counts = tuple(self.raw(m) for m in group.messages)
        total = sum(counts)
        _make_room(memo.groups, memo.limit)
        memo.groups[id(group)] = (group, counts, total)
        return counts, total

    def group(self, group: Group) -> int:
        """``sum(self.message(m) for m in group.messages)``, from the counts made before."""
        counts, total = self.raw_group(group)
        factor = self.factor
        if factor == 1.0:
            return total
        ceil = math.ceil
        return sum([ceil(count * factor) for count in counts])

    def raw_view(self, view: HistoryView) -> tuple[tuple[int, ...], int]:
        """The base counts of a history view's messages, in order, and their sum."""
        counted = self._counted(view)
        return counted.counts, counted.total

    def view(self, view: HistoryView) -> int:
        """``sum(self.message(m) for m in view.messages)``, from the counts made before."""
        counted = self._counted(view)
        factor = self.factor
        if factor == 1.0:
            return counted.total
        ceil = math.ceil
        # Equal counts scale equally: one product per distinct count.
        return sum([times * ceil(count * factor) for count, times in counted.histogram.items()])

    def _counted(self, view: HistoryView) -> _Counted:
        memo = self._memo
        found = memo.view if memo is not None else None
        if found is not None and found.view is view:
            return found
        if found is not None and view.source is not None and found.view.source is view.source:
            # Messages before the earlier view's last group are still counted the same.
            before, counts = found.view, found.counts
            start, stable = view.offset - before.offset, before.stable - before.offset
            kept = counts[start:stable]
            gone = chain(counts[:start], counts[max(start, stable) :])
            added = tuple(self.raw(m) for m in view.messages[len(kept) :])
            histogram = dict(found.histogram)
            for count in gone:
                left = histogram[count] - 1
                if left:
                    histogram[count] = left
                else:
                    del histogram[count]
            for count in added:
                histogram[count] = histogram.get(count, 0) + 1
            counted = _Counted(view, kept + added, sum(kept) + sum(added), histogram)
        else:
            counts = tuple(chain.from_iterable(self.raw_group(group)[0] for group in view.groups))
            counted = _Counted(view, counts, sum(counts), dict(Counter(counts)))
        if memo is not None:
            memo.view = counted
        return counted

    def raw_definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        """The base estimator's count of the tool schemas (uncalibrated)."""
        memo = self._memo
        if memo is None:
            return self.base.definitions(definitions)
        found = memo.definitions
        if found is not None and _same_schemas(found[0], definitions):
            # The turn's own definitions from now on: its later uses are the same object.
            memo.definitions = (definitions, found[1])
            return found[1]
        size = self.base.definitions(definitions)
        memo.definitions = (definitions, size)
        return size

    def text(self, text: str) -> int:
        return math.ceil(self.base.text(text) * self.factor)

    def message(self, message: ModelMessage) -> int:
        return math.ceil(self.raw(message) * self.factor)

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        return math.ceil(self.raw_definitions(definitions) * self.factor)

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        return math.ceil(self.base.request(messages, definitions) * self.factor)


def _same_schemas(counted: Sequence[ToolDefinition], asked: Sequence[ToolDefinition]) -> bool:
    """Definitions a count cannot tell apart: the same names, descriptions and schemas.

    Each turn's catalog builds new definitions around its tools' schemas, so
    comparing them (cheaper than counting them again, and the same object in
    the common case) is what spares each turn the count.
    """
    if counted is asked:
        return True
    return len(counted) == len(asked) and all(
        a.name == b.name
        and a.description == b.description
        and (a.parameters is b.parameters or a.parameters == b.parameters)
        for a, b in zip(counted, asked, strict=True)
    )


@dataclass(frozen=True, slots=True)
class Head:
    """The layers before history: instructions, bootstrap, contributions, summary."""

    messages: tuple[ModelMessage, ...]
    layers: tuple[LayerSummary, ...]
    tokens: int


def leading_results(messages: Sequence[ModelMessage]) -> frozenset[str]:
    """Call ids answered by tool results that open the current turn (a continuation)."""
    ids: set[str] = set()
    for message in messages:
        if message.role != "tool":
            break
        if message.tool_call_id:
            ids.add(message.tool_call_id)
    return frozenset(ids)


def split_answered(view: HistoryView) -> tuple[HistoryView, tuple[ModelMessage, ...]]:
    """``view`` without the group whose calls the current turn's leading results answer
    (and any after it), and those groups' messages.

    A continuation opens with the results of calls an earlier turn made: the
    group holding those calls goes with the current turn, whole, so no fitting
    or pruning of history can leave the results without their calls (both
    OpenAI and Anthropic refuse a result no call precedes).
    """
    answered = view.answered_now
    if not answered:
        return view, ()
    for index in range(len(view.groups) - 1, -1, -1):
        calls = view.groups[index].messages[0].tool_calls
        if any(call.call_id in answered for call in calls):
            kept, moved = view.groups[:index], view.groups[index:]
            return (
                HistoryView(answered, kept, tuple(m for g in kept for m in g.messages)),
                tuple(m for g in moved for m in g.messages),
            )
    return view, ()


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


class _Open:
    """One group of a ``History`` while its window lasts: rows are added, never taken back."""

    __slots__ = ("_plain", "_stubbed", "answered", "calls", "messages", "seqs")

    def __init__(self, seq: int, message: ModelMessage) -> None:
        self.messages = [message]
        self.seqs = [seq]
        self.calls = frozenset(call.call_id for call in message.tool_calls)
        self.answered: set[str | None] = set()
        self._plain: Group | None = None
        self._stubbed: tuple[frozenset[str], Group] | None = None

    def add(self, seq: int, message: ModelMessage) -> None:
        self.messages.append(message)
        self.seqs.append(seq)
        self.answered.add(message.tool_call_id)
        self._plain = self._stubbed = None

    def group(self, answered_now: frozenset[str]) -> Group:
        """The group as ``group_history`` builds it (kept while nothing changes)."""
        if self._plain is not None:
            return self._plain
        unanswered = [
            call for call in self.messages[0].tool_calls if call.call_id not in self.answered
        ]
        if not unanswered:
            self._plain = Group(tuple(self.messages), tuple(self.seqs))
            return self._plain
        if self._stubbed is not None and self._stubbed[0] == answered_now:
            return self._stubbed[1]
        stubs = [
            ModelMessage("tool", UNANSWERED, tool_call_id=call.call_id, name=call.name)
            for call in unanswered
            if call.call_id not in answered_now
        ]
        built = Group((*self.messages, *stubs), tuple(self.seqs))
        self._stubbed = (answered_now, built)
        return built


@dataclass(frozen=True, slots=True, eq=False)
class HistoryView:
    """A ``History``'s groups for one set of call ids answered now, and their messages in order.

    For views of the plain history (nothing answered now), ``source`` names
    the ``History`` and ``offset`` is the position of the first message in
    everything it ever held; messages before position ``stable`` (where the
    last group begins) stay as they are in every later view of the same
    source that still holds them. A later view's counts can start from an
    earlier one's.
    """

    answered_now: frozenset[str]
    groups: tuple[Group, ...]
    messages: tuple[ModelMessage, ...]
    source: object | None = None
    offset: int = 0
    stable: int = 0


_NOTHING: frozenset[str] = frozenset()


class History:
    """A window's groups, kept current as rows arrive at its newest end and leave at its oldest.

    At every point ``groups(answered_now)`` equals ``group_history(rows,
    answered_now)``; appending or dropping a row regroups nothing, and the
    groups that did not change are the same objects from one call to the
    next. Rows come in seq order.
    """

    __slots__ = ("_built", "_dropped", "_flat", "_groups", "_rows", "_token", "_view")

    def __init__(self, rows: Iterable[tuple[int, ModelMessage]] = ()) -> None:
        self._rows: deque[tuple[int, ModelMessage]] = deque()
        self._groups: deque[_Open] = deque()
        # The plain groups (nothing answered now) and their messages, kept as rows come and go.
        self._built: deque[Group] = deque()
        self._flat: deque[ModelMessage] = deque()
        self._dropped = 0  # messages that left ``_flat`` at its front, ever
        self._token = object()
        self._view: HistoryView | None = None
        for seq, message in rows:
            self.append(seq, message)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> tuple[tuple[int, ModelMessage], ...]:
        """(seq, message), oldest first."""
        return tuple(self._rows)

    @property
    def last_seq(self) -> int | None:
        return self._rows[-1][0] if self._rows else None

    def append(self, seq: int, message: ModelMessage) -> None:
        """Add the newest row."""
        self._view = None
        self._rows.append((seq, message))
        if message.role == "tool":
            # Only a result for a call the last group's head made belongs to it; any other
            # result is an orphan and joins no group.
            if self._groups and message.tool_call_id in self._groups[-1].calls:
                last = self._groups[-1]
                last.add(seq, message)
                for _ in self._built[-1].messages:
                    self._flat.pop()
                built = self._built[-1] = last.group(_NOTHING)
                self._flat.extend(built.messages)
            return
        group = _Open(seq, message)
        self._groups.append(group)
        built = group.group(_NOTHING)
        self._built.append(built)
        self._flat.extend(built.messages)

    def popleft(self) -> tuple[int, ModelMessage, Group | None]:
        """Drop the oldest row; a group that loses its head goes with it (its results are
        orphans now). Returns the row and that group (None when the row headed none)."""
        self._view = None
        seq, message = self._rows.popleft()
        gone = None
        if self._groups and self._groups[0].seqs[0] == seq:
            self._groups.popleft()
            gone = self._built.popleft()
            for _ in gone.messages:
                self._flat.popleft()
            self._dropped += len(gone.messages)
        return seq, message, gone

    def groups(self, answered_now: frozenset[str] = _NOTHING) -> list[Group]:
        """The groups, oldest first."""
        return list(self.view(answered_now).groups)

    def view(self, answered_now: frozenset[str] = _NOTHING) -> HistoryView:
        """The groups and their messages; the same object until a row comes or goes."""
        view = self._view
        if view is not None and view.answered_now == answered_now:
            return view
        if not answered_now:
            last = len(self._built[-1].messages) if self._built else 0
            view = HistoryView(
                answered_now,
                tuple(self._built),
                tuple(self._flat),
                self._token,
                self._dropped,
                self._dropped + len(self._flat) - last,
            )
        else:
            groups = tuple(group.group(answered_now) for group in self._groups)
            messages = tuple(m for group in groups for m in group.messages)
            view = HistoryView(answered_now, groups, messages)
        self._view = view
        return view


def pruned_stub(message: ModelMessage) -> str:
    return (
        f"[pruned: the result of {message.name or 'a tool'} ({len(message.content):,} characters)]"
    )


def prune_results(
    groups: Sequence[Group],
    *,
    protect_tail: int,
    prune: Callable[[Group], tuple[Group, int]] | None = None,
) -> tuple[list[Group], int]:
    """Replace long tool results outside the protected tail by stubs; returns (groups, count).

    The cheapest reduction: the call stays, the model learns what was there
    and how large it was, and the group stays whole. ``prune`` is
    ``prune_group`` or what keeps its answers (``SessionWindow.pruned``).
    """
    prune = prune or prune_group
    cut = max(0, len(groups) - protect_tail)
    pruned = 0
    out: list[Group] = []
    for index, group in enumerate(groups):
        if index >= cut:
            out.append(group)
            continue
        stubbed, count = prune(group)
        out.append(stubbed)
        pruned += count
    return out, pruned


def prune_group(group: Group) -> tuple[Group, int]:
    """``group`` with its long tool results as stubs, and how many; ``group`` when none is."""
    messages = tuple(
        replace(message, content=pruned_stub(message))
        if message.role == "tool" and len(message.content) > PRUNE_MIN_CHARS
        else message
        for message in group.messages
    )
    count = sum(a is not b for a, b in zip(messages, group.messages, strict=True))
    return (Group(messages, group.seqs), count) if count else (group, 0)


def cut_current(
    messages: Sequence[ModelMessage], estimate: Estimator, room: int
) -> tuple[tuple[ModelMessage, ...], int] | None:
    """The current turn's messages cut to fit ``room`` tokens, and their tokens; None when
    they cannot fit even cut to their floor (``at_floor``).

    The step's own results cannot be pruned to stubs like history's: the model
    asked for them now. Each keeps its beginning, every result cut by the same
    share, and says how much it shows, so the model can ask for less at once
    (a narrower read, fewer calls) instead of the turn failing after its
    effects ran. Only when the results at their floor still do not fit is the
    turn's assistant text cut too, the same way: the model wrote it, so its
    beginning recalls the rest, while a result is what the model asked to
    read. The calls and the user's input are never cut. Whenever the floors
    fit, the messages fit: what ``kept_calls`` counts on before the calls run.
    """
    results = _floors(messages, "tool", estimate)
    if results:
        fitted = _cut_by_share(messages, results, estimate, room)
        if fitted is not None:
            return fitted
    texts = _floors(messages, "assistant", estimate)
    if not texts:
        return None
    floored = tuple(results[i][0] if i in results else m for i, m in enumerate(messages))
    return _cut_by_share(floored, texts, estimate, room)


def _floors(
    messages: Sequence[ModelMessage], role: str, estimate: Estimator
) -> dict[int, tuple[ModelMessage, int]]:
    """``role``'s messages over their floor, by position: each at its floor and the
    characters it keeps there."""
    found: dict[int, tuple[ModelMessage, int]] = {}
    for index, message in enumerate(messages):
        if message.role == role:
            floor = _floor(message, estimate)
            if floor is not None:
                found[index] = floor
    return found


def _cut_by_share(
    messages: Sequence[ModelMessage],
    floors: dict[int, tuple[ModelMessage, int]],
    estimate: Estimator,
    room: int,
) -> tuple[tuple[ModelMessage, ...], int] | None:
    """``messages`` with the texts at ``floors``' positions cut by one share to fit
    ``room``; None when even their floors do not fit."""
    floored = tuple(floors[i][0] if i in floors else m for i, m in enumerate(messages))
    least = sum(estimate.message(m) for m in floored)
    if least > room:
        return None  # cutting every text to its floor would not make room
    # What cutting a message's text cannot take away: its framing and its calls.
    kept = {i: estimate.message(replace(messages[i], content="")) for i in floors}
    share = 1.0
    for _ in range(_CUT_ROUNDS):
        out = list(messages)
        for i, (floor, chars) in floors.items():
            content = messages[i].content
            keep = int(len(content) * share)
            if keep <= chars:
                out[i] = floor
            elif keep < len(content):
                out[i] = replace(messages[i], content=_cut_text(content, keep))
        tokens = sum(estimate.message(m) for m in out)
        if tokens <= room:
            return tuple(out), tokens
        texts = sum(estimate.message(out[i]) - kept[i] for i in floors)
        over = tokens - room
        share *= max(0.05, (texts - over) / max(1, texts) * 0.9)
    # Shares the estimate does not follow closely (dense text amid plain): the floors fit.
    return floored, least


def floor_tokens(estimate: Estimator) -> int:
    """The most tokens ``estimate`` counts for a text at its floor: ``CUT_MIN_TOKENS``, or
    ``CUT_STUB``'s count when an estimator counts that higher."""
    return max(CUT_MIN_TOKENS, estimate.text(CUT_STUB))


def at_floor(message: ModelMessage, estimate: Estimator) -> ModelMessage:
    """``message`` as small as ``cut_current`` could make it: a tool result's or an
    assistant message's text cut to the beginning that, with its note, ``estimate``
    counts at most ``floor_tokens`` (else ``CUT_STUB``); any other message as it is.

    So a message at its floor takes at most ``floor_tokens`` beyond what an empty
    text would, whatever it holds (Chinese, emoji, symbols)."""
    floor = _floor(message, estimate)
    return message if floor is None else floor[0]


def _floor(message: ModelMessage, estimate: Estimator) -> tuple[ModelMessage, int] | None:
    """``message`` at its floor and the characters it keeps (0: the stub); None when it
    is at its floor as it is."""
    if message.role not in ("tool", "assistant"):
        return None
    limit = floor_tokens(estimate)
    content = message.content
    if estimate.text(content) <= limit:
        return None
    keep = _floor_chars(content, estimate, limit)
    return replace(message, content=_cut_text(content, keep) if keep else CUT_STUB), keep


def _floor_chars(content: str, estimate: Estimator, limit: int) -> int:
    """The most characters of ``content`` that, cut with the note, ``estimate`` counts at
    ``limit`` or fewer; 0 when not even one does.

    A search, not a ratio: how many characters a token holds differs by script
    and estimator. Each probe counts only the beginning it would keep.
    """

    def fits(keep: int) -> bool:
        return estimate.text(_cut_text(content, keep)) <= limit

    if not fits(1):
        return 0
    low, high = 1, len(content)  # ``low`` fits; the whole text does not
    probe = 4 * limit  # about where prose stops fitting
    while probe < high and fits(probe):
        low, probe = probe, probe * 2
    high = min(high, probe)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _cut_text(content: str, keep: int) -> str:
    return (
        f"{content[:keep]}\n[cut to fit the model's context window: the first {keep:,} of "
        f"{len(content):,} characters]"
    )


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
    sizes: Sequence[int] | None = None,
) -> Fit:
    """Keep the protected head and tail, then as many middle groups as fit, newest first.

    If even the protected ends do not fit, the head goes first, then the
    oldest tail groups: the newest context is the last to go. ``sizes`` are
    the groups' estimates when the caller has them already.
    """
    if sizes is None:
        sizes = [sum(estimate.message(m) for m in group.messages) for group in groups]
    total = sum(sizes)
    if total <= budget:
        return Fit(tuple(groups), total, 0, False)
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
