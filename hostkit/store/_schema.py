"""The schema as an append-only list of numbered migrations.

A migration is never edited after it lands: a fresh database is built by
running every migration in order, and a test checks that this equals an old
database migrated forward. Later issues append their tables as new entries.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APPLICATION_ID", "MIGRATIONS", "SCHEMA_VERSION", "Migration"]

# PRAGMA application_id: "hkit". A non-empty database with another id is not ours.
APPLICATION_ID = 0x686B6974


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step; ``statements`` run in order inside the upgrade transaction."""

    version: int
    name: str
    statements: tuple[str, ...]


_V1_BASE = Migration(
    1,
    "sessions, conversation bindings, messages, tasks, audit",
    (
        f"PRAGMA application_id = {APPLICATION_ID}",
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'active',
            title TEXT
        )""",
        # One binding per conversation; v1 let several conversations point at one
        # session (a resumed session), which is what makes ownership ambiguous later.
        """CREATE TABLE conversation_bindings (
            channel TEXT NOT NULL,
            conversation_key TEXT NOT NULL,
            principal_id TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            bound_at TEXT NOT NULL,
            PRIMARY KEY (channel, conversation_key)
        ) WITHOUT ROWID""",
        "CREATE INDEX conversation_bindings_session ON conversation_bindings(session_id)",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            message_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            turn_id TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (session_id, seq)
        )""",
        """CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            task_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        )""",
        "CREATE INDEX tasks_session ON tasks(session_id, id)",
        """CREATE TABLE audit (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,
            kind TEXT NOT NULL,
            principal_id TEXT,
            authority TEXT,
            session_id TEXT,
            subject TEXT,
            reason TEXT,
            detail TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX audit_kind ON audit(kind, id)",
    ),
)

_OWNER_KINDS = "('conversation', 'operator', 'system', 'delegated_agent', 'legacy_local')"

_V2_OWNERS = Migration(
    2,
    "immutable session_owners projection with legacy_local backfill",
    (
        f"""CREATE TABLE session_owners (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            owner_kind TEXT NOT NULL CHECK (owner_kind IN {_OWNER_KINDS}),
            principal_id TEXT,
            channel TEXT,
            conversation_key TEXT,
            parent_session_id TEXT,
            parent_turn_id TEXT,
            recorded_at TEXT NOT NULL
        ) WITHOUT ROWID""",
        """CREATE INDEX session_owners_conversation
            ON session_owners(channel, conversation_key) WHERE owner_kind = 'conversation'""",
        "CREATE INDEX session_owners_principal ON session_owners(owner_kind, principal_id)",
        """CREATE TRIGGER session_owners_no_update BEFORE UPDATE ON session_owners
            BEGIN SELECT RAISE(ABORT, 'session_owners rows are immutable'); END""",
        """CREATE TRIGGER session_owners_no_delete BEFORE DELETE ON session_owners
            BEGIN SELECT RAISE(ABORT, 'session_owners rows are immutable'); END""",
        # Backfill: a session reached by exactly one conversation binding is owned by
        # that conversation; none or several bindings is ambiguous -> legacy_local,
        # which no ordinary query (operator ones included) ever promotes.
        """INSERT INTO session_owners (session_id, owner_kind, principal_id, channel,
                conversation_key, recorded_at)
            SELECT s.session_id,
                   CASE WHEN b.n = 1 THEN 'conversation' ELSE 'legacy_local' END,
                   CASE WHEN b.n = 1 THEN b.principal_id END,
                   CASE WHEN b.n = 1 THEN b.channel END,
                   CASE WHEN b.n = 1 THEN b.conversation_key END,
                   strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            FROM sessions s
            LEFT JOIN (
                SELECT session_id, COUNT(*) AS n, MIN(principal_id) AS principal_id,
                       MIN(channel) AS channel, MIN(conversation_key) AS conversation_key
                FROM conversation_bindings GROUP BY session_id
            ) b ON b.session_id = s.session_id""",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1_BASE, _V2_OWNERS)
SCHEMA_VERSION = MIGRATIONS[-1].version
