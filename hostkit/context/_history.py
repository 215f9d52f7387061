"""Reading a session's context state and persisting decisions, usage and calibration."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from hostkit.types import ModelMessage, UsageObservation

__all__ = [
    "Calibration",
    "ContextState",
    "insert_decision",
    "insert_usage",
    "read_state",
    "store_bootstrap",
]

# A calibration ratio stays within these bounds whatever a provider reports.
MIN_RATIO, MAX_RATIO = 0.5, 2.0
# Calibration is a moving average over about this many observations.
MAX_SAMPLES = 20


@dataclass(frozen=True, slots=True)
class Calibration:
    """How far provider-reported input tokens were from the raw estimate, per model."""

    provider: str
    model: str
    estimator: str
    ratio: float
    samples: int


@dataclass(frozen=True, slots=True)
class ContextState:
    """One consistent read of what ``prepare()`` builds from (a single read transaction).

    ``window`` holds (seq, message) pairs after the committed cutoff, oldest
    first, at most the retained window; ``older`` says whether retained
    messages before the window exist.
    """

    summary: str | None
    cutoff: int | None
    window: tuple[tuple[int, ModelMessage], ...]
    older: bool
    bootstrap: str | None
    calibration: Calibration | None


def read_state(
    conn: sqlite3.Connection, *, session_id: str, turn_id: str, limit: int
) -> ContextState:
    """Summary, cutoff, the retained window after it, bootstrap and calibration.

    Every query is an indexed lookup by session (and ``(session_id, seq)``
    for the window): the cost depends on the window, not on the transcript.
    """
    row = conn.execute(
        "SELECT summary, cutoff_seq FROM context_summaries WHERE session_id = ?", [session_id]
    ).fetchone()
    summary, cutoff = (row[0], int(row[1])) if row else (None, None)
    rows = conn.execute(
        "SELECT seq, role, content FROM messages WHERE session_id = ? AND seq > ? "
        "AND (turn_id IS NULL OR turn_id != ?) ORDER BY seq DESC LIMIT ?",
        [session_id, -1 if cutoff is None else cutoff, turn_id, limit + 1],
    ).fetchall()
    older = len(rows) > limit
    window = tuple(
        (int(seq), ModelMessage.from_json(role, json.loads(content)))
        for seq, role, content in reversed(rows[:limit])
    )
    boot = conn.execute(
        "SELECT snapshot FROM context_bootstrap WHERE session_id = ?", [session_id]
    ).fetchone()
    cal = conn.execute(
        "SELECT provider, model, estimator, ratio, samples FROM context_calibration "
        "WHERE session_id = ?",
        [session_id],
    ).fetchone()
    return ContextState(
        summary=summary,
        cutoff=cutoff,
        window=window,
        older=older,
        bootstrap=boot[0] if boot else None,
        calibration=Calibration(*cal) if cal else None,
    )


def store_bootstrap(conn: sqlite3.Connection, session_id: str, snapshot: str, source: str) -> str:
    """Keep the session's first bootstrap snapshot; returns the one that is kept."""
    conn.execute(
        "INSERT OR IGNORE INTO context_bootstrap (session_id, snapshot, source, created_at) "
        "VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        [session_id, snapshot, source],
    )
    return str(
        conn.execute(
            "SELECT snapshot FROM context_bootstrap WHERE session_id = ?", [session_id]
        ).fetchone()[0]
    )


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
    """Append one observation, then advance calibration; False when already observed.

    Both happen in the caller's one transaction, the observation first: the
    calibration never moves for an observation that did not commit.
    """
    row = conn.execute(
        "SELECT summary FROM context_decisions WHERE decision_id = ?", [observation.decision_id]
    ).fetchone()
    decision = json.loads(row[0]) if row else {}
    estimated = decision.get("estimated_input_tokens")
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
    if cursor.rowcount != 1:
        return False
    raw = decision.get("raw_input_tokens")
    reported = usage.input_tokens  # cache buckets are subsets of it (see Usage)
    if raw and reported > 0 and decision.get("estimator"):
        provider = str(decision.get("provider") or observation.provider)
        model = str(decision.get("model") or observation.model)
        key = (observation.session_id, provider, model, str(decision["estimator"]))
        _calibrate(conn, key, reported / raw)
    return True


def _calibrate(conn: sqlite3.Connection, key: tuple[str, str, str, str], sample: float) -> None:
    """Move the session's ratio toward ``sample``; another provider/model/estimator resets it."""
    session_id, provider, model, estimator = key
    sample = min(MAX_RATIO, max(MIN_RATIO, sample))
    row = conn.execute(
        "SELECT provider, model, estimator, ratio, samples FROM context_calibration "
        "WHERE session_id = ?",
        [session_id],
    ).fetchone()
    same = row is not None and tuple(row[:3]) == (provider, model, estimator)
    ratio, samples = (float(row[3]), int(row[4])) if same and row else (sample, 0)
    weight = min(samples, MAX_SAMPLES - 1)
    ratio = (ratio * weight + sample) / (weight + 1)
    conn.execute(
        "INSERT INTO context_calibration (session_id, provider, model, estimator, ratio, samples, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
        "ON CONFLICT(session_id) DO UPDATE SET provider = excluded.provider, "
        "model = excluded.model, estimator = excluded.estimator, ratio = excluded.ratio, "
        "samples = excluded.samples, updated_at = excluded.updated_at",
        [session_id, provider, model, estimator, ratio, samples + 1],
    )
