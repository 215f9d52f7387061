"""The schema as an append-only list of numbered migrations.

A migration is never edited after it lands: a fresh database is built by
running every migration in order, and a test checks that this equals an old
database migrated forward. Later issues append their tables as new entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hostkit.store._words import search_words

__all__ = [
    "APPLICATION_ID",
    "LAST_ACTIVITY",
    "MEMORY_SEARCH_WORDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TALLY_FOLD",
    "TALLY_SEEDS",
    "TALLY_UNANSWERED",
    "TURN_COUNT",
    "Backfill",
    "Migration",
    "unanswered_inbound",
    "unanswered_status",
]

# PRAGMA application_id: "hkit". A non-empty database with another id is not ours.
APPLICATION_ID = 0x686B6974


@dataclass(frozen=True, slots=True)
class Backfill:
    """A column a step fills in Python for the rows already there, after its statements:
    ``compute(source)`` of each row of ``table``, by ``id``, a page at a time. For values
    SQL cannot compute alike on both engines (Unicode folding); a new file has no rows."""

    table: str
    source: str
    column: str
    compute: Callable[[str], str]
    page: int = 500

    @property
    def select(self) -> str:
        """The next page of rows after an id (``?``), oldest first."""
        return (
            f"SELECT id, {self.source} FROM {self.table} WHERE id > ? ORDER BY id LIMIT {self.page}"
        )

    @property
    def update(self) -> str:
        """One row's new value (``?``) by its id (``?``)."""
        return f"UPDATE {self.table} SET {self.column} = ? WHERE id = ?"


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step; ``statements`` run in order inside the upgrade transaction.

    ``destructive``: the step drops or rewrites data. SQLite backs up before
    every upgrade anyway; PostgreSQL requires a verified ``pg_dump`` first.

    ``backfill``: a column computed in Python for the existing rows once the statements
    ran. Like ``rewrites``, not part of the statements' digest.

    ``rewrites``: the tables (each with its indexes) or lone indexes, named as in the
    file before the step, whose size bounds what the step writes in bulk: a rebuild's
    copy, an UPDATE of every row, an index or backfill built from their rows. The
    upgrade's free-space check sizes them: the whole transaction's writes stay in the
    WAL until its commit, beside the file they then grow. Not part of the statements'
    digest: declaring one never edits a released step.
    """

    version: int
    name: str
    statements: tuple[str, ...]
    destructive: bool = False
    rewrites: tuple[str, ...] = ()
    backfill: Backfill | None = None


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
    rewrites=("sessions",),  # an owner row per session
)

_TURN_STATUSES = (
    "('running', 'completed', 'needs_user', 'failed', 'cancelled', 'lost', 'indeterminate')"
)

_V3_TURNS = Migration(
    3,
    "turns, turn events, outbox, usage observations, context decisions, agent memory",
    (
        # One row per admitted turn. (principal_id, request_id) is the idempotency key:
        # a repeat of the same request by the same principal never creates a second turn.
        f"""CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            turn_id TEXT NOT NULL UNIQUE,
            request_id TEXT NOT NULL,
            principal_id TEXT NOT NULL,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            core_id TEXT NOT NULL,
            core_revision TEXT NOT NULL,
            generation INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN {_TURN_STATUSES}),
            lease_owner TEXT,
            lease_expires_at REAL,
            cancel_requested_at TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            result TEXT,
            UNIQUE (principal_id, request_id)
        )""",
        "CREATE INDEX turns_session ON turns(session_id, id)",
        "CREATE INDEX turns_running ON turns(status, lease_expires_at) WHERE status = 'running'",
        """CREATE TABLE turn_events (
            id INTEGER PRIMARY KEY,
            turn_id TEXT NOT NULL REFERENCES turns(turn_id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            at TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}',
            UNIQUE (turn_id, seq)
        )""",
        # Durable delivery intents, committed in the same transaction as the terminal turn.
        """CREATE TABLE outbox (
            id INTEGER PRIMARY KEY,
            intent_id TEXT NOT NULL UNIQUE,
            turn_id TEXT NOT NULL REFERENCES turns(turn_id),
            session_id TEXT NOT NULL,
            route TEXT NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX outbox_due ON outbox(status, next_attempt_at)",
        """CREATE TABLE usage_observations (
            id INTEGER PRIMARY KEY,
            decision_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            step_id INTEGER NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            estimated_input_tokens INTEGER,
            finish_reason TEXT,
            provider_request_id TEXT,
            at TEXT NOT NULL
        )""",
        "CREATE INDEX usage_session ON usage_observations(session_id, id)",
        """CREATE TABLE context_decisions (
            decision_id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            step_id INTEGER NOT NULL,
            kind TEXT NOT NULL,
            summary TEXT NOT NULL,
            at TEXT NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX context_decisions_turn ON context_decisions(turn_id, step_id)",
        # Agent memory: one store per agent, items owned by the principal that stored them.
        """CREATE TABLE memory_items (
            id INTEGER PRIMARY KEY,
            agent TEXT NOT NULL,
            principal_id TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at TEXT NOT NULL
        )""",
        "CREATE INDEX memory_owner ON memory_items(agent, principal_id, id)",
        """CREATE VIRTUAL TABLE memory_fts USING fts5(
            text, content='memory_items', content_rowid='id'
        )""",
        """CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
            INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text);
        END""",
        """CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END""",
    ),
)

_APPROVAL_STATUSES = "('pending', 'approved', 'denied', 'executed', 'stale', 'superseded')"

_APPROVAL_STATUSES_V10 = (
    "('pending', 'approved', 'denied', 'executed', 'stale', 'superseded', 'indeterminate')"
)

_V4_APPROVALS = Migration(
    4,
    "durable pending approvals",
    (
        # An ``ask`` nobody answered in time. ``arguments`` are the frozen arguments the
        # continuation turn executes exactly once; ``view`` is the bounded, field-name-
        # redacted form approvers see. ``continuation_turn_id`` is set by the one turn
        # that claims the answer, so a second claim finds nothing to run.
        f"""CREATE TABLE approvals (
            id INTEGER PRIMARY KEY,
            approval_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            turn_id TEXT NOT NULL REFERENCES turns(turn_id),
            principal_id TEXT NOT NULL,
            core_id TEXT NOT NULL,
            core_revision TEXT NOT NULL,
            effect TEXT NOT NULL,
            call_id TEXT NOT NULL,
            arguments TEXT NOT NULL,
            view TEXT NOT NULL,
            policy_fingerprint TEXT NOT NULL,
            rule_key TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN {_APPROVAL_STATUSES}),
            decision TEXT,
            decided_by TEXT,
            continuation_turn_id TEXT,
            created_at TEXT NOT NULL,
            decided_at TEXT
        )""",
        "CREATE INDEX approvals_session ON approvals(session_id, status)",
        "CREATE INDEX approvals_open ON approvals(status, id) WHERE status = 'pending'",
    ),
)

_V5_CONTEXT = Migration(
    5,
    "context: committed summaries, compaction leases, calibration, bootstrap snapshots",
    (
        # One committed summary per session: everything at or before cutoff_seq is
        # represented by it (reference-only). Replaced atomically with its cutoff.
        """CREATE TABLE context_summaries (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            summary TEXT NOT NULL,
            cutoff_seq INTEGER NOT NULL,
            summarized_messages INTEGER NOT NULL,
            summarizer TEXT NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID""",
        # The durable compaction lease and cooldown of a session. lease_id is NULL when
        # nobody holds it; owner is LeaseOwner.encode() ("host|pid|start|instance|machine")
        # so a restarted Host can tell a dead holder from a live one.
        """CREATE TABLE context_leases (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            lease_id TEXT,
            owner TEXT,
            expires_at REAL,
            cooldown_until REAL,
            updated_at TEXT NOT NULL
        ) WITHOUT ROWID""",
        # Estimator calibration, advanced only after a usage observation commits. One
        # row per session: a different provider/model/estimator overwrites (resets) it.
        """CREATE TABLE context_calibration (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            estimator TEXT NOT NULL,
            ratio REAL NOT NULL,
            samples INTEGER NOT NULL,
            updated_at TEXT NOT NULL
        ) WITHOUT ROWID""",
        # The bootstrap snapshot a session's turns see, taken once so it is stable.
        """CREATE TABLE context_bootstrap (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            snapshot TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID""",
    ),
)

_V6_SESSION_LEASES = Migration(
    6,
    "durable session leases with fencing tokens",
    (
        # One row per session that ever ran a turn. A turn holds its session through
        # this row from admission to its terminal record: owner is LeaseOwner.encode()
        # ("host|pid|start time|instance"), turn_id the running turn, expires_at the
        # epoch second after which another Host may take the session over (each
        # heartbeat moves it to now + ttl_s). owner, turn_id, expires_at and ttl_s are
        # NULL together when the session is free. token is the fencing token: it grows
        # by one with every acquisition and is never reused, and every write of a turn
        # carries it, so a holder whose lease was taken over cannot write again.
        """CREATE TABLE session_leases (
            session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
            token INTEGER NOT NULL CHECK (token >= 1),
            owner TEXT,
            turn_id TEXT,
            expires_at REAL,
            ttl_s REAL CHECK (ttl_s > 0),
            heartbeat_at REAL,
            updated_at TEXT NOT NULL,
            CHECK ((owner IS NULL) = (turn_id IS NULL)),
            CHECK ((owner IS NULL) = (expires_at IS NULL)),
            CHECK ((owner IS NULL) = (ttl_s IS NULL))
        ) WITHOUT ROWID""",
        # A turn a Host of schema 5 left running holds its session from now on (the
        # newest one if several do), so the lease rule covers it and recovery ends it.
        """INSERT INTO session_leases (session_id, token, owner, turn_id, expires_at, ttl_s,
                heartbeat_at, updated_at)
            SELECT t.session_id, 1, COALESCE(t.lease_owner, ''), t.turn_id,
                   COALESCE(t.lease_expires_at, 0), 120.0, NULL,
                   strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
            FROM turns t
            WHERE t.status = 'running' AND t.id = (
                SELECT MAX(r.id) FROM turns r
                WHERE r.session_id = t.session_id AND r.status = 'running'
            )""",
    ),
)

_V7_TURN_TOKENS = Migration(
    7,
    "the digest of each turn's cancellation token",
    (
        # sha256 of the cancellation token's nonce, written by the admission: any Host
        # process can check a presented token against it, and the column never holds
        # a value that works as the token itself.
        "ALTER TABLE turns ADD COLUMN cancellation_digest TEXT",
    ),
)

_V8_TERMINAL_RUNS = Migration(
    8,
    "durable background terminal runs",
    (
        # One row per background terminal.run, written before the spawn. host_owner is
        # LeaseOwner.encode() of the Host process that spawned it; pid and pid_start
        # (the OS start time of the spawned root) come once it is spawned, so a later
        # Host can tell whether that tree could still be alive. state leaves 'running'
        # exactly once: the run's own end, or 'orphaned' when its Host is gone. argv is
        # never stored (only the program's base name and the argument count); stream
        # artifacts are references ("<spawn id>:stdout"), never paths.
        """CREATE TABLE terminal_runs (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            turn_id TEXT NOT NULL,
            call_id TEXT,
            principal_id TEXT NOT NULL,
            program TEXT NOT NULL,
            argc INTEGER NOT NULL CHECK (argc >= 1),
            cwd TEXT NOT NULL,
            sandbox TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed',
                'timed_out', 'cancelled', 'indeterminate', 'orphaned')),
            host_owner TEXT NOT NULL,
            pid INTEGER,
            pid_start REAL,
            spawn_id TEXT,
            exit_code INTEGER,
            signal INTEGER,
            reason TEXT,
            duration_s REAL,
            stdout_bytes INTEGER NOT NULL DEFAULT 0,
            stdout_truncated INTEGER NOT NULL DEFAULT 0,
            stdout_artifact TEXT,
            stderr_bytes INTEGER NOT NULL DEFAULT 0,
            stderr_truncated INTEGER NOT NULL DEFAULT 0,
            stderr_artifact TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            CHECK ((state = 'running') = (ended_at IS NULL))
        )""",
        "CREATE INDEX terminal_runs_owner ON terminal_runs(principal_id, session_id, id)",
        "CREATE INDEX terminal_runs_running ON terminal_runs(state, id)",
    ),
)

_V9_ATTACHMENTS = Migration(
    9,
    "attachments: content-addressed bytes owned by one principal",
    (
        # One row per (principal, content): ref is "sha256:<hex>" of data, so adding the
        # same bytes again is a no-op and a ref never names other bytes. Rows are never
        # shared across principals: another principal's ref is simply not found. The
        # bytes were checked against media_type (magic numbers, UTF-8 text) before the
        # insert; size is len(data), kept so admission checks need not read the blob.
        """CREATE TABLE attachments (
            id INTEGER PRIMARY KEY,
            principal_id TEXT NOT NULL,
            ref TEXT NOT NULL,
            media_type TEXT NOT NULL,
            size INTEGER NOT NULL CHECK (size > 0),
            data BLOB NOT NULL,
            created_at TEXT NOT NULL,
            UNIQUE (principal_id, ref)
        )""",
    ),
)

_V10_APPROVAL_OUTCOMES = Migration(
    10,
    "approvals: an indeterminate status and the reason an approval became void",
    (
        # Rebuilt, because the status CHECK gains ``indeterminate`` (a claimed call whose
        # continuation stopped before its result was recorded: it may have run, and is
        # never run again). ``void_reason`` says why a stale, superseded or indeterminate
        # approval will never run. An approval is recorded the moment it is asked, so
        # recovery finds a turn's open approval by ``turn_id`` and a continuation's
        # claimed one by ``continuation_turn_id``.
        f"""CREATE TABLE approvals_v10 (
            id INTEGER PRIMARY KEY,
            approval_id TEXT NOT NULL UNIQUE,
            session_id TEXT NOT NULL REFERENCES sessions(session_id),
            turn_id TEXT NOT NULL REFERENCES turns(turn_id),
            principal_id TEXT NOT NULL,
            core_id TEXT NOT NULL,
            core_revision TEXT NOT NULL,
            effect TEXT NOT NULL,
            call_id TEXT NOT NULL,
            arguments TEXT NOT NULL,
            view TEXT NOT NULL,
            policy_fingerprint TEXT NOT NULL,
            rule_key TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN {_APPROVAL_STATUSES_V10}),
            decision TEXT,
            decided_by TEXT,
            continuation_turn_id TEXT,
            created_at TEXT NOT NULL,
            decided_at TEXT,
            void_reason TEXT
        )""",
        """INSERT INTO approvals_v10 (id, approval_id, session_id, turn_id, principal_id,
                core_id, core_revision, effect, call_id, arguments, view, policy_fingerprint,
                rule_key, status, decision, decided_by, continuation_turn_id, created_at,
                decided_at)
            SELECT id, approval_id, session_id, turn_id, principal_id, core_id, core_revision,
                effect, call_id, arguments, view, policy_fingerprint, rule_key, status,
                decision, decided_by, continuation_turn_id, created_at, decided_at
            FROM approvals""",
        "DROP TABLE approvals",
        "ALTER TABLE approvals_v10 RENAME TO approvals",
        "CREATE INDEX approvals_session ON approvals(session_id, status)",
        "CREATE INDEX approvals_open ON approvals(status, id) WHERE status = 'pending'",
        "CREATE INDEX approvals_turn ON approvals(turn_id)",
        "CREATE INDEX approvals_continuation ON approvals(continuation_turn_id) "
        "WHERE continuation_turn_id IS NOT NULL",
    ),
    rewrites=("approvals",),
)

_MCP_STATES = "('connected', 'failing', 'denied', 'closed')"

_V11_MCP_SERVERS = Migration(
    11,
    "mcp_servers: the last known state of each agent's declared MCP servers",
    (
        # One row per (agent, server), overwritten by every status change; operators read
        # it (`hostkit mcp list`) without connecting anything. ``tools`` is a JSON list of
        # {effect, name, description}; ``declaration`` the secret-safe view (env names,
        # never values). Times are wall-clock seconds; failing_until only while failing.
        f"""CREATE TABLE mcp_servers (
            agent TEXT NOT NULL,
            server TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN {_MCP_STATES}),
            detail TEXT NOT NULL DEFAULT '',
            tools TEXT NOT NULL DEFAULT '[]',
            failing_until REAL,
            updated_at REAL NOT NULL,
            declaration TEXT NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (agent, server)
        ) WITHOUT ROWID""",
    ),
)

_INBOX_STATES = "('ready', 'claimed', 'completed', 'dead_lettered')"

_V12_INBOX = Migration(
    12,
    "inbox: durable inbound envelopes, dedup, claims, dead letters, checkpoints",
    (
        # One row per platform event, in accept order (id). The dedup key is
        # (channel_instance_id, platform_event_key); a completed row stays as its tombstone
        # until the replay horizon passes, with payload, artifacts and metadata set to NULL
        # once the payload retention passed. due_at is the next attempt while ready, the
        # lease expiry while claimed, NULL when terminal. claim_token stays after
        # complete/fail (idempotent repeats, "conflict") with outcome_digest naming what
        # that token recorded ("r:" result, "f:" failure digest). Times are wall-clock
        # seconds chosen by the caller. The turn-request id is "inbound:" + inbound_id.
        f"""CREATE TABLE inbox (
            id INTEGER PRIMARY KEY,
            inbound_id TEXT NOT NULL UNIQUE,
            channel_instance_id TEXT NOT NULL,
            platform_event_key TEXT NOT NULL,
            kind TEXT NOT NULL,
            conversation_key TEXT NOT NULL,
            principal_key TEXT NOT NULL,
            authenticated_by TEXT NOT NULL,
            received_at REAL NOT NULL,
            payload TEXT,
            payload_ref TEXT,
            artifacts TEXT,
            metadata TEXT,
            source_id TEXT,
            source_cursor TEXT,
            state TEXT NOT NULL CHECK (state IN {_INBOX_STATES}),
            due_at REAL,
            attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
            claim_token TEXT,
            owner TEXT,
            outcome_digest TEXT,
            result_kind TEXT,
            turn_id TEXT,
            failure_kind TEXT,
            failure_code TEXT NOT NULL DEFAULT '',
            failure_message TEXT NOT NULL DEFAULT '',
            turn_reserved INTEGER NOT NULL DEFAULT 0,
            requeues INTEGER NOT NULL DEFAULT 0,
            accepted_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (channel_instance_id, platform_event_key),
            CHECK ((state IN ('ready', 'claimed')) = (due_at IS NOT NULL))
        )""",
        # Due claims: per channel instance, oldest due first (rowid breaks ties: accept order).
        "CREATE INDEX inbox_due ON inbox(channel_instance_id, due_at) "
        "WHERE state IN ('ready', 'claimed')",
        # Retention: completed rows by age, and those still holding a payload. Partial, so
        # accepts and claims (the hot path) never maintain them.
        "CREATE INDEX inbox_prune ON inbox(updated_at) WHERE state = 'completed'",
        "CREATE INDEX inbox_payloads ON inbox(updated_at) "
        "WHERE state = 'completed' AND payload IS NOT NULL",
        # Operators: the dead letters, newest first. Counts and other listings read the
        # table (rowid order) instead of keeping an index on (channel, state): that index
        # cost every accept, claim and completion about a third of its insert time.
        "CREATE INDEX inbox_dead ON inbox(id) WHERE state = 'dead_lettered'",
        # Fairness: each channel instance with the serve counter of its last claim.
        """CREATE TABLE inbox_channels (
            channel_instance_id TEXT PRIMARY KEY,
            served_seq INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID""",
        "CREATE INDEX inbox_channels_served ON inbox_channels(served_seq, channel_instance_id)",
        # A polled source's cursor, replaced in the transaction of the batch it covers.
        """CREATE TABLE inbox_checkpoints (
            source_id TEXT PRIMARY KEY,
            cursor TEXT NOT NULL,
            updated_at REAL NOT NULL
        ) WITHOUT ROWID""",
    ),
)

_DELIVERY_STATUSES = "('pending', 'sending', 'delivered', 'dead_lettered')"
# Wall-clock seconds of an ISO-8601 UTC text column (the outbox's created_at), to the ms.
_EPOCH_OF_CREATED = "round((julianday(created_at) - 2440587.5) * 86400.0, 3)"

_V13_DELIVERY = Migration(
    13,
    "outbox: delivery leases, fencing tokens, outcomes, dead letters; turns.route",
    (
        # Rebuilt, because the status gains a CHECK and the due column a rule. One row per
        # delivery intent, written only with a terminal turn (finish, recovery).
        # next_attempt_at is the due column: the next attempt while pending, the lease
        # expiry while sending, NULL when terminal. claim_token is the fencing token of
        # the current (or, once terminal, the last) claim; attempts counts claims.
        # Times are wall-clock seconds except created_at (ISO-8601 UTC text, as in v3).
        f"""CREATE TABLE outbox_v13 (
            id INTEGER PRIMARY KEY,
            intent_id TEXT NOT NULL UNIQUE,
            turn_id TEXT NOT NULL REFERENCES turns(turn_id),
            session_id TEXT NOT NULL,
            route TEXT NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN {_DELIVERY_STATUSES}),
            attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            next_attempt_at REAL,
            created_at TEXT NOT NULL,
            claim_token TEXT,
            last_error TEXT,
            delivered_at REAL,
            requeues INTEGER NOT NULL DEFAULT 0 CHECK (requeues >= 0),
            updated_at REAL NOT NULL,
            CHECK ((status IN ('pending', 'sending')) = (next_attempt_at IS NOT NULL))
        )""",
        # Intents written before v13 were never read: each is pending and due from its
        # creation time, so the first claim after the upgrade sends it.
        f"""INSERT INTO outbox_v13 (id, intent_id, turn_id, session_id, route, payload, status,
                attempts, next_attempt_at, created_at, updated_at)
            SELECT id, intent_id, turn_id, session_id, route, payload, 'pending', 0,
                COALESCE(next_attempt_at, {_EPOCH_OF_CREATED}, 0.0), created_at,
                COALESCE({_EPOCH_OF_CREATED}, 0.0)
            FROM outbox""",
        "DROP TABLE outbox",
        "ALTER TABLE outbox_v13 RENAME TO outbox",
        # The claim's only path (and next_due's): due rows in due order, rowid breaking
        # ties. Partial, so delivered rows (the bulk of the table) are not in it.
        "CREATE INDEX outbox_due ON outbox(next_attempt_at) WHERE status IN ('pending', 'sending')",
        # Operators: the dead letters, newest first.
        "CREATE INDEX outbox_dead ON outbox(id) WHERE status = 'dead_lettered'",
        # The route a turn captured at admission (JSON; NULL when unrouted), so recovery
        # can tell the conversation of a turn whose process died: its approval prompt or
        # that its message went unanswered. Turns admitted before v13 have none.
        "ALTER TABLE turns ADD COLUMN route TEXT",
    ),
    rewrites=("outbox",),
)

_CORE_ACTIONS = "('promote', 'rollback', 'refused')"

_V14_CORES = Migration(
    14,
    "Agent Cores: promotion history (with gates) and authored state with versions",
    (
        # Every move of a core's Host-owned ref, and every refused promotion, with the
        # gates' verdicts (JSON list) and the secret-safe MCP security diff (JSON object).
        # revision / previous are 40-hex Git commit ids; at is wall-clock seconds.
        f"""CREATE TABLE core_history (
            id INTEGER PRIMARY KEY,
            core_id TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN {_CORE_ACTIONS}),
            revision TEXT NOT NULL,
            previous TEXT,
            gates TEXT NOT NULL,
            security_diff TEXT NOT NULL DEFAULT '{{}}',
            actor TEXT NOT NULL,
            reason TEXT,
            at REAL NOT NULL
        )""",
        "CREATE INDEX core_history_core ON core_history(core_id, id)",
        # ctx.state: one JSON value per (core, scope, key); scope '' is core-wide, else a
        # session id. version starts at 1 and grows by one per write (compare-and-set).
        """CREATE TABLE core_state (
            core_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            version INTEGER NOT NULL CHECK (version >= 1),
            updated_at REAL NOT NULL,
            turn_id TEXT,
            PRIMARY KEY (core_id, scope, key)
        ) WITHOUT ROWID""",
        # Session pins: a session's latest turn of a core, found without a table scan.
        "CREATE INDEX turns_core_session ON turns(core_id, session_id, id)",
    ),
    rewrites=("turns",),  # the index over its rows
)

_V15_APPROVAL_REVOCATIONS = Migration(
    15,
    "approval revocations: ends of cached session approvals, seen by every Host process",
    (
        # One row per end of "approve for session" answers: an explicit revocation, a
        # conversation moved to another session, a core's revision moved. Each Host keeps
        # its answers in memory and reads the rows after the last one it saw before it
        # uses one, so an end recorded by any process reaches every other. principal_id
        # NULL: every principal's answers in the session. at is wall-clock seconds.
        """CREATE TABLE approval_revocations (
            id INTEGER PRIMARY KEY,
            session_id TEXT,
            principal_id TEXT,
            core_id TEXT,
            actor TEXT NOT NULL,
            reason TEXT NOT NULL,
            at REAL NOT NULL,
            CHECK (session_id IS NOT NULL OR core_id IS NOT NULL)
        )""",
    ),
)

_V16_TERMINAL_RUN_LEASES = Migration(
    16,
    "background terminal runs: a lease their Host renews",
    (
        # Wall-clock seconds until which the run is its Host's without a renewal. A Host
        # on another machine cannot tell whether the owner lives: it orphans the run
        # only once this passed. NULL for runs recorded before v16 (liveness decides).
        "ALTER TABLE terminal_runs ADD COLUMN lease_expires_at REAL",
    ),
)

_V17_COMMAND_REPLIES = Migration(
    17,
    "outbox: replies to channel commands (an inbound's intent, no turn)",
    (
        # Rebuilt, because turn_id loses its NOT NULL: an intent is a turn's (its answer,
        # an approval prompt) or a command inbound's reply (``approve CODE`` that matched
        # nothing, or was refused), exactly one of the two. inbound_id has no foreign
        # key: the inbox's retention may prune the row a reply was written for.
        f"""CREATE TABLE outbox_v17 (
            id INTEGER PRIMARY KEY,
            intent_id TEXT NOT NULL UNIQUE,
            turn_id TEXT REFERENCES turns(turn_id),
            inbound_id TEXT,
            session_id TEXT NOT NULL,
            route TEXT NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN {_DELIVERY_STATUSES}),
            attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            next_attempt_at REAL,
            created_at TEXT NOT NULL,
            claim_token TEXT,
            last_error TEXT,
            delivered_at REAL,
            requeues INTEGER NOT NULL DEFAULT 0 CHECK (requeues >= 0),
            updated_at REAL NOT NULL,
            CHECK ((status IN ('pending', 'sending')) = (next_attempt_at IS NOT NULL)),
            CHECK ((turn_id IS NULL) != (inbound_id IS NULL))
        )""",
        """INSERT INTO outbox_v17 (id, intent_id, turn_id, session_id, route, payload, status,
                attempts, next_attempt_at, created_at, claim_token, last_error, delivered_at,
                requeues, updated_at)
            SELECT id, intent_id, turn_id, session_id, route, payload, status, attempts,
                next_attempt_at, created_at, claim_token, last_error, delivered_at, requeues,
                updated_at
            FROM outbox""",
        "DROP TABLE outbox",
        "ALTER TABLE outbox_v17 RENAME TO outbox",
        "CREATE INDEX outbox_due ON outbox(next_attempt_at) WHERE status IN ('pending', 'sending')",
        "CREATE INDEX outbox_dead ON outbox(id) WHERE status = 'dead_lettered'",
    ),
    rewrites=("outbox",),
)

_V18_DELIVERY_CLAIM_OWNERS = Migration(
    18,
    "outbox: the owner of each delivery claim",
    (
        # Who holds a sending row's claim (a LeaseOwner text), so a restarted Host takes
        # over the claims of a provably dead one at once instead of waiting out their
        # leases, as it does for inbox claims. NULL for claims made before v18: only their
        # lease ends them.
        "ALTER TABLE outbox ADD COLUMN claim_owner TEXT",
    ),
)

_V19_LEASE_LAPSE_NOTICES = Migration(
    19,
    "session leases: when another Host first found one past its expiry",
    (
        # When a Host first found this lease past its expiry while its owner was not
        # provably dead (epoch seconds, that Host's clock), and the expiry it found
        # lapsed. The lease ends only a ttl after the notice, and the notice counts only
        # while the lease keeps that expiry: a renewal or a new holder moves it. A
        # holder that could not renew because the database was unreachable gets a ttl
        # of reachable database to renew once it is back. NULL until a lapse is noticed.
        "ALTER TABLE session_leases ADD COLUMN lapse_noticed_at REAL",
        "ALTER TABLE session_leases ADD COLUMN lapsed_expiry REAL",
    ),
)

_V20_DELIVERY_ORDER = Migration(
    20,
    "outbox: a session's intents are claimed in the order they were written",
    (
        # A due intent waits while an older one of its session is still pending or being
        # sent (the claim's NOT EXISTS walks this): answers reach a chat in turn order.
        "CREATE INDEX outbox_session_due ON outbox(session_id, id) "
        "WHERE status IN ('pending', 'sending')",
    ),
)

_V21_INBOX_ORDER = Migration(
    21,
    "inbox: a conversation's messages are claimed in the order they were accepted",
    (
        # A due message waits while an older one of its conversation is still waiting or
        # leased (the claim's NOT EXISTS walks this): answers follow the messages' order.
        "CREATE INDEX inbox_conversation_due ON inbox(channel_instance_id, conversation_key, id) "
        "WHERE state IN ('ready', 'claimed')",
    ),
)

_V22_ATTACHMENT_RECLAIM = Migration(
    22,
    "attachments_pending: the attachments no turn has taken yet, which can be reclaimed",
    (
        # One row per attachment added but referenced by no admitted turn (its turn was
        # refused, never sent, or lost to a crash before admission). The admission that
        # takes an attachment deletes its row here in the same transaction; an attachment
        # without a row here is kept for good (turns and messages are never deleted). A
        # table of its own: updating a column of ``attachments`` rewrites its blob.
        """CREATE TABLE attachments_pending (
            principal_id TEXT NOT NULL,
            ref TEXT NOT NULL,
            added_at TEXT NOT NULL,
            PRIMARY KEY (principal_id, ref)
        ) WITHOUT ROWID""",
        "CREATE INDEX attachments_pending_added ON attachments_pending(added_at)",
        # Every existing row no stored message names by its ref (whoever's message: a row
        # whose bytes any transcript names stays kept) is pending since it was added.
        """INSERT INTO attachments_pending (principal_id, ref, added_at)
            SELECT principal_id, ref, created_at FROM attachments WHERE ref NOT IN (
                SELECT named.ref FROM (
                    SELECT CASE WHEN a.type = 'object' THEN json_extract(a.value, '$.ref') END
                        AS ref
                    FROM messages m, json_each(
                        CASE WHEN json_valid(m.content) THEN m.content ELSE '{}' END,
                        '$.attachments'
                    ) a
                    WHERE m.content LIKE '%"attachments"%'
                ) named WHERE named.ref IS NOT NULL
            )""",
    ),
    # A pending row per attachment, its key as in attachments' (principal_id, ref) index,
    # and its added_at index entry: twice that index.
    rewrites=("sqlite_autoindex_attachments_1", "sqlite_autoindex_attachments_1"),
)

_V23_MEMORY_PROVENANCE = Migration(
    23,
    "memory items: the session and turn that stored each; ids never reused",
    (
        # Rebuilt, for AUTOINCREMENT: items can now be forgotten by id, and a plain rowid
        # would give the next item the id of the newest one forgotten, so a forget by an
        # id read earlier could remove another item. session_id and turn_id name the turn
        # whose call stored the item, so text a steered model planted can be traced to
        # its conversation; NULL for items stored before v23. Ids are kept, so the FTS
        # index (content_rowid 'id') still matches; the copy fires no trigger.
        """CREATE TABLE memory_items_v23 (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            agent TEXT NOT NULL,
            principal_id TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at TEXT NOT NULL,
            session_id TEXT,
            turn_id TEXT
        )""",
        """INSERT INTO memory_items_v23 (id, agent, principal_id, text, created_at)
            SELECT id, agent, principal_id, text, created_at FROM memory_items""",
        "DROP TABLE memory_items",
        "ALTER TABLE memory_items_v23 RENAME TO memory_items",
        "CREATE INDEX memory_owner ON memory_items(agent, principal_id, id)",
        """CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
            INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text);
        END""",
        """CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
        END""",
    ),
    rewrites=("memory_items",),
)

_V24_OWNER_SEARCH = Migration(
    24,
    "owner-scoped memory search; a session's audit rows; delivered intents by time",
    (
        # A recall matched the whole index and dropped other owners' items after ranking,
        # so its cost grew with everyone's memory. Each item now carries its owner's token
        # (``o`` and the id of the owner's first item: opaque, never another owner's, as
        # ids are never reused) in an indexed FTS column a recall must match. The insert
        # trigger gives a new item its owner's token, or its own for a new owner. Recall
        # still filters on agent and owner in SQL; the token only bounds the work.
        "DROP TRIGGER memory_items_ai",
        "DROP TRIGGER memory_items_ad",
        "DROP TABLE memory_fts",
        "ALTER TABLE memory_items ADD COLUMN owner_token TEXT",
        """UPDATE memory_items SET owner_token = 'o' || (
            SELECT MIN(m.id) FROM memory_items m
            WHERE m.agent = memory_items.agent AND m.principal_id = memory_items.principal_id
        )""",
        """CREATE VIRTUAL TABLE memory_fts USING fts5(
            owner_token, text, content='memory_items', content_rowid='id'
        )""",
        "INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')",
        """CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
            UPDATE memory_items SET owner_token = COALESCE((
                SELECT m.owner_token FROM memory_items m
                WHERE m.agent = new.agent AND m.principal_id = new.principal_id
                    AND m.id <> new.id AND m.owner_token IS NOT NULL LIMIT 1
            ), 'o' || new.id) WHERE id = new.id;
            INSERT INTO memory_fts(rowid, owner_token, text)
                SELECT id, owner_token, text FROM memory_items WHERE id = new.id;
        END""",
        """CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, owner_token, text)
                VALUES ('delete', old.id, old.owner_token, old.text);
        END""",
        # ``hostkit effects audit SESSION`` reads a session's newest rows: without this it
        # scanned the whole audit table (its kind prefix cannot use audit_kind).
        "CREATE INDEX audit_session ON audit(session_id, id)",
        # Retention of delivered answers (DeliveryStore.prune): the rows past the horizon,
        # and the payloads not cleared yet, oldest first, without reading the rest.
        "CREATE INDEX outbox_delivered ON outbox(delivered_at) WHERE status = 'delivered'",
        "CREATE INDEX outbox_delivered_payload ON outbox(delivered_at) "
        "WHERE status = 'delivered' AND payload <> '{}'",
    ),
    # The rows' update and the FTS rebuild; the new indexes read audit's rows, and the
    # outbox's delivered ones (a key and a rowid each: no larger than its intent_id index).
    rewrites=(
        "memory_items",
        "memory_fts_data",
        "memory_fts_idx",
        "memory_fts_docsize",
        "audit",
        "sqlite_autoindex_outbox_1",
    ),
)

# A session's last activity, as ``hostkit sessions`` ranks it: its newest turn's end, or
# its start while it runs, else the session's creation; and its turns, counted. SQL of an
# UPDATE of ``sessions`` (the backfill, and a new session's insert trigger).
LAST_ACTIVITY = (
    "COALESCE((SELECT COALESCE(t.ended_at, t.started_at) FROM turns t "
    "WHERE t.session_id = sessions.session_id ORDER BY t.id DESC LIMIT 1), sessions.created_at)"
)
TURN_COUNT = "(SELECT COUNT(*) FROM turns t WHERE t.session_id = sessions.session_id)"

_V25_SESSION_ACTIVITY = Migration(
    25,
    "sessions: last activity and turn count, kept with the turns; the recent-sessions index",
    (
        # ``hostkit sessions`` (and every view that defaults to the latest session) ranked
        # every session by its newest turn and counted every session's turns, on each
        # call. Both are now columns the triggers below keep in the transaction that
        # admits, ends (or ever moves or deletes) a turn; the list walks the index newest
        # first, ties by the newer session, and stops at its limit, and a session of
        # 300k turns costs what one of three does. The defaults are only for the ALTER: a
        # new session's insert trigger sets both.
        "ALTER TABLE sessions ADD COLUMN last_activity TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sessions ADD COLUMN turn_count INTEGER NOT NULL DEFAULT 0",
        f"UPDATE sessions SET last_activity = {LAST_ACTIVITY}, turn_count = {TURN_COUNT}",
        "CREATE INDEX sessions_last_activity ON sessions(last_activity, id)",
        f"""CREATE TRIGGER sessions_activity_ai AFTER INSERT ON sessions BEGIN
            UPDATE sessions SET last_activity = {LAST_ACTIVITY}, turn_count = {TURN_COUNT}
                WHERE id = new.id;
        END""",
        f"""CREATE TRIGGER turns_activity_ai AFTER INSERT ON turns BEGIN
            UPDATE sessions SET last_activity = {LAST_ACTIVITY}, turn_count = turn_count + 1
                WHERE session_id = new.session_id;
        END""",
        # A turn moved to another session (none is today) counts there, not here; a
        # comparison is 1 or 0.
        f"""CREATE TRIGGER turns_activity_au
            AFTER UPDATE OF session_id, started_at, ended_at ON turns BEGIN
            UPDATE sessions SET last_activity = {LAST_ACTIVITY}, turn_count = turn_count
                    + (session_id = new.session_id) - (session_id = old.session_id)
                WHERE session_id IN (old.session_id, new.session_id);
        END""",
        f"""CREATE TRIGGER turns_activity_ad AFTER DELETE ON turns BEGIN
            UPDATE sessions SET last_activity = {LAST_ACTIVITY}, turn_count = turn_count - 1
                WHERE session_id = old.session_id;
        END""",
    ),
    rewrites=("sessions",),
)

_V26_ATTACHMENT_REFS = Migration(
    26,
    "attachment_refs: which sessions hold an attachment; pending uploads counted",
    (
        # One row per session whose turn or transcript carries a principal's bytes,
        # written in the transaction that takes them (admission, any transcript write).
        # An erase deletes its session's rows and then the bytes nothing holds, by key,
        # without reading any other session's messages; reclaim keeps bytes a row holds.
        """CREATE TABLE attachment_refs (
            principal_id TEXT NOT NULL,
            ref TEXT NOT NULL,
            session_id TEXT NOT NULL,
            PRIMARY KEY (principal_id, ref, session_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX attachment_refs_session ON attachment_refs(session_id)",
        # Every add counts one upload waiting for its turn; a session's first take counts
        # one off. One mark per (principal, ref) let one take clear another's upload.
        "ALTER TABLE attachments_pending ADD COLUMN uploads INTEGER NOT NULL DEFAULT 1",
        # The sessions whose stored messages name a principal's bytes: the turn's
        # principal; for a message of no turn (an operator's append, say), every
        # principal's copy of those bytes, as v22 kept them (a writer other than the
        # session's owner references its own copy, and keeping more is the safe side).
        """INSERT OR IGNORE INTO attachment_refs (principal_id, ref, session_id)
            SELECT a.principal_id, a.ref, named.session_id FROM (
                SELECT m.session_id, m.turn_id,
                    CASE WHEN j.type = 'object' THEN json_extract(j.value, '$.ref') END AS ref
                FROM messages m, json_each(
                    CASE WHEN json_valid(m.content) THEN m.content ELSE '{}' END,
                    '$.attachments'
                ) j
                WHERE m.content LIKE '%"attachments"%'
            ) named
            LEFT JOIN turns t ON t.turn_id = named.turn_id
            JOIN attachments a ON a.ref = named.ref
                AND a.principal_id = COALESCE(t.principal_id, a.principal_id)""",
        # Bytes neither pending nor named by their owner's messages were taken by a turn
        # whose input is not written yet, or kept for another principal's turn: one upload
        # pending from now, so that turn has the grace period to write its reference.
        """INSERT INTO attachments_pending (principal_id, ref, added_at, uploads)
            SELECT a.principal_id, a.ref, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 1
            FROM attachments a WHERE NOT EXISTS (
                SELECT 1 FROM attachments_pending p
                WHERE p.principal_id = a.principal_id AND p.ref = a.ref
            ) AND NOT EXISTS (
                SELECT 1 FROM attachment_refs r
                WHERE r.principal_id = a.principal_id AND r.ref = a.ref
            )""",
        # Bytes a reference holds are never deleted: this code deletes them only once
        # none does, so the guard stops a writer that does not know the references (a
        # Host of an older version still serving beside this one, whose reclaim deleted
        # every pending upload's bytes): its transaction fails with the bytes kept.
        """CREATE TRIGGER attachments_held_bd BEFORE DELETE ON attachments
            WHEN EXISTS (
                SELECT 1 FROM attachment_refs r
                WHERE r.principal_id = old.principal_id AND r.ref = old.ref
            ) BEGIN
            SELECT RAISE(ABORT, 'attachment bytes a session references are kept');
        END""",
    ),
    # A reference row (and its session index entry) per stored message that names bytes:
    # bounded by those messages, which hold each ref and session id; and a pending row per
    # unnamed attachment's key.
    rewrites=("messages", "sqlite_autoindex_attachments_1"),
)

