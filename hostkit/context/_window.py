"""A session's retained window as the ContextManager keeps it between reads.

The transcript is append-only and every new message's seq follows the
committed ones, so a window read once stays true: later reads only need the
rows after the newest seq it holds, under the same cutoff. The window keeps
the decoded messages, their groups (``History``), the groups with their old
results pruned to stubs, their token counts per estimator (``SizeMemo``) and
the system messages built around them, so a step costs what is new since the
last one, not what the window holds. What leaves the window leaves its memos.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from hostkit.context._assemble import Group, Head, History, SizeMemo, prune_group
from hostkit.context._estimate import arguments_text
from hostkit.store import Calibration, ContextState
from hostkit.types import ModelMessage

__all__ = ["SessionWindow"]

# Row as the window holds it: seq, message, the turn that wrote it.
_Row = tuple[int, ModelMessage, str | None]
# Estimators one window keeps counts for (a session rarely switches models).
_MAX_MEMOS = 4
# System messages one window keeps (instructions, bootstrap, summary, contributions).
_MAX_HEADS = 64
# What one held message costs beyond its text, in bytes: the message and its row, turn id,
# group, view and count entries. Measured with tracemalloc over a full cache of windows of
# short tool groups (tests/contract/test_context_window.py::
# test_the_window_cache_bound_is_the_memory_it_takes): about 1,400 bytes, rounded up.
_MESSAGE_OVERHEAD = 1_536
# What one window costs whatever it holds (its queues, memos, head messages): about 9 KB.
_WINDOW_OVERHEAD = 9_216


def _text_bytes(text: str) -> int:
    """About the memory ``text`` takes: its length for ASCII, its UTF-8 length otherwise
    (two to four bytes a character, as Python stores CJK or emoji, or more).

    The same for a text whenever it is asked, as the window's count needs (added when a
    row comes, taken off when it goes): ``sys.getsizeof`` grows once something (a
    tokenizer's binding) has asked the string for its UTF-8 form, which it then keeps.
    """
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _held_chars(message: ModelMessage) -> int:
    """About how much memory ``message`` takes in a window, in bytes (a character of ASCII
    text each)."""
    size = _MESSAGE_OVERHEAD + _text_bytes(message.content)
    for call in message.tool_calls:
        # ASCII-escaped JSON: a character outside ASCII counts six, above what it takes.
        size += _text_bytes(call.name) + len(arguments_text(call))
    for part in message.attachments:
        size += _MESSAGE_OVERHEAD + (len(part.data) if part.data is not None else 0)
    return size


class SessionWindow:
    """One session's window: the rows after its cutoff that ``prepare()`` of ``turn_id`` uses.

    ``history`` holds the rows that are not ``turn_id``'s own, at most
    ``limit`` (the newest), grouped; ``own`` holds ``turn_id``'s rows, kept
    for the turns after it. Together they are every row from the oldest one
    held up to ``last_seq``. ``older`` says whether rows before them exist
    (after the cutoff). ``exact`` is whether ``history`` is what a full read
    for ``turn_id`` would give.
    """

    __slots__ = (
        "_rows_chars",
        "_turns",
        "asked",
        "bootstrap",
        "bootstrap_looked",
        "calibration",
        "current",
        "cutoff",
        "heads",
        "history",
        "last_head",
        "last_seq",
        "limit",
        "memos",
        "older",
        "own",
        "pruned_groups",
        "summary",
        "turn_id",
    )

    def __init__(self, state: ContextState, limit: int, previous: SessionWindow | None = None):
        """A window from a full read (``state.after`` is None) for ``state.turn_id``."""
        self.limit = limit
        self.cutoff = state.cutoff
        self.summary = state.summary
        self.bootstrap: str | None = state.bootstrap
        # Whether the bootstrap source was asked for this window (it found nothing when
        # ``bootstrap`` is still None): asked once, not at every turn the window serves.
        self.bootstrap_looked: bool = previous is not None and previous.bootstrap_looked
        self.calibration: Calibration | None = state.calibration
        # The head layers last built without a room limit, and what they were built from.
        self.last_head: tuple[tuple[object, ...], Head] | None = None
        # The turn this window was read for: its later steps need no read (see ContextManager).
        self.current: str | None = None
        # What does not depend on the rows carries over from the window this one replaces.
        self.memos: dict[str, SizeMemo] = previous.memos if previous is not None else {}
        self.heads: dict[str, tuple[str, ModelMessage]] = (
            previous.heads if previous is not None else {}
        )
        self.last_seq: int | None = None
        self.turn_id = state.turn_id
        self.history = History()
        # Each held group's pruned form (``pruned``) by the seq of its head, and the count.
        self.pruned_groups: dict[int, tuple[Group, Group, int]] = {}
        # The messages ``turn_id``'s last step asked with: counted, and dead once it ends
        # (its rows come back read from the store, new objects, which take their counts).
        self.asked: tuple[ModelMessage, ...] = ()
        self._turns: deque[str | None] = deque()
        self.own: list[_Row] = []
        self._rows_chars = 0
        self.older = state.older
        if previous is not None:
            # A full read decodes every row anew: what the old window held is never counted again.
            messages, groups = previous._holding()
            previous._forget([*messages, *previous.asked], groups)
        self._load(((r.seq, r.message, r.turn_id) for r in state.rows), state.turn_id, state.older)

    @property
    def chars(self) -> int:
        """About how much memory the window holds, in bytes: what a cache bounds."""
        text = _text_bytes(self.bootstrap or "") + _text_bytes(self.summary or "")
        return _WINDOW_OVERHEAD + self._rows_chars + text

    @property
    def exact(self) -> bool:
        return len(self.history) >= self.limit or not self.older

    def mark(self) -> tuple[int | None, int | None]:
        """(after_seq, after_cutoff) for the next read: what this window already holds."""
        return self.last_seq, self.cutoff

    def serve(self, turn_id: str) -> None:
        """Make ``history`` the window of ``turn_id``: a new turn's predecessor becomes history."""
        if turn_id == self.turn_id:
            return
        for memo in self.memos.values():
            memo.retire(self.asked)  # its rows, read back at this turn's first step, reuse them
        self.asked = ()
        moved = self.own
        last = self.history.last_seq
        interleaved = bool(moved) and last is not None and moved[0][0] < last
        if interleaved or turn_id in self._turns:
            # Rows of the two turns interleave with others (rare): regroup what is held.
            rows = sorted(
                [(seq, m, t) for (seq, m), t in zip(self.history.rows, self._turns, strict=True)]
                + moved,
                key=lambda row: row[0],
            )
            self._load(rows, turn_id, self.older)
            return
        self.turn_id = turn_id
        self.own = []
        for row in moved:
            self._place(row)
        self._trim()

    def extend(self, state: ContextState) -> bool:
        """Add what an incremental read (``state.after`` set) found; False if it does not fit.

        It does not fit when the read was made under another cutoff or from a
        seq this window does not reach (another task replaced the window
        meanwhile); the caller then reads in full.
        """
        after = state.after
        if after is None or self.last_seq is None or after > self.last_seq:
            return False
        if state.cutoff != self.cutoff or state.turn_id != self.turn_id:
            return False
        if state.older:
            if after != self.last_seq:
                return False
            # More arrived than one window holds: what was read is the window.
            self._load(((r.seq, r.message, r.turn_id) for r in state.rows), self.turn_id, True)
        else:
            last = self.last_seq
            for row in state.rows:
                if row.seq > last:
                    self._add((row.seq, row.message, row.turn_id))
            self._trim()
        self.summary = state.summary
        self.bootstrap = state.bootstrap
        self.calibration = state.calibration
        return True

    def memo(self, estimator_id: str) -> SizeMemo:
        """The token counts of this window's messages for one estimator."""
        found = self.memos.get(estimator_id)
        if found is None:
            if len(self.memos) >= _MAX_MEMOS:
                self.memos.clear()
            found = self.memos[estimator_id] = SizeMemo(4 * self.limit + 256)
        return found

    def head(self, slot: str, text: str, prefix: str) -> ModelMessage:
        """The system message ``prefix + text`` for ``slot``, the same object while ``text`` is."""
        found = self.heads.get(slot)
        if found is not None and found[0] == text:
            return found[1]
        message = ModelMessage("system", prefix + text)
        if len(self.heads) >= _MAX_HEADS:
            self.heads.clear()
        self.heads[slot] = (text, message)
        return message

    def pruned(self, group: Group) -> tuple[Group, int]:
        """``prune_group(group)``, the same objects while ``group`` is held: counted once."""
        key = group.seqs[0]
        found = self.pruned_groups.get(key)
        if found is not None and found[0] is group:
            return found[1], found[2]
        if found is not None:  # another view's group of the same rows
            self._forget(_stubs(found), (found[1],))
        stubbed, count = prune_group(group)
        if count:
            self.pruned_groups[key] = (group, stubbed, count)
        return stubbed, count

    # -- rows ------------------------------------------------------------------------

    def _holding(self) -> tuple[list[ModelMessage], list[Group]]:
        """The messages and groups held, stubs and pruned groups included."""
        messages = [message for _, message in self.history.rows]
        messages += [row[1] for row in self.own]
        groups = list(self.history.view().groups)
        for found in self.pruned_groups.values():
            messages += _stubs(found)
            groups.append(found[1])
        return messages, groups

    def _forget(self, messages: Sequence[ModelMessage], groups: Sequence[Group]) -> None:
        """Drop the counts of what left the window: nothing asks for them again."""
        for memo in self.memos.values():
            for message in messages:
                memo.forget(message)
            for group in groups:
                memo.forget_group(group)

    def _load(self, rows: Iterable[_Row], turn_id: str, older: bool) -> None:
        rows = list(rows)
        held, groups = self._holding()
        kept = {id(row[1]) for row in rows}
        # Regrouped rows are the same messages (their counts stay); the groups are new.
        self._forget([m for m in held if id(m) not in kept], groups)
        self.pruned_groups = {}
        self.turn_id = turn_id
        self.history = History()
        self._turns = deque()
        self.own = []
        self._rows_chars = 0
        self.older = older
        for row in rows:
            self._add(row)
        self._trim()

    def _add(self, row: _Row) -> None:
        self._rows_chars += _held_chars(row[1])
        self._place(row)

    def _place(self, row: _Row) -> None:
        """Put a row already counted in ``chars`` where it belongs: own or history."""
        seq, message, turn_id = row
        if turn_id == self.turn_id:
            self.own.append(row)
        else:
            self.history.append(seq, message)
            self._turns.append(turn_id)
        if self.last_seq is None or seq > self.last_seq:
            self.last_seq = seq

    def _trim(self) -> None:
        while len(self.history) > self.limit:
            seq, message, group = self.history.popleft()
            self._rows_chars -= _held_chars(message)
            self._turns.popleft()
            self.older = True
            messages, groups = [message], [] if group is None else [group]
            found = self.pruned_groups.pop(seq, None)
            if found is not None:
                messages += _stubs(found)
                groups.append(found[1])
            self._forget(messages, groups)


def _stubs(pruned: tuple[Group, Group, int]) -> list[ModelMessage]:
    """The stubs a pruned group holds in place of its group's results."""
    group, stubbed, _ = pruned
    return [m for m, o in zip(stubbed.messages, group.messages, strict=True) if m is not o]
