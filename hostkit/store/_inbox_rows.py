"""The inbox group's statements: each function is one step run inside a write or read job.

Every write function runs on the writer connection inside the writer's
transaction (``BEGIN IMMEDIATE``), so a claim's select and update, or an
accept's inserts and checkpoint, are one atomic step for every process on the
database. Values are checked and encoded by the caller before the job is
queued: these functions only run statements and build frozen values from rows
(read by column name).
"""

from __future__ import annotations

import json
import sqlite3
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hostkit._free_space import free_bytes_at
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.freeze import FrozenMap, freeze, thaw
from hostkit.store._dialect import claim_isolation, is_postgres
from hostkit.store._inbox import ATTEMPTS_EXHAUSTED, COMMAND_ALLOWANCE, InboxLimits, InboxRoom
from hostkit.store._inbox_checks import reconcile_limit
from hostkit.store._sessions import insert_audit
from hostkit.store._tallies import fold_tallies
from hostkit.types import (
    UNPROCESSABLE,
    ChannelCounts,
    ClaimedInbound,
    CompletionDecision,
    InboundEnvelope,
    InboundRecord,
    InboxBacklog,
    InboxReceipt,
    PruneReport,
    RetryDecision,
    SourceCheckpoint,
    new_id,
)

__all__ = [
    "BACKLOG",
    "CHANNEL_COUNTS",
    "ClaimArgs",
    "EndArgs",
    "accept_rows",
    "backlog_counts",
    "channel_counts",
    "claim_rows",
    "claimed_owners",
    "complete_row",
    "envelope_params",
    "expire_claims",
    "extend_row",
    "fail_row",
    "list_records",
    "one_record",
    "prune_rows",
    "read_checkpoint",
    "release_row",
    "requeue_row",
    "reserve_row",
    "room_now",
]

_EMPTY_LIST = "[]"
_EMPTY_MAP = "{}"
TURN_REQUEST_PREFIX = "inbound:"
_NO_MAP = FrozenMap()


def exhausted_message(attempt: int, max_attempts: int) -> str:
    """The failure text of a row whose lease expired after its last allowed attempt."""
    return f"the lease of attempt {attempt} of {max_attempts} expired without a result"


_INSERT = (
    "INSERT INTO inbox (inbound_id, channel_instance_id, platform_event_key, kind, "
    "conversation_key, principal_key, authenticated_by, received_at, payload, payload_ref, "
    "artifacts, metadata, source_id, source_cursor, state, due_at, accepted_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'ready', ?, ?, ?) "
    "ON CONFLICT (channel_instance_id, platform_event_key) DO NOTHING"
)
_EXISTING = "SELECT inbound_id FROM inbox WHERE channel_instance_id = ? AND platform_event_key = ?"
# The queued backlog, counted no further than the limit: read from the inbox_due index
# (only ready and claimed rows), so a full inbox costs an accept no more than the limit.
_QUEUED = (
    "SELECT count(*) FROM (SELECT 1 FROM inbox WHERE state IN ('ready', 'claimed') LIMIT ?) AS q"
)
# PostgreSQL hands ids out at insert, not at commit: two accepts of one conversation
# could commit out of id order, and a claim between them would take the later message
# first. Accepts of one conversation therefore take turns (a lock held to the commit),
# all of a batch's in one statement, in lock-key order (two batches never wait on each
# other). The two-key form with hostkit's own class ("hkcv") keeps these keys apart from
# the one-key locks of the writer and the migration, whatever a sender names its
# conversation; two conversations whose hashes meet only take turns. SQLite has one
# writer: its id order is commit order.
_CONVERSATION_TURNS = (
    "SELECT pg_advisory_xact_lock(1751868278, k) FROM (SELECT DISTINCT hashtext(c) AS k "
    "FROM unnest(CAST(? AS text[])) AS c ORDER BY k) AS turns"
)
_CHANNEL = "INSERT INTO inbox_channels (channel_instance_id) VALUES (?) ON CONFLICT DO NOTHING"
_CHECKPOINT = (
    "INSERT INTO inbox_checkpoints (source_id, cursor, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (source_id) DO UPDATE SET cursor = excluded.cursor, "
    "updated_at = excluded.updated_at"
)

