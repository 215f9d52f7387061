"""Clause: a queue worker whose claims fail at every poll logs the streak, not every poll.

While the store is unusable (a replaced database, a full disk) the inbox
worker's and the delivery runtime's claims fail once a second; a line each
time grew the log by about 170,000 lines a day. The first failure is logged
at once, a different one when it comes, the same one again at most every
``REPEAT_EVERY_S`` with how often it happened meanwhile, and the end of the
streak once.
"""

from __future__ import annotations

import logging

import pytest

import hostkit._streaks as streaks
from hostkit._streaks import REPEAT_EVERY_S, FailureStreak

LOGGER = "hostkit.test.streaks"


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_a_streak_of_one_failure_is_logged_once_then_again_with_its_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(streaks.time, "monotonic", lambda: now[0])
    caplog.set_level(logging.INFO, logger=LOGGER)
    streak = FailureStreak(logging.getLogger(LOGGER), "inbox claim")
    for _ in range(50):
        streak.failed("the database file was replaced")
        now[0] += 1.0
    assert lines(caplog) == [
        (logging.WARNING, "inbox claim failed: the database file was replaced")
    ]
    now[0] += REPEAT_EVERY_S
    streak.failed("the database file was replaced")
    streak.failed("disk full")
    streak.succeeded()
    streak.succeeded()
    assert lines(caplog)[1:] == [
        (
            logging.WARNING,
            "inbox claim failed: the database file was replaced (49 more times since)",
        ),
        (logging.WARNING, "inbox claim failed: disk full"),
        (logging.INFO, "inbox claim works again"),
    ]