# Each memory item's words (``_words``), filled for the items stored before them.
MEMORY_SEARCH_WORDS = Backfill("memory_items", "text", "search_words", search_words)

_V27_MEMORY_WORDS = Migration(
    27,
    "memory search: the words both engines match, folded once in Python",
    (
        # FTS5's unicode61 and PostgreSQL's parser split and fold text differently, so a
        # recall found different items on each. Each item now keeps its words as
        # ``_words`` gives them (folded, space-separated), written by ``remember`` and
        # filled for older items by the backfill; the index holds those words alone,
        # split at the spaces (``ascii``: every non-ASCII character is part of a word).
        # A row without them (an older Host's, still serving) is indexed by its text.
        "ALTER TABLE memory_items ADD COLUMN search_words TEXT",
        "DROP TRIGGER memory_items_ai",
        "DROP TRIGGER memory_items_ad",
        "DROP TABLE memory_fts",
        """CREATE VIRTUAL TABLE memory_fts USING fts5(
            owner_token, search_words, content='memory_items', content_rowid='id',
            tokenize='ascii'
        )""",
        """INSERT INTO memory_fts(rowid, owner_token, search_words)
            SELECT id, owner_token, COALESCE(search_words, text) FROM memory_items""",
        """CREATE TRIGGER memory_items_ai AFTER INSERT ON memory_items BEGIN
            UPDATE memory_items SET owner_token = COALESCE((
                SELECT m.owner_token FROM memory_items m
                WHERE m.agent = new.agent AND m.principal_id = new.principal_id
                    AND m.id <> new.id AND m.owner_token IS NOT NULL LIMIT 1
            ), 'o' || new.id) WHERE id = new.id;
            INSERT INTO memory_fts(rowid, owner_token, search_words)
                SELECT id, owner_token, COALESCE(search_words, text)
                FROM memory_items WHERE id = new.id;
        END""",
        """CREATE TRIGGER memory_items_ad AFTER DELETE ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, owner_token, search_words)
                VALUES ('delete', old.id, old.owner_token, COALESCE(old.search_words, old.text));
        END""",
        # The backfill's updates (and any later one) move the item to its new words.
        """CREATE TRIGGER memory_items_au AFTER UPDATE OF search_words ON memory_items BEGIN
            INSERT INTO memory_fts(memory_fts, rowid, owner_token, search_words)
                VALUES ('delete', old.id, old.owner_token, COALESCE(old.search_words, old.text));
            INSERT INTO memory_fts(rowid, owner_token, search_words)
                VALUES (new.id, new.owner_token, COALESCE(new.search_words, new.text));
        END""",
    ),
    # The index built from the texts, then again from the words.
    rewrites=(
        "memory_items",
        "memory_fts_data",
        "memory_fts_idx",
        "memory_fts_docsize",
        "memory_fts_data",
        "memory_fts_idx",
        "memory_fts_docsize",
    ),
    backfill=MEMORY_SEARCH_WORDS,
)