# Channel instances with a due row, least recently served first (the EXISTS is one
# probe of inbox_due per instance).
DUE_CHANNELS = (
    "SELECT c.channel_instance_id FROM inbox_channels AS c "
    "WHERE EXISTS (SELECT 1 FROM inbox AS i WHERE i.channel_instance_id = c.channel_instance_id "
    "AND i.state IN ('ready', 'claimed') AND i.due_at <= ?) "
    "ORDER BY c.served_seq, c.channel_instance_id"
)
_CLAIM_COLUMNS = (
    "id, inbound_id, channel_instance_id, platform_event_key, kind, conversation_key, "
    "principal_key, authenticated_by, received_at, payload, payload_ref, artifacts, metadata, "
    "source_id, source_cursor, state, due_at, attempt, turn_reserved"
)
# Only the oldest waiting or leased row of a conversation may be claimed (one probe of
# inbox_conversation_due): a conversation's messages are answered in the order they were
# accepted, across every process that claims, and one busy conversation holds one slot.
_FIRST_OF_CONVERSATION = (
    "NOT EXISTS (SELECT 1 FROM inbox AS earlier "
    "WHERE earlier.channel_instance_id = inbox.channel_instance_id "
    "AND earlier.conversation_key = inbox.conversation_key AND earlier.id < inbox.id "
    "AND earlier.state IN ('ready', 'claimed'))"
)
# One channel instance's oldest due rows (due_at, then accept order), a page at a time.
DUE_ROWS = (
    f"SELECT {_CLAIM_COLUMNS} FROM inbox WHERE channel_instance_id = ? "
    f"AND state IN ('ready', 'claimed') AND due_at <= ? AND {_FIRST_OF_CONVERSATION} "
    "ORDER BY due_at, id LIMIT ? /*pg: FOR UPDATE SKIP LOCKED */"
)
_DUE_ROWS_AFTER = (
    f"SELECT {_CLAIM_COLUMNS} FROM inbox WHERE channel_instance_id = ? "
    "AND state IN ('ready', 'claimed') AND due_at <= ? AND (due_at, id) > (?, ?) "
    f"AND {_FIRST_OF_CONVERSATION} ORDER BY due_at, id LIMIT ? /*pg: FOR UPDATE SKIP LOCKED */"
)
_CLAIM = (
    "UPDATE inbox SET state = 'claimed', due_at = ?, attempt = attempt + 1, claim_token = ?, "
    "owner = ?, outcome_digest = NULL, updated_at = ? WHERE id = ?"
)
_EXHAUST = (
    "UPDATE inbox SET state = 'dead_lettered', due_at = NULL, claim_token = NULL, owner = NULL, "
    "outcome_digest = NULL, failure_kind = 'transient', failure_code = ?, failure_message = ?, "
    "updated_at = ? WHERE id = ?"
)
# The serve counter: each claimed row stamps its channel instance with the next number
# after the highest so far (inbox_channels_served); one write per instance per claim.
_LAST_SERVED = "SELECT MAX(served_seq) FROM inbox_channels"
_SERVED = "UPDATE inbox_channels SET served_seq = ? WHERE channel_instance_id = ?"

