"""The operator's view of the ChannelInbox: counts by state per channel, and the rows themselves.

Built from ``ChannelInbox.counts()`` and ``ChannelInbox.records()`` only, so
it reads the same on every adapter (SQLite, in-memory) and never sees a
payload: an ``InboundRecord`` carries ids, state, attempts, requeues and the
last failure's code and redacted, bounded message. The inbox's reads take no
scope (inbound rows belong to no session yet); the front ends that show them
get an audited operator scope first, as the CLI and the notebook do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from hostkit.errors import InvalidValue
from hostkit.inbox import ChannelInbox
from hostkit.inspect._source import Source, bounded
from hostkit.store import MAX_INBOX_LIST, RuntimeStore
from hostkit.types import ChannelCounts, InboundRecord, InboundState, is_channel_id

__all__ = [
    "INBOX_STATES",
    "InboxCounts",
    "InboxRows",
    "InboxView",
    "inbox_counts",
    "inbox_of",
    "inbox_rows",
    "inbox_state",
    "inbox_view",
]

INBOX_STATES: tuple[str, ...] = get_args(InboundState)
# A channel instance id, as ``InboundEnvelope`` requires it: no other id can have rows.


def inbox_of(source: Source) -> ChannelInbox:
    """The Host's own inbox, or one over a bare store (the one place front ends get it from)."""
    if isinstance(source, RuntimeStore):
        return ChannelInbox.on_store(source)
    return source.inbox


def _channel_id(value: object) -> str:
    """``value`` if it can be a channel instance id, else ``InvalidValue`` (never echoing it)."""
    if not is_channel_id(value):
        raise InvalidValue(
            "a channel instance id is 1 to 64 characters: a-z, 0-9, '_', '-', '.' "
            "(starting with a letter or digit)"
        )
    return value


def inbox_state(value: object) -> InboundState:
    """``value`` if it names an inbound state, else ``InvalidValue`` listing them."""
    if value not in INBOX_STATES:
        raise InvalidValue(f"state must be one of {', '.join(INBOX_STATES)}")
    return value  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class InboxCounts:
    """Rows per state for each channel instance that has any, ordered by channel instance."""

    channels: tuple[ChannelCounts, ...]

    @property
    def totals(self) -> ChannelCounts:
        """Every channel instance together (``channel_instance_id`` is ``"all"``)."""
        return ChannelCounts(
            "all",
            ready=sum(c.ready for c in self.channels),
            claimed=sum(c.claimed for c in self.channels),
            completed=sum(c.completed for c in self.channels),
            dead_lettered=sum(c.dead_lettered for c in self.channels),
            unanswered=sum(c.unanswered for c in self.channels),
        )

    def of(self, channel_instance_id: str) -> ChannelCounts:
        """One channel instance's counts (all zero when it has no rows)."""
        found = (c for c in self.channels if c.channel_instance_id == channel_instance_id)
        return next(found, ChannelCounts(channel_instance_id))


@dataclass(frozen=True, slots=True)
class InboxRows:
    """Inbound rows, newest accepted first, as filtered; ``truncated`` when there are more."""

    records: tuple[InboundRecord, ...]
    state: InboundState | None
    channel_instance_id: str | None
    truncated: bool


@dataclass(frozen=True, slots=True)
class InboxView:
    """What the InboxMonitor shows: the counts and the newest dead letters."""

    counts: InboxCounts
    dead_letters: InboxRows


async def inbox_counts(inbox: ChannelInbox) -> InboxCounts:
    """Through ``inbox.counts()``."""
    return InboxCounts(tuple(await inbox.counts()))


async def inbox_rows(
    inbox: ChannelInbox,
    *,
    state: str | None = None,
    channel_instance_id: str | None = None,
    limit: int = 50,
) -> InboxRows:
    """Through ``inbox.records()`` (``limit`` below ``MAX_INBOX_LIST``; bad filters raise)."""
    bounded("limit", limit, MAX_INBOX_LIST - 1)
    chosen = None if state is None else inbox_state(state)
    if channel_instance_id is not None:
        _channel_id(channel_instance_id)
    found = await inbox.records(
        state=chosen, channel_instance_id=channel_instance_id, limit=limit + 1
    )
    return InboxRows(tuple(found[:limit]), chosen, channel_instance_id, len(found) > limit)


async def inbox_view(inbox: ChannelInbox, *, dead_letters: int = 50) -> InboxView:
    """The counts and the ``dead_letters`` newest dead-lettered rows."""
    return InboxView(
        await inbox_counts(inbox),
        await inbox_rows(inbox, state="dead_lettered", limit=dead_letters),
    )
