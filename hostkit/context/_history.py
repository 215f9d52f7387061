"""Reading the retained history window and persisting decisions and usage."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hostkit.types import ModelMessage, UsageObservation

__all__ = ["insert_decision", "insert_usage", "read_window"]


def read_window(
    conn: sqlite3.Connection, *, session_id: str, turn_id: str, limit: int
) -> list[ModelMessage]:
    """The newest ``limit`` messages of the session before this turn, oldest first.

    An indexed backwards walk over (session_id, seq): the cost depends on the
    window, not on the length of the transcript.
    """
    rows = conn.execute(
        "SELECT role, content FROM messages WHERE session_id = ? "
        "AND (turn_id IS NULL OR turn_id != ?) ORDER BY seq DESC LIMIT ?",
        [session_id, turn_id, limit],
    ).fetchall()
    return [ModelMessage.from_json(role, json.loads(content)) for role, content in reversed(rows)]


def insert_decision(
    conn: sqlite3.Connection,
    *,
    decision_id: str,
    session_id: str,
    turn_id: str,
    step_id: int,
    kind: str,
    summary: dict[str, Any],
) -> None:
    conn.execute(
        "INSERT INTO context_decisions (decision_id, session_id, turn_id, step_id, kind, summary, "
        "at) VALUES (?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        [decision_id, session_id, turn_id, step_id, kind, json.dumps(summary, sort_keys=True)],
    )


def insert_usage(conn: sqlite3.Connection, observation: UsageObservation) -> bool:
    """Append one observation; False when this decision was already observed (idempotent)."""
    row = conn.execute(
        "SELECT summary FROM context_decisions WHERE decision_id = ?", [observation.decision_id]
    ).fetchone()
    estimated = json.loads(row[0]).get("estimated_input_tokens") if row else None
    usage = observation.usage
    cursor = conn.execute(
        "INSERT OR IGNORE INTO usage_observations (decision_id, session_id, turn_id, step_id, "
        "provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
        "estimated_input_tokens, finish_reason, provider_request_id, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        [
            observation.decision_id,
            observation.session_id,
            observation.turn_id,
            observation.step_id,
            observation.provider,
            observation.model,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            estimated,
            observation.finish_reason,
            observation.provider_request_id,
        ],
    )
    return cursor.rowcount == 1