# Fencing: only the current claimant's token changes a claimed row.
_HELD = "inbound_id = ? AND state = 'claimed' AND claim_token = ?"
_COMPLETE = (
    "UPDATE inbox SET state = 'completed', due_at = NULL, result_kind = ?, turn_id = ?, "
    f"outcome_digest = ?, updated_at = ? WHERE {_HELD}"
)
_FAIL = (
    "UPDATE inbox SET state = ?, due_at = ?, failure_kind = ?, failure_code = ?, "
    f"failure_message = ?, outcome_digest = ?, updated_at = ? WHERE {_HELD} RETURNING attempt"
)
_RELEASE = (
    "UPDATE inbox SET state = 'ready', due_at = ?, attempt = MAX(attempt - 1, 0), "
    f"claim_token = NULL, owner = NULL, updated_at = ? WHERE {_HELD}"
)
# A claim that ended its conversation's turn (completed, dead-lettered) makes the
# conversation's next waiting message due no earlier than now: conversations take turns
# by when they became eligible, so a backlog's next message (accepted long ago) goes
# behind a quiet conversation's message accepted since. A later due_at (a deferred or
# retried message) stays. The conversation is read first by the ended row's unique
# inbound id and bound as values, ordered by inbox_conversation_due's whole key (its
# state term is here for that): PostgreSQL's planner, given a join and the primary key's
# order instead, walked every active row of a large backlog.
ENDED_CONVERSATION = "SELECT channel_instance_id, conversation_key FROM inbox WHERE inbound_id = ?"
NEXT_IN_TURN = (
    "UPDATE inbox SET due_at = ? WHERE id = (SELECT id FROM inbox "
    "WHERE channel_instance_id = ? AND conversation_key = ? AND state IN ('ready', 'claimed') "
    "ORDER BY channel_instance_id, conversation_key, id LIMIT 1) "
    "AND state = 'ready' AND due_at < ?"
)
_RESERVE = f"UPDATE inbox SET turn_reserved = 1, updated_at = ? WHERE {_HELD}"
_EXTEND = f"UPDATE inbox SET due_at = ?, updated_at = ? WHERE {_HELD}"
_FENCE = (
    "SELECT state, claim_token, outcome_digest, attempt, due_at FROM inbox WHERE inbound_id = ?"
)
# Dead owners' claims: due now, as if their leases had run out (token and attempt kept).
# The state IN term matches inbox_due's, so both statements walk that partial index.
_CLAIMED_OWNERS = (
    "SELECT DISTINCT owner FROM inbox WHERE state IN ('ready', 'claimed') "
    "AND state = 'claimed' AND owner > ? ORDER BY owner LIMIT ?"
)
_EXPIRE = (
    "UPDATE inbox SET due_at = ?, updated_at = ? WHERE state IN ('ready', 'claimed') "
    "AND state = 'claimed' AND due_at > ? AND owner IN ({owners})"
)
_BRING_FORWARD = (
    "UPDATE inbox SET due_at = ?, updated_at = ? WHERE state = 'ready' AND due_at > ? "
    "AND inbound_id IN ({ids})"
)
_REQUEUE = (
    "UPDATE inbox SET state = 'ready', due_at = ?, attempt = 0, requeues = requeues + 1, "
    "claim_token = NULL, owner = NULL, outcome_digest = NULL, updated_at = ? "
    "WHERE inbound_id = ? AND state = 'dead_lettered'"
)

_RECORD_COLUMNS = (
    "inbound_id, channel_instance_id, platform_event_key, kind, conversation_key, state, "
    "attempt, received_at, accepted_at, updated_at, due_at, result_kind, turn_id, "
    "failure_code, failure_message, payload IS NULL AS pruned, requeues"
)
_PRUNE_TOMBSTONES = (
    "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox WHERE state = 'completed' "
    "AND updated_at < ? ORDER BY updated_at LIMIT ?)"
)
# Not the rows old enough to be deleted: a pass whose deletes stopped at its limit leaves
# them for the next pass, which deletes them whole.
_PRUNE_PAYLOADS = (
    "UPDATE inbox SET payload = NULL, payload_ref = NULL, artifacts = NULL, metadata = NULL "
    "WHERE id IN (SELECT id FROM inbox INDEXED BY inbox_payloads "
    "WHERE state = 'completed' AND payload IS NOT NULL "
    "AND updated_at < ? AND updated_at >= ? ORDER BY updated_at LIMIT ?)"
)
# A dead letter the channel accepted without its text has nothing a requeue could answer:
# past the replay horizon it goes as a tombstone does (a sender cannot fill the table).
_PRUNE_UNPROCESSABLE = (
    "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox INDEXED BY inbox_dead "
    f"WHERE state = 'dead_lettered' AND kind = '{UNPROCESSABLE}' "
    f"AND failure_code = '{UNPROCESSABLE}' "
    "AND updated_at < ? ORDER BY id LIMIT ?)"
)


