"""Outbound delivery: the outbox drained to chat platforms, with retries and dead letters.

``DeliveryRuntime`` owns the policy (``DeliveryPolicy``) over the store's
``DeliveryStore``; ``OutboundChannel`` is the adapter seam, with the generic
signed webhook, Slack ``chat.postMessage`` and Telegram ``sendMessage``
adapters here (docs/delivery.md). The adapters and their HTTP client load on
first use: a Host without outbound channels never imports httpx for them.
"""

import typing

from hostkit import _lazy
from hostkit.delivery._channel import ChannelLookup, ChannelsClosing, OutboundChannel
from hostkit.delivery._policy import DeliveryPolicy
from hostkit.delivery._runtime import DeliveryRuntime

if typing.TYPE_CHECKING:
    from hostkit.delivery._http import SharedClient
    from hostkit.delivery._slack import SlackChannel
    from hostkit.delivery._telegram import TelegramChannel
    from hostkit.delivery._webhook import WebhookChannel

# The names that load on first use, each with its module.
_ADAPTERS = {
    "SharedClient": "hostkit.delivery._http",
    "SlackChannel": "hostkit.delivery._slack",
    "TelegramChannel": "hostkit.delivery._telegram",
    "WebhookChannel": "hostkit.delivery._webhook",
}

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


__getattr__, __dir__ = _lazy.attributes(__name__, _ADAPTERS)
