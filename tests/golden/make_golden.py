"""Write the golden database of a released schema version (run once per version).

Golden files are committed and never regenerated: they stand for databases that
users already have. ``tests/contract/test_store_migrations.py`` migrates each.
Usage: ``python tests/golden/make_golden.py VERSION``.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import anyio

from hostkit.store import MIGRATIONS, RuntimeStore


def populate(conn: sqlite3.Connection, version: int) -> None:
    sessions = ["ses_golden_owned", "ses_golden_unbound", "ses_golden_shared"]
    for session_id in sessions:
        conn.execute(
            "INSERT INTO sessions (session_id, created_at, title) VALUES (?, '2026-11-01', ?)",
            [session_id, session_id.removeprefix("ses_golden_")],
        )
    conn.executemany(
        "INSERT INTO conversation_bindings VALUES (?, ?, ?, ?, '2026-11-01')",
        [
            ("webhook", "golden-1", "webhook:alice", "ses_golden_owned"),
            ("webhook", "golden-2", "webhook:bob", "ses_golden_shared"),
            ("slack", "golden-3", "slack:carol", "ses_golden_shared"),
        ],
    )
    for seq in range(1, 4):
        conn.execute(
            "INSERT INTO messages (message_id, session_id, seq, role, content, created_at) "
            "VALUES (?, 'ses_golden_owned', ?, 'user', '{\"text\":\"hello\"}', '2026-11-01')",
            [f"msg_golden_{seq}", seq],
        )
    conn.execute(
        "INSERT INTO tasks (task_id, session_id, kind, status, created_at, updated_at) "
        "VALUES ('task_golden', 'ses_golden_unbound', 'job', 'done', '2026-11-01', '2026-11-01')"
    )
    conn.execute(
        "INSERT INTO audit (at, kind, detail) VALUES ('2026-11-01', 'golden.created', '{}')"
    )
    if version >= 2:
        owners = [
            ("ses_golden_owned", "conversation", "webhook:alice", "webhook", "golden-1"),
            ("ses_golden_unbound", "legacy_local", None, None, None),
            ("ses_golden_shared", "legacy_local", None, None, None),
        ]
        conn.executemany(
            "INSERT INTO session_owners (session_id, owner_kind, principal_id, channel, "
            "conversation_key, recorded_at) VALUES (?, ?, ?, ?, ?, '2026-11-01')",
            owners,
        )
    if version >= 3:
        conn.execute(
            "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
            "core_revision, generation, status, started_at, ended_at, result) VALUES "
            "('turn_golden', 'req_golden', 'webhook:alice', 'ses_golden_owned', 'assistant', "
            "'cfg-golden', 1, 'completed', '2026-11-01', '2026-11-01', ?)",
            ['{"outcome": "completed"}'],
        )
        conn.execute(
            "INSERT INTO turn_events (turn_id, seq, kind, at) "
            "VALUES ('turn_golden', 1, 'turn.started', '2026-11-01')"
        )
        conn.execute(
            "INSERT INTO memory_items (agent, principal_id, text, created_at) "
            "VALUES ('assistant', 'webhook:alice', 'likes tea', '2026-11-01')"
        )
    if version >= 5:
        # A turn a Host on another machine left running when it died: its lease expired long
        # ago. Schema 6 gives it the session's lease; recovery then ends it lost.
        conn.execute(
            "INSERT INTO turns (turn_id, request_id, principal_id, session_id, core_id, "
            "core_revision, generation, status, lease_owner, lease_expires_at, started_at) "
            "VALUES ('turn_golden_running', 'req_golden_running', 'webhook:alice', "
            "'ses_golden_owned', 'assistant', 'cfg-golden', 1, 'running', "
            "'golden-host|4194301|1.000|host_golden', 1.0, '2026-11-02')"
        )
        conn.execute(
            "INSERT INTO turn_events (turn_id, seq, kind, at) "
            "VALUES ('turn_golden_running', 1, 'turn.started', '2026-11-02')"
        )
        conn.execute(
            "INSERT INTO context_summaries (session_id, summary, cutoff_seq, "
            "summarized_messages, summarizer, created_at) VALUES ('ses_golden_owned', "
            "'alice said hello three times', 3, 3, 'golden', '2026-11-02')"
        )


async def main(version: int) -> None:
    target = Path(__file__).parent / f"hostkit-v{version}.db"
    if target.exists():
        raise SystemExit(f"{target} exists; golden files are never regenerated")
    async with await RuntimeStore.open(target, migrations=MIGRATIONS[:version]) as store:
        await store.write(lambda conn: populate(conn, version))


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]))
