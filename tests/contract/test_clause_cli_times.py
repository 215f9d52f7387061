"""Clause: every time the CLI prints for a person is UTC, marked ``Z``, whatever ``TZ`` says.

Listings used to mix UTC (sessions, approvals, memory, effects audit) with
unlabelled local time (inbox, delivery, mcp list): under ``TZ=Asia/Tokyo`` one
table said 17:29 and the next 02:29. Each command now shows the instant
``--json`` writes (``2026-12-01T17:29:03.000Z``) as ``2026-12-01 17:29Z``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest

from hostkit.cli._clock import shown_clock, shown_time
from hostkit.cli._common import iso_instant
from hostkit.cli._core_render import stamp
from hostkit.cli._delivery import _clock as delivery_next
from hostkit.cli._inbox import _clock as inbox_due
from hostkit.cli._inbox import _when as inbox_when
from hostkit.cli._mcp import state_text
from hostkit.cli._render import short_time
from hostkit.inspect import McpServerRow

# 2026-12-01T17:29:03Z: 02:29 on the 2nd in Tokyo.
AT = 1_796_146_143.0


@pytest.fixture(autouse=True)
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_every_command_shows_the_same_instant_in_utc_marked_z() -> None:
    assert iso_instant(AT) == "2026-12-01T17:29:03.000Z"
    stored = "2026-12-01T17:29:03.000Z"
    failing = cast(McpServerRow, SimpleNamespace(state="failing", failing_until=AT))
    assert short_time(stored) == "2026-12-01 17:29Z"  # sessions, approvals, memory, audit
    assert stamp(AT) == "2026-12-01 17:29Z"  # core status and log
    assert inbox_when(AT) == "2026-12-01 17:29:03Z"  # inbox show
    assert inbox_due(AT) == "17:29:03Z"  # inbox list
    assert delivery_next(AT) == "17:29:03Z"  # delivery list
    assert state_text(failing) == "failing until 17:29:03Z"  # mcp list


def test_a_stored_time_with_an_offset_is_shown_in_utc_and_nothing_is_guessed() -> None:
    assert shown_time("2026-12-02T02:29:03+09:00") == "2026-12-01 17:29Z"
    assert shown_time(None) == shown_clock(None) == ""
    assert shown_time("not a time\x1b[2J") == "not a time\\x1b[2J"
    assert shown_time(float("nan")) == "nan"
