"""A failure that repeats at every poll, logged once per streak instead of every time.

A queue worker polls every second or so; while the store is unusable (a
replaced database, a full disk) each poll fails the same way, and a line
per poll fills the log (about 170,000 lines a day). The first failure of a
streak is logged at once, a different one when it comes, the same one again
at most every ``REPEAT_EVERY_S`` with how often it happened, and the end of
the streak once, at info.
"""

from __future__ import annotations

import logging
import time

__all__ = ["REPEAT_EVERY_S", "FailureStreak"]

REPEAT_EVERY_S = 300.0


class FailureStreak:
    """``failed(text)`` at each failure, ``succeeded()`` at each success, of one action."""

    def __init__(self, log: logging.Logger, action: str) -> None:
        self._log = log
        self._action = action
        self._text: str | None = None
        self._since_logged = 0
        self._logged_at = 0.0

    def failed(self, text: str) -> None:
        now = time.monotonic()
        if text != self._text or now - self._logged_at >= REPEAT_EVERY_S:
            again = f" ({self._since_logged} more times since)" if self._since_logged else ""
            self._log.warning("%s failed: %s%s", self._action, text, again)
            self._text, self._since_logged, self._logged_at = text, 0, now
        else:
            self._since_logged += 1

    def succeeded(self) -> None:
        if self._text is not None:
            self._log.info("%s works again", self._action)
            self._text, self._since_logged = None, 0
