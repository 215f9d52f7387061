"""Outbound delivery: the outbox drained to chat platforms, with retries and dead letters.

``DeliveryRuntime`` owns the policy (``DeliveryPolicy``) over the store's
``DeliveryStore``; ``OutboundChannel`` is the adapter seam, with the generic
signed webhook, Slack ``chat.postMessage`` and Telegram ``sendMessage``
adapters here (docs/delivery.md).
"""

from hostkit.delivery._channel import ChannelLookup, ChannelsClosing, OutboundChannel
from hostkit.delivery._http import SharedClient
from hostkit.delivery._policy import DeliveryPolicy
from hostkit.delivery._runtime import DeliveryRuntime
from hostkit.delivery._slack import SlackChannel
from hostkit.delivery._telegram import TelegramChannel
from hostkit.delivery._webhook import WebhookChannel

__all__ = [
    "ChannelLookup",
    "ChannelsClosing",
    "DeliveryPolicy",
    "DeliveryRuntime",
    "OutboundChannel",
    "SharedClient",
    "SlackChannel",
    "TelegramChannel",
    "WebhookChannel",
]