# The inbox states and outbox statuses no live index holds, kept as tallies (v28), and the
# turn outcomes that answered nothing (``UNANSWERED_OUTCOMES`` when v28 landed).
_TALLIED_STATES = "('completed', 'dead_lettered')"
_TALLIED_STATUSES = "('delivered', 'dead_lettered')"
TALLY_UNANSWERED = ("lost", "failed", "cancelled", "indeterminate")
# Deltas folded into the tallies each time this many were written: a count reads at most
# about this many delta rows besides the tallies, however long the history.
TALLY_FOLD = 1024


def unanswered_status(column: str) -> str:
    """SQL true when ``column`` holds an outcome of ``TALLY_UNANSWERED``, as equalities: an
    ``IN`` list of more than two values makes SQLite build a table at every run of a
    trigger (60 µs for every turn's status update, the WHEN alone)."""
    return "(" + " OR ".join(f"{column} = '{outcome}'" for outcome in TALLY_UNANSWERED) + ")"


def unanswered_inbound(row: str) -> str:
    """SQL true when inbox row ``row`` (``old``/``new``; ``OLD``/``NEW`` in PostgreSQL's
    trigger functions) counts as ``unanswered``."""
    return (
        f"{row}.state = 'completed' AND {row}.result_kind = 'turn' AND EXISTS ("
        f"SELECT 1 FROM turns t WHERE t.turn_id = {row}.turn_id "
        f"AND {unanswered_status('t.status')})"
    )


