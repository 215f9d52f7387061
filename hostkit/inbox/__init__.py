"""ChannelInbox: durable inbound envelopes, dedup, claims, retries, dead letters, workers.

``ChannelInbox`` owns every inbound message from the moment a transport
accepts it until a worker records its business result (or an operator gives
up on its dead letter). Storage adapters implement ``hostkit.store.InboxStore``:
the RuntimeStore's SQLite group (``ChannelInbox.on_store``) and a strict
in-memory one (``ChannelInbox.in_memory``).
"""

from hostkit.inbox._inbox import FRONT_END_CHANNELS, RESERVED_INBOUND_CHANNELS, ChannelInbox
from hostkit.inbox._outage import OutageView, ProviderOutages, outage_checks
from hostkit.inbox._policy import DEDUP_HORIZON_S, RetentionPolicy, RetryPolicy
from hostkit.inbox._retention import RetentionSweeper
from hostkit.inbox._tally import TurnsEnded
from hostkit.inbox._worker import (
    FindTurn,
    InboxWorker,
    ReplyRoute,
    Route,
    RunCommand,
    RunTurn,
    TellUnread,
)

__all__ = [
    "DEDUP_HORIZON_S",
    "FRONT_END_CHANNELS",
    "RESERVED_INBOUND_CHANNELS",
    "ChannelInbox",
    "FindTurn",
    "InboxWorker",
    "OutageView",
    "ProviderOutages",
    "ReplyRoute",
    "RetentionPolicy",
    "RetentionSweeper",
    "RetryPolicy",
    "Route",
    "RunCommand",
    "RunTurn",
    "TellUnread",
    "TurnsEnded",
    "outage_checks",
]
