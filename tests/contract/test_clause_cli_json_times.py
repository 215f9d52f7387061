"""CLI clause: a record's instants read as ISO-8601 UTC in ``--json``; data is never rewritten.

A record's own time fields (``at``, ``*_at``, ``*_until``, ``since``) kept as
wall-clock seconds are written as the store writes its other instants. A
mapping inside a record (an approval's view, a tool's arguments, an audit
view) is data a model or a tool chose: ``{"at": 5, "delay_until": 30}`` stays
numbers there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hostkit.cli._common import _plain

NOW = 1_800_000_000.25


@dataclass
class Record:
    due_at: float | None
    created_at: str
    failing_until: float
    retried_at: bool
    view: dict[str, Any] = field(default_factory=dict)


def test_record_instants_are_iso_and_nested_data_is_kept() -> None:
    shown = _plain(
        Record(
            due_at=NOW,
            created_at="2027-01-15T08:00:00.250Z",
            failing_until=float("inf"),
            retried_at=True,
            view={"arguments": {"at": 5, "delay_until": 30}, "expires_at": NOW},
        )
    )
    assert shown == {
        "due_at": "2027-01-15T08:00:00.250Z",
        "created_at": "2027-01-15T08:00:00.250Z",
        "failing_until": float("inf"),  # no date holds it: kept
        "retried_at": True,
        "view": {"arguments": {"at": 5, "delay_until": 30}, "expires_at": NOW},
    }


def test_a_missing_instant_stays_null_and_any_finite_one_is_a_date() -> None:
    assert _plain(Record(None, "", 1.0, False)) == {
        "due_at": None,
        "created_at": "",
        "failing_until": "1970-01-01T00:00:01.000Z",
        "retried_at": False,
        "view": {},
    }
