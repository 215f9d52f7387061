"""Inbound channel transports: platform webhooks and polling into the ChannelInbox.

``ingress_app`` is the Starlette app ``hostkit serve`` runs under uvicorn:
``POST /channels/<id>`` verifies and parses a generic signed webhook, a Slack
Events API / interactivity request or a Telegram bot update, and answers 200
only after the inbox durably accepted it. ``TelegramPoller`` reads a bot's
``getUpdates`` into the same inbox with a durable cursor. ``sign_webhook`` /
``sign_slack`` produce the signature headers a sender (or a test) attaches.
Outbound delivery is ``hostkit.delivery``'s. ``ingress_app`` and ``TelegramPoller``
load on first use: a process that only signs or checks (delivery, a Host running turns)
does not import Starlette and the inbox's transports.
"""

import typing

from hostkit import _lazy
from hostkit.channels._commands import classify, parse_command
from hostkit.channels._redact_logs import hide_url_tokens
from hostkit.channels._settings import (
    MIN_SIGNING_SECRET,
    ChannelSettings,
    sender_allowed,
    short_secret,
)
from hostkit.channels._slack import sign_slack
from hostkit.channels._webhook import sign_webhook

if typing.TYPE_CHECKING:
    from hostkit.channels._app import ingress_app
    from hostkit.channels._polling import TelegramPoller

# The names that load on first use, each with its module.
_TRANSPORTS = {
    "TelegramPoller": "hostkit.channels._polling",
    "ingress_app": "hostkit.channels._app",
}

__all__ = [
    "MIN_SIGNING_SECRET",
    "ChannelSettings",
    "TelegramPoller",
    "classify",
    "hide_url_tokens",
    "ingress_app",
    "parse_command",
    "sender_allowed",
    "short_secret",
    "sign_slack",
    "sign_webhook",
]


__getattr__, __dir__ = _lazy.attributes(__name__, _TRANSPORTS)
