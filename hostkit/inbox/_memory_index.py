"""The in-memory inbox's indexes: rows by due time per channel instance, claims by owner.

The SQLite adapter reads due rows from an index on (channel instance, due
time); this is its in-memory counterpart, so a claim costs O(channels +
claimed · log rows) rather than a scan of every row, and an embedder can keep
many messages in it. Entries are never updated in place: a row whose due time
changes gets a new entry with a new version, and entries whose version is no
longer the row's are dropped when they reach the top of the heap (or when a
heap holds far more stale entries than live rows). ``OwnerIndex`` is the
counterpart of the SQLite adapter's walk over claimed rows by owner: it finds a
dead owner's claims without a scan of every row. ``ConversationIndex`` is the
counterpart of its per-conversation probe: only the oldest waiting or leased row
of a conversation may be claimed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

__all__ = ["ConversationIndex", "DueEntry", "DueIndex", "OwnerIndex"]

# (due_at, accept sequence, inbound id, row version)
DueEntry = tuple[float, int, str, int]
IsLive = Callable[[DueEntry], bool]
# (channel instance, conversation key)
Conversation = tuple[str, str]
# A heap is rebuilt from its live entries when it is this much larger than needed.
_SLACK = 64


class DueIndex:
    """Heaps of waiting/leased rows per channel instance, and who was served when."""

    def __init__(self, is_live: IsLive) -> None:
        self._is_live = is_live
        self._heaps: dict[str, list[DueEntry]] = {}
        # The serve counter stamped on an instance each time one of its rows is claimed.
        self._served: dict[str, int] = {}
        self._counter = 0

    def push(self, channel: str, entry: DueEntry, *, active: int) -> None:
        """Index ``entry``; ``active`` is how many rows of ``channel`` may be due at all."""
        heap = self._heaps.setdefault(channel, [])
        heapq.heappush(heap, entry)
        if len(heap) > 2 * active + _SLACK:
            heap[:] = [item for item in heap if self._is_live(item)]
            heapq.heapify(heap)

    def head(self, channel: str) -> DueEntry | None:
        """The live entry of ``channel`` due first, or None."""
        heap = self._heaps.get(channel)
        while heap:
            if self._is_live(heap[0]):
                return heap[0]
            heapq.heappop(heap)
        if heap is not None:
            del self._heaps[channel]
        return None

    def rounds(self, now: float) -> Iterator[str]:
        """Channel instances in claim order: least recently served first, ties by id.

        After each yielded instance the caller either served it (``serve``),
        which sends it to the back, or changed its head row; either way it is
        offered again while it still has a due row. One row per instance per
        round follows from the order alone.
        """
        order = [
            (self._served.get(channel, 0), channel)
            for channel in list(self._heaps)
            if (entry := self.head(channel)) is not None and entry[0] <= now
        ]
        heapq.heapify(order)
        while order:
            _, channel = heapq.heappop(order)
            yield channel
            entry = self.head(channel)
            if entry is not None and entry[0] <= now:
                heapq.heappush(order, (self._served.get(channel, 0), channel))

    def serve(self, channel: str) -> None:
        """Stamp ``channel`` as served now (monotonically increasing counter)."""
        self._counter += 1
        self._served[channel] = self._counter


class OwnerIndex:
    """The inbound ids of ``claimed`` rows, per claim owner."""

    def __init__(self) -> None:
        self._claims: dict[str, set[str]] = {}

    def move(self, inbound_id: str, old: str | None, new: str | None) -> None:
        """The row's claim passed from owner ``old`` to ``new`` (None: not claimed)."""
        if old == new:
            return
        if old is not None:
            held = self._claims.get(old)
            if held is not None:
                held.discard(inbound_id)
                if not held:
                    del self._claims[old]
        if new is not None:
            self._claims.setdefault(new, set()).add(inbound_id)

    def owners(self, after: str | None, limit: int) -> tuple[str, ...]:
        """Owners holding a claim, in text order, after ``after``; at most ``limit``."""
        listed = sorted(owner for owner in self._claims if after is None or owner > after)
        return tuple(listed[:limit])

    def claims(self, owner: str) -> tuple[str, ...]:
        """The inbound ids ``owner`` holds a claim on."""
        return tuple(sorted(self._claims.get(owner, ())))


class ConversationIndex:
    """The waiting or leased rows of each conversation, in accept order.

    A row joins when it becomes active (accepted, requeued); rows that left
    (completed, dead-lettered) are dropped when they reach the front, so
    ``first`` costs O(log rows) amortised and nothing is scanned.
    """

    def __init__(self, is_active: Callable[[str], bool]) -> None:
        self._is_active = is_active
        self._rows: dict[Conversation, list[tuple[int, str]]] = {}

    def join(self, conversation: Conversation, seq: int, inbound_id: str) -> None:
        heapq.heappush(self._rows.setdefault(conversation, []), (seq, inbound_id))

    def first(self, conversation: Conversation) -> str | None:
        """The inbound id of the conversation's oldest active row, or None."""
        rows = self._rows.get(conversation)
        while rows:
            if self._is_active(rows[0][1]):
                return rows[0][1]
            heapq.heappop(rows)
        if rows is not None:
            del self._rows[conversation]
        return None