# The tallies as the rows give them, when v28 (PostgreSQL v15) creates them: the finished
# inbounds per channel instance and state, the unanswered among them, the finished intents.
TALLY_SEEDS = (
    f"""INSERT INTO inbox_tallies (channel_instance_id, state, n)
        SELECT channel_instance_id, state, COUNT(*) FROM inbox
        WHERE state IN {_TALLIED_STATES} GROUP BY channel_instance_id, state""",
    f"""INSERT INTO inbox_tallies (channel_instance_id, state, n)
        SELECT i.channel_instance_id, 'unanswered', COUNT(*) FROM inbox i
        JOIN turns t ON t.turn_id = i.turn_id
        WHERE i.state = 'completed' AND i.result_kind = 'turn'
            AND {unanswered_status("t.status")}
        GROUP BY i.channel_instance_id""",
    f"""INSERT INTO outbox_tallies (status, n)
        SELECT status, COUNT(*) FROM outbox WHERE status IN {_TALLIED_STATUSES}
        GROUP BY status""",
)


_V28_TALLIES = Migration(
    28,
    "inbox and outbox: finished rows counted as they change, not on every count",
    (
        # ``inbox counts`` and ``delivery counts`` (and the notebook's monitor every 2 s)
        # grouped every row, the finished history too: 0.36 s and 0.14 s at 200,000 rows.
        # The live states are still counted from their partial indexes; the finished ones
        # are tallies the triggers below keep in the transaction of every change. A change
        # appends a delta row rather than updating a tally in place, so PostgreSQL's
        # concurrent completions never contend for one row (measured there: 8 workers
        # completing one channel's rows had 4,201 transactions rolled back and run again
        # with one row per tally, 79-170 with deltas, as many as without any tally).
        # Here every TALLY_FOLD-th delta folds the deltas into the tallies (PostgreSQL's
        # claims fold, ``_tallies``). A count is the tallies plus the deltas, exact in any
        # snapshot.
        """CREATE TABLE inbox_tallies (
            channel_instance_id TEXT NOT NULL,
            state TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (channel_instance_id, state)
        ) WITHOUT ROWID""",
        """CREATE TABLE inbox_tally_deltas (
            id INTEGER PRIMARY KEY,
            channel_instance_id TEXT NOT NULL,
            state TEXT NOT NULL,
            n INTEGER NOT NULL
        )""",
        """CREATE TABLE outbox_tallies (
            status TEXT PRIMARY KEY,
            n INTEGER NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE outbox_tally_deltas (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            n INTEGER NOT NULL
        )""",
        *TALLY_SEEDS,
        # A turn's completed inbounds, for the turn that ends after its inbound completed
        # (none does through the worker, which completes with the turn's result).
        "CREATE INDEX inbox_turn ON inbox(turn_id) WHERE result_kind = 'turn'",
        f"""CREATE TRIGGER inbox_tally_ai AFTER INSERT ON inbox
            WHEN new.state IN {_TALLIED_STATES} BEGIN
            INSERT INTO inbox_tally_deltas (channel_instance_id, state, n)
                SELECT new.channel_instance_id, new.state, 1
                UNION ALL SELECT new.channel_instance_id, 'unanswered', 1
                    WHERE {unanswered_inbound("new")};
        END""",
        f"""CREATE TRIGGER inbox_tally_au
            AFTER UPDATE OF channel_instance_id, state, result_kind, turn_id ON inbox
            WHEN old.state IN {_TALLIED_STATES} OR new.state IN {_TALLIED_STATES} BEGIN
            INSERT INTO inbox_tally_deltas (channel_instance_id, state, n)
                SELECT old.channel_instance_id, old.state, -1 WHERE old.state IN {_TALLIED_STATES}
                UNION ALL SELECT new.channel_instance_id, new.state, 1
                    WHERE new.state IN {_TALLIED_STATES}
                UNION ALL SELECT old.channel_instance_id, 'unanswered', -1
                    WHERE {unanswered_inbound("old")}
                UNION ALL SELECT new.channel_instance_id, 'unanswered', 1
                    WHERE {unanswered_inbound("new")};
        END""",
        f"""CREATE TRIGGER inbox_tally_ad AFTER DELETE ON inbox
            WHEN old.state IN {_TALLIED_STATES} BEGIN
            INSERT INTO inbox_tally_deltas (channel_instance_id, state, n)
                SELECT old.channel_instance_id, old.state, -1
                UNION ALL SELECT old.channel_instance_id, 'unanswered', -1
                    WHERE {unanswered_inbound("old")};
        END""",
        # A completed inbound counts as unanswered by its turn's outcome, which is set once.
        f"""CREATE TRIGGER turns_tally_au AFTER UPDATE OF turn_id, status ON turns
            WHEN ({unanswered_status("old.status")}) OR ({unanswered_status("new.status")}) BEGIN
            INSERT INTO inbox_tally_deltas (channel_instance_id, state, n)
                SELECT channel_instance_id, 'unanswered', -COUNT(*) FROM inbox
                WHERE turn_id = old.turn_id AND result_kind = 'turn' AND state = 'completed'
                    AND {unanswered_status("old.status")}
                GROUP BY channel_instance_id
                UNION ALL SELECT channel_instance_id, 'unanswered', COUNT(*) FROM inbox
                WHERE turn_id = new.turn_id AND result_kind = 'turn' AND state = 'completed'
                    AND {unanswered_status("new.status")}
                GROUP BY channel_instance_id;
        END""",
        f"""CREATE TRIGGER turns_tally_ad AFTER DELETE ON turns
            WHEN {unanswered_status("old.status")} BEGIN
            INSERT INTO inbox_tally_deltas (channel_instance_id, state, n)
                SELECT channel_instance_id, 'unanswered', -COUNT(*) FROM inbox
                WHERE turn_id = old.turn_id AND result_kind = 'turn' AND state = 'completed'
                GROUP BY channel_instance_id;
        END""",
        f"""CREATE TRIGGER outbox_tally_ai AFTER INSERT ON outbox
            WHEN new.status IN {_TALLIED_STATUSES} BEGIN
            INSERT INTO outbox_tally_deltas (status, n) VALUES (new.status, 1);
        END""",
        f"""CREATE TRIGGER outbox_tally_au AFTER UPDATE OF status ON outbox
            WHEN old.status IN {_TALLIED_STATUSES} OR new.status IN {_TALLIED_STATUSES} BEGIN
            INSERT INTO outbox_tally_deltas (status, n)
                SELECT old.status, -1 WHERE old.status IN {_TALLIED_STATUSES}
                UNION ALL SELECT new.status, 1 WHERE new.status IN {_TALLIED_STATUSES};
        END""",
        f"""CREATE TRIGGER outbox_tally_ad AFTER DELETE ON outbox
            WHEN old.status IN {_TALLIED_STATUSES} BEGIN
            INSERT INTO outbox_tally_deltas (status, n) VALUES (old.status, -1);
        END""",
        # The fold: the deltas up to this one summed into the tallies, then deleted; a
        # tally that reached zero goes (a channel instance whose rows were all pruned).
        f"""CREATE TRIGGER inbox_tally_fold AFTER INSERT ON inbox_tally_deltas
            WHEN new.id % {TALLY_FOLD} = 0 BEGIN
            INSERT INTO inbox_tallies (channel_instance_id, state, n)
                SELECT channel_instance_id, state, SUM(n) FROM inbox_tally_deltas
                WHERE id <= new.id GROUP BY channel_instance_id, state
                ON CONFLICT (channel_instance_id, state) DO UPDATE SET n = n + excluded.n;
            DELETE FROM inbox_tally_deltas WHERE id <= new.id;
            DELETE FROM inbox_tallies WHERE n = 0;
        END""",
        f"""CREATE TRIGGER outbox_tally_fold AFTER INSERT ON outbox_tally_deltas
            WHEN new.id % {TALLY_FOLD} = 0 BEGIN
            INSERT INTO outbox_tallies (status, n)
                SELECT status, SUM(n) FROM outbox_tally_deltas WHERE id <= new.id GROUP BY status
                ON CONFLICT (status) DO UPDATE SET n = n + excluded.n;
            DELETE FROM outbox_tally_deltas WHERE id <= new.id;
            DELETE FROM outbox_tallies WHERE n = 0;
        END""",
    ),
    # The counts of the finished rows, read once; the partial index of the completed turn
    # inbounds, built from them.
    rewrites=("inbox",),
)

