"""Keep bot tokens out of httpx's request log lines.

Telegram puts the bot token in the URL path (``/bot<token>/getUpdates``), and
httpx logs every request URL at INFO on the ``httpx`` logger. This filter
rewrites such lines before any handler sees them; it is installed once, by
the first transport that sends a token in a URL.
"""

from __future__ import annotations

import logging
import re

__all__ = ["hide_url_tokens"]

_BOT_PATH = re.compile(r"/bot[^/\s\"']+/")


class _HideBotTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "/bot" in text:
            record.msg = _BOT_PATH.sub("/bot[redacted]/", text)
            record.args = None
        return True


def hide_url_tokens() -> None:
    """Install the filter on the ``httpx`` logger (idempotent)."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, _HideBotTokens) for f in logger.filters):
        logger.addFilter(_HideBotTokens())