def _rows(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor


# -- accept ----------------------------------------------------------------------------


def envelope_params(envelope: InboundEnvelope, now: float) -> list[Any]:
    """The insert's parameters for ``envelope`` (inbound id filled in by ``accept_rows``)."""
    checkpoint = envelope.source_checkpoint
    metadata = envelope.metadata
    return [
        None,
        envelope.channel_instance_id,
        envelope.platform_event_key,
        envelope.kind,
        envelope.conversation_key,
        envelope.principal_key,
        envelope.authenticated_by,
        envelope.received_at,
        envelope.payload,
        envelope.payload_ref,
        json.dumps(list(envelope.artifacts)) if envelope.artifacts else _EMPTY_LIST,
        json.dumps(thaw(metadata), ensure_ascii=False) if metadata else _EMPTY_MAP,
        None if checkpoint is None else checkpoint.source_id,
        None if checkpoint is None else checkpoint.cursor,
        now,
        now,
        now,
    ]


@dataclass(frozen=True, slots=True)
class Room:
    """A checked ``InboxLimits``, with the directory whose disk keeps ``reserve_bytes``
    free (None: the database is on a server's disk)."""

    max_queued: int
    reserve_bytes: int
    directory: Path | None


Refusal = Literal["backlog", "disk"]


def accept_rows(
    conn: sqlite3.Connection,
    batch: Sequence[tuple[tuple[str, str], list[Any]]],
    checkpoint: tuple[str, str, float] | None,
    unseen_channels: frozenset[str],
    room: Room | None = None,
) -> tuple[InboxReceipt, ...] | Refusal:
    """Insert each new key (dedup by the unique index), then the checkpoint; one transaction.

    Only channel instances in ``unseen_channels`` may lack their fairness row:
    the ones of those that got an accepted row get it (if still missing). With
    ``room``, a batch that would pass it writes nothing and returns why (the
    caller raises ``InboxFull``): returned, not raised, so the writer need not
    roll back and rerun the other jobs of its group commit.
    """
    receipts: list[InboxReceipt] = []
    first: dict[tuple[str, str], str] = {}
    channels: set[str] = set()
    if is_postgres(conn):
        conversations = sorted({json.dumps([params[1], params[4]]) for _, params in batch})
        conn.execute(_CONVERSATION_TURNS, [conversations]).fetchall()
    if room is not None:
        refusal = _refusal(conn, batch, room)
        if refusal is not None:
            return refusal
    for key, params in batch:
        known = first.get(key)
        if known is not None:
            receipts.append(InboxReceipt(known, "duplicate"))
            continue
        inbound_id = new_id("inb")
        params[0] = inbound_id
        if conn.execute(_INSERT, params).rowcount == 1:
            if key[0] in unseen_channels:
                channels.add(key[0])
            receipts.append(InboxReceipt(inbound_id, "accepted"))
        else:
            inbound_id = conn.execute(_EXISTING, key).fetchone()[0]
            receipts.append(InboxReceipt(inbound_id, "duplicate"))
        first[key] = inbound_id
    for channel in sorted(channels):
        conn.execute(_CHANNEL, (channel,))
    if checkpoint is not None:
        conn.execute(_CHECKPOINT, checkpoint)
    return tuple(receipts)


def _refusal(
    conn: sqlite3.Connection, batch: Sequence[tuple[tuple[str, str], list[Any]]], room: Room
) -> Refusal | None:
    """Why the batch's new keys do not fit, or None. Duplicates need no room, so keys
    are looked up only when the backlog or the disk is short. Commands (an approval's
    answer must reach a full inbox) pass the backlog within ``COMMAND_ALLOWANCE`` more,
    and the disk's reserve down to half of it: each still writes rows, and a flood of
    them must not run the disk full either."""
    # None: the database is on a server's disk, which the server keeps.
    free_bytes = None if room.directory is None else free_bytes_at(room.directory)
    short_disk = free_bytes is not None and free_bytes < room.reserve_bytes
    below_half = free_bytes is not None and free_bytes < room.reserve_bytes // 2
    ceiling = room.max_queued + COMMAND_ALLOWANCE
    queued = queued_rows(conn, ceiling)
    if not short_disk and room.max_queued - queued >= len(batch):
        return None
    fresh = {
        key: params[3] == "command"
        for key, params in batch
        if conn.execute(_EXISTING, key).fetchone() is None
    }
    others = sum(not command for command in fresh.values())
    if fresh and short_disk and (others or below_half):
        return "disk"
    if (others and others > room.max_queued - queued) or len(fresh) > ceiling - queued:
        return "backlog"
    return None


def queued_rows(conn: sqlite3.Connection, most: int) -> int:
    """Inbounds ``ready`` or ``claimed``, counted up to ``most`` (``inbox_due`` holds only
    queued rows: the read stops at ``most`` entries, however long the backlog)."""
    return int(conn.execute(_QUEUED, [most]).fetchone()[0])


def room_now(conn: sqlite3.Connection, limits: InboxLimits, directory: Path | None) -> InboxRoom:
    """``InboxStore.room``: the backlog up to the limit and, with ``directory``, its free space."""
    free = None if directory is None else free_bytes_at(directory)
    return InboxRoom(limits, queued_rows(conn, limits.max_queued), free)


def read_checkpoint(conn: sqlite3.Connection, source_id: str) -> str | None:
    row = (
        _rows(conn)
        .execute("SELECT cursor FROM inbox_checkpoints WHERE source_id = ?", [source_id])
        .fetchone()
    )
    return None if row is None else str(row["cursor"])


# -- claim -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimArgs:
    """A checked claim request."""

    owner: str
    now: float
    lease_s: float
    limit: int
    max_attempts: int


class _Feed:
    """One channel instance's due rows, fetched a page at a time as rounds need them."""

    __slots__ = ("_conn", "_done", "_last", "_now", "_page", "_rows", "channel")

    def __init__(self, conn: sqlite3.Connection, channel: str, now: float, page: int) -> None:
        self._conn = conn
        self.channel = channel
        self._now = now
        self._page = page
        self._rows: deque[sqlite3.Row] = deque()
        self._last: tuple[float, int] | None = None
        self._done = False

    def next(self) -> sqlite3.Row | None:
        if not self._rows and not self._done:
            cursor = _rows(self._conn)
            if self._last is None:
                page = cursor.execute(DUE_ROWS, [self.channel, self._now, self._page]).fetchall()
            else:
                page = cursor.execute(
                    _DUE_ROWS_AFTER, [self.channel, self._now, *self._last, self._page]
                ).fetchall()
            self._done = len(page) < self._page
            if page:
                self._last = (page[-1]["due_at"], page[-1]["id"])
            self._rows.extend(page)
        return self._rows.popleft() if self._rows else None


def claim_rows(conn: sqlite3.Connection, args: ClaimArgs) -> tuple[ClaimedInbound, ...]:
    """Plan the round-robin over due channel instances, then lease the planned rows.

    On PostgreSQL the candidates are locked as they are read (``FOR UPDATE
    SKIP LOCKED`` at READ COMMITTED), so claimers on other Hosts skip them.
    """
    claim_isolation(conn)
    fold_tallies(conn)
    channels = [row[0] for row in conn.execute(DUE_CHANNELS, [args.now]).fetchall()]
    if not channels:
        return ()
    page = -(-args.limit // len(channels))
    active = [_Feed(conn, channel, args.now, page) for channel in channels]
    chosen: list[sqlite3.Row] = []
    exhausted: list[sqlite3.Row] = []
    while active and len(chosen) < args.limit:
        still: list[_Feed] = []
        for feed in active:
            if len(chosen) >= args.limit:
                break
            row = feed.next()
            while row is not None and _exhausted(row, args.max_attempts):
                exhausted.append(row)
                row = feed.next()
            if row is not None:
                chosen.append(row)
                still.append(feed)
        active = still
    if exhausted:
        conn.executemany(
            _EXHAUST,
            [
                (
                    ATTEMPTS_EXHAUSTED,
                    exhausted_message(row["attempt"], args.max_attempts),
                    args.now,
                    row["id"],
                )
                for row in exhausted
            ],
        )
        _next_in_turn(conn, [row["inbound_id"] for row in exhausted], args.now)
    if not chosen:
        return ()
    lease = args.now + args.lease_s
    tokens = [new_id("clm") for _ in chosen]
    conn.executemany(
        _CLAIM,
        [
            (lease, token, args.owner, args.now, row["id"])
            for token, row in zip(tokens, chosen, strict=True)
        ],
    )
    last = conn.execute(_LAST_SERVED).fetchone()[0] or 0
    served = {row["channel_instance_id"]: last + n for n, row in enumerate(chosen, start=1)}
    # In channel order, so two claimers never lock two channel rows in opposite orders.
    conn.executemany(_SERVED, [(served[channel], channel) for channel in sorted(served)])
    return tuple(_claimed(row, token, lease) for token, row in zip(tokens, chosen, strict=True))


def _exhausted(row: sqlite3.Row, max_attempts: int) -> bool:
    """A due claimed row is an expired lease; past its last attempt it is dead-lettered
    (``reconcile_limit``)."""
    limit = reconcile_limit(max_attempts, turn_reserved=bool(row["turn_reserved"]))
    return bool(row["state"] == "claimed" and row["attempt"] >= limit)


def _claimed(row: sqlite3.Row, token: str, lease: float) -> ClaimedInbound:
    return ClaimedInbound(
        inbound_id=row["inbound_id"],
        envelope=_envelope(row),
        claim_token=token,
        attempt=row["attempt"] + 1,
        lease_expires_at=lease,
        turn_request_id=TURN_REQUEST_PREFIX + row["inbound_id"],
        turn_reserved=bool(row["turn_reserved"]),
    )


def _envelope(row: sqlite3.Row) -> InboundEnvelope:
    artifacts = row["artifacts"]
    metadata = row["metadata"]
    source_id = row["source_id"]
    return InboundEnvelope.restore(
        channel_instance_id=row["channel_instance_id"],
        platform_event_key=row["platform_event_key"],
        conversation_key=row["conversation_key"],
        principal_key=row["principal_key"],
        authenticated_by=row["authenticated_by"],
        received_at=row["received_at"],
        kind=row["kind"],
        payload=row["payload"] or "",
        payload_ref=row["payload_ref"],
        artifacts=tuple(json.loads(artifacts)) if artifacts and artifacts != _EMPTY_LIST else (),
        metadata=freeze(json.loads(metadata)) if metadata and metadata != _EMPTY_MAP else _NO_MAP,
        source_checkpoint=(
            None if source_id is None else SourceCheckpoint(source_id, row["source_cursor"])
        ),
    )


# -- fenced steps ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndArgs:
    """A checked complete or fail: the fence and what to record."""

    inbound_id: str
    claim_token: str
    digest: str
    now: float


_Refusal = Literal["conflict", "already_terminal", "stale_claim"]


def _fence(
    conn: sqlite3.Connection, args: EndArgs
) -> tuple[Literal["again"] | _Refusal, sqlite3.Row]:
    """Why a fenced end did not apply: 'again', 'conflict', 'already_terminal', 'stale_claim'."""
    row = _rows(conn).execute(_FENCE, [args.inbound_id]).fetchone()
    if row is None:
        raise NotFoundOrUnauthorized("inbound")
    if row["claim_token"] == args.claim_token and row["outcome_digest"] is not None:
        return ("again" if row["outcome_digest"] == args.digest else "conflict"), row
    if row["state"] in ("completed", "dead_lettered"):
        return "already_terminal", row
    return "stale_claim", row


def complete_row(
    conn: sqlite3.Connection, args: EndArgs, result_kind: str, turn_id: str | None
) -> CompletionDecision:
    changed = conn.execute(
        _COMPLETE,
        [result_kind, turn_id, args.digest, args.now, args.inbound_id, args.claim_token],
    ).rowcount
    if changed == 1:
        _next_in_turn(conn, [args.inbound_id], args.now)
        return CompletionDecision(args.inbound_id, "completed", "completed")
    why, row = _fence(conn, args)
    if why == "again":
        return CompletionDecision(args.inbound_id, "completed", row["state"])
    return CompletionDecision(args.inbound_id, why, row["state"])


def fail_row(
    conn: sqlite3.Connection,
    args: EndArgs,
    failure: tuple[str, str, str],
    retry_at: float | None,
) -> RetryDecision:
    state = "dead_lettered" if retry_at is None else "ready"
    done = conn.execute(
        _FAIL,
        [state, retry_at, *failure, args.digest, args.now, args.inbound_id, args.claim_token],
    ).fetchone()
    if done is not None:
        if retry_at is None:
            _next_in_turn(conn, [args.inbound_id], args.now)
            return RetryDecision(args.inbound_id, "dead_lettered", "dead_lettered", done[0])
        return RetryDecision(args.inbound_id, "retry", "ready", done[0], retry_at)
    why, row = _fence(conn, args)
    if why != "again":
        return RetryDecision(args.inbound_id, why, row["state"], row["attempt"])
    if row["state"] == "ready":
        return RetryDecision(args.inbound_id, "retry", "ready", row["attempt"], row["due_at"])
    return RetryDecision(args.inbound_id, "dead_lettered", row["state"], row["attempt"])


def _next_in_turn(conn: sqlite3.Connection, ended: Sequence[str], now: float) -> None:
    """The conversations of ``ended`` (rows that just left ready/claimed) go to the back of
    the due order: each one's next waiting message is due no earlier than ``now``.

    A retried or released row stays its conversation's first and is already due at
    ``now`` or later, so only the ends that free a conversation call this.
    """
    for inbound_id in ended:
        row = conn.execute(ENDED_CONVERSATION, [inbound_id]).fetchone()
        if row is not None:
            conn.execute(NEXT_IN_TURN, [now, row[0], row[1], now])


def release_row(
    conn: sqlite3.Connection, inbound_id: str, token: str, now: float, due_at: float
) -> bool:
    return conn.execute(_RELEASE, [due_at, now, inbound_id, token]).rowcount == 1


def reserve_row(conn: sqlite3.Connection, inbound_id: str, token: str, now: float) -> bool:
    return conn.execute(_RESERVE, [now, inbound_id, token]).rowcount == 1


def extend_row(
    conn: sqlite3.Connection, inbound_id: str, token: str, now: float, lease: float
) -> float | None:
    changed = conn.execute(_EXTEND, [lease, now, inbound_id, token]).rowcount
    return lease if changed == 1 else None


def claimed_owners(conn: sqlite3.Connection, after: str | None, limit: int) -> tuple[str, ...]:
    rows = conn.execute(_CLAIMED_OWNERS, ["" if after is None else after, limit]).fetchall()
    return tuple(str(row[0]) for row in rows)


def expire_claims(conn: sqlite3.Connection, owners: Sequence[str], now: float) -> int:
    """Make the claims of ``owners`` due at ``now``; how many rows changed."""
    sql = _EXPIRE.format(owners=", ".join("?" * len(owners)))
    return conn.execute(sql, [now, now, now, *owners]).rowcount


def bring_forward(
    conn: sqlite3.Connection, inbound_ids: Sequence[str], due_at: float, now: float
) -> int:
    """Make the named ready rows due later than ``due_at`` due at it; how many changed."""
    sql = _BRING_FORWARD.format(ids=", ".join("?" * len(inbound_ids)))
    return conn.execute(sql, [due_at, now, due_at, *inbound_ids]).rowcount


def requeue_row(
    conn: sqlite3.Connection, inbound_id: str, *, reason: str, actor: str, now: float
) -> InboundRecord:
    """Dead letter -> ready, with its ``inbox.requeue`` audit row in the same transaction."""
    if conn.execute(_REQUEUE, [now, now, inbound_id]).rowcount != 1:
        if one_record(conn, inbound_id) is None:
            raise NotFoundOrUnauthorized("inbound")
        raise InvalidValue("only a dead-lettered inbound can be requeued")
    insert_audit(
        conn,
        "inbox.requeue",
        principal_id=actor,
        authority="operator",
        subject=f"inbound:{inbound_id}",
        reason=reason,
        detail={"inbound_id": inbound_id, "actor": actor},
    )
    record = one_record(conn, inbound_id)
    assert record is not None  # updated just above, in this transaction
    return record


# -- retention and operators -----------------------------------------------------------


def prune_rows(
    conn: sqlite3.Connection, payload_before: float, tombstone_before: float, limit: int
) -> PruneReport:
    """Delete old tombstones (and unprocessable dead letters) first, then clear payloads of
    the completed rows that stay."""
    removed = conn.execute(_PRUNE_TOMBSTONES, [tombstone_before, limit]).rowcount
    removed += conn.execute(_PRUNE_UNPROCESSABLE, [tombstone_before, limit]).rowcount
    cleared = conn.execute(_PRUNE_PAYLOADS, [payload_before, tombstone_before, limit]).rowcount
    return PruneReport(payloads_cleared=cleared, tombstones_removed=removed)


# The live status's figures: each count walks the partial index of its state (inbox_due
# holds the queued rows only, inbox_dead the dead letters), never the completed history.
# The state IN term matches inbox_due's, so SQLite sees the index fits.
BACKLOG = (
    "SELECT (SELECT count(*) FROM inbox INDEXED BY inbox_due "
    "WHERE state IN ('ready', 'claimed') AND state = 'ready') AS ready, "
    "(SELECT count(*) FROM inbox INDEXED BY inbox_dead "
    "WHERE state = 'dead_lettered') AS dead_lettered"
)


def backlog_counts(conn: sqlite3.Connection) -> InboxBacklog:
    ready, dead_lettered = conn.execute(BACKLOG).fetchone()
    return InboxBacklog(ready=int(ready), dead_lettered=int(dead_lettered))


# Every channel instance's rows per state: the live states counted from their partial index
# (inbox_due), the finished ones read from the tallies and the deltas not yet folded into
# them (schema v28), so a count never reads the completed history.
CHANNEL_COUNTS = (
    "SELECT channel_instance_id, state, SUM(n) AS n FROM ("
    "SELECT channel_instance_id, state, COUNT(*) AS n FROM inbox INDEXED BY inbox_due "
    "WHERE state IN ('ready', 'claimed') GROUP BY channel_instance_id, state "
    "UNION ALL SELECT channel_instance_id, state, n FROM inbox_tallies "
    "UNION ALL SELECT channel_instance_id, state, n FROM inbox_tally_deltas"
    ") AS q GROUP BY channel_instance_id, state HAVING SUM(n) <> 0 ORDER BY channel_instance_id"
)


def channel_counts(conn: sqlite3.Connection) -> tuple[ChannelCounts, ...]:
    counts: dict[str, dict[str, int]] = {}
    for channel, state, n in conn.execute(CHANNEL_COUNTS):
        # SUM is PostgreSQL's numeric: a whole number here, read as int on both engines.
        counts.setdefault(channel, {})[state] = int(n)
    return tuple(ChannelCounts(channel, **states) for channel, states in counts.items())


def list_records(
    conn: sqlite3.Connection, state: str | None, channel: str | None, limit: int
) -> tuple[InboundRecord, ...]:
    # Only the filters asked for, so the planner can use inbox_dead / the rowid order.
    where = [
        clause
        for clause, value in (("state = ?", state), ("channel_instance_id = ?", channel))
        if value is not None
    ]
    params = [value for value in (state, channel) if value is not None]
    order = "id"
    if state in ("ready", "claimed"):
        # The live rows are few and a week of completed ones many: walking the id order
        # back would read every completed row (and its payload) before the first match.
        # The live rows' partial index and a sort of what it holds: its predicate stated,
        # and the id order hidden from the planner (+id), which would prefer the walk.
        where.append("state IN ('ready', 'claimed')")
        order = "+id"
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    rows = _rows(conn).execute(
        f"SELECT {_RECORD_COLUMNS} FROM inbox {condition}ORDER BY {order} DESC LIMIT ?",
        [*params, limit],
    )
    return tuple(_record(row) for row in rows)


def one_record(conn: sqlite3.Connection, inbound_id: str) -> InboundRecord | None:
    row = (
        _rows(conn)
        .execute(f"SELECT {_RECORD_COLUMNS} FROM inbox WHERE inbound_id = ?", [inbound_id])
        .fetchone()
    )
    return None if row is None else _record(row)


def _record(row: sqlite3.Row) -> InboundRecord:
    return InboundRecord(
        inbound_id=row["inbound_id"],
        channel_instance_id=row["channel_instance_id"],
        platform_event_key=row["platform_event_key"],
        kind=row["kind"],
        conversation_key=row["conversation_key"],
        state=row["state"],
        attempt=row["attempt"],
        received_at=row["received_at"],
        accepted_at=row["accepted_at"],
        updated_at=row["updated_at"],
        due_at=row["due_at"],
        result_kind=row["result_kind"],
        turn_id=row["turn_id"],
        failure_code=row["failure_code"],
        failure_message=row["failure_message"],
        payload_pruned=bool(row["pruned"]),
        requeues=row["requeues"],
    )