MIGRATIONS: tuple[Migration, ...] = (
    _V1_BASE,
    _V2_OWNERS,
    _V3_TURNS,
    _V4_APPROVALS,
    _V5_CONTEXT,
    _V6_SESSION_LEASES,
    _V7_TURN_TOKENS,
    _V8_TERMINAL_RUNS,
    _V9_ATTACHMENTS,
    _V10_APPROVAL_OUTCOMES,
    _V11_MCP_SERVERS,
    _V12_INBOX,
    _V13_DELIVERY,
    _V14_CORES,
    _V15_APPROVAL_REVOCATIONS,
    _V16_TERMINAL_RUN_LEASES,
    _V17_COMMAND_REPLIES,
    _V18_DELIVERY_CLAIM_OWNERS,
    _V19_LEASE_LAPSE_NOTICES,
    _V20_DELIVERY_ORDER,
    _V21_INBOX_ORDER,
    _V22_ATTACHMENT_RECLAIM,
    _V23_MEMORY_PROVENANCE,
    _V24_OWNER_SEARCH,
    _V25_SESSION_ACTIVITY,
    _V26_ATTACHMENT_REFS,
    _V27_MEMORY_WORDS,
    _V28_TALLIES,
)
SCHEMA_VERSION = MIGRATIONS[-1].version
