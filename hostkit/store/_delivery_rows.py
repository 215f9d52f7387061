"""The delivery group's statements (the ``outbox`` table of migration 13).

Every write function runs on the writer connection inside the writer's
transaction (``BEGIN IMMEDIATE``), so a claim's select and update are one
atomic step for every process on the database. Arguments are checked by the
caller before the job is queued: these functions run statements and build
frozen values from rows, read by column name. The inserts (``insert_intents``)
run inside ``TurnStore.finish``'s transaction, with the terminal turn.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hostkit.errors import (
    InvalidValue,
    NotFoundOrUnauthorized,
    StaleClaim,
    StoreError,
)
from hostkit.freeze import thaw
from hostkit.store._approval_facts import approval_facts, fact_hides, fact_line
from hostkit.store._approval_values import decode_view
from hostkit.store._delivery import DELIVERY_ATTEMPTS_EXHAUSTED, PRUNED_PAYLOAD
from hostkit.store._dialect import claim_isolation
from hostkit.store._json import canonical_json
from hostkit.store._sessions import insert_audit
from hostkit.store._tallies import fold_tallies
from hostkit.types import (
    PARTIAL_KEY,
    ClaimedDelivery,
    DeliveryCounts,
    DeliveryIntent,
    PruneReport,
    approval_code,
    new_id,
)

__all__ = [
    "COUNTS",
    "DEAD_LETTERS",
    "DUE_ROWS",
    "NEXT_DUE",
    "ClaimArgs",
    "approval_prompt",
    "claim_rows",
    "claimed_owners",
    "count_rows",
    "dead_letter_count",
    "delivered_row",
    "expire_claims",
    "extend_row",
    "failed_row",
    "insert_intents",
    "insert_reply",
    "list_intents",
    "next_due_row",
    "one_intent",
    "prune_rows",
    "release_row",
    "retry_row",
]

# An approval prompt's one-line summary of the call's (already redacted) arguments.
MAX_PROMPT_SUMMARY = 200
_SUBJECT = "delivery intent"
_DUE = "status IN ('pending', 'sending')"
# The database clock in wall-clock seconds (as created_at, which is its ISO text).
_CLOCK = "round((julianday('now') - 2440587.5) * 86400.0, 3)"

_INSERT = (
    "INSERT INTO outbox (intent_id, turn_id, session_id, route, payload, status, attempts, "
    f"next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, {_CLOCK}, "
    f"?, {_CLOCK})"
)
_COLUMNS = (
    "id, intent_id, turn_id, inbound_id, session_id, route, payload, status, attempts, "
    "next_attempt_at, created_at, claim_token, last_error, delivered_at, requeues"
)
# A command inbound's reply: one per inbound (its intent id is derived from the inbound's),
# so a repeat of the command (a crash before the inbound was recorded) writes none.
_INSERT_REPLY = (
    "INSERT INTO outbox (intent_id, inbound_id, session_id, route, payload, status, attempts, "
    f"next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, {_CLOCK}, "
    f"?, {_CLOCK}) ON CONFLICT (intent_id) DO NOTHING"
)
# A session's intents go out one at a time, in the order they were written: a row waits
# while an older one of its session is pending (due later, after a failure) or being sent
# (outbox_session_due). So answers reach a chat in turn order, the approval prompt after
# the text that explains it, across every process that delivers.
_FIRST_OF_SESSION = (
    "NOT EXISTS (SELECT 1 FROM outbox AS earlier WHERE earlier.session_id = outbox.session_id "
    f"AND earlier.id < outbox.id AND earlier.{_DUE})"
)
# The due rows in due order (outbox_due gives the order; rowid breaks ties). A claimed or
# dead-lettered row leaves the due set, so re-running the query pages forward.
DUE_ROWS = (
    f"SELECT {_COLUMNS} FROM outbox WHERE {_DUE} AND next_attempt_at <= ? "
    f"AND {_FIRST_OF_SESSION} ORDER BY next_attempt_at, id LIMIT ? "
    "/*pg: FOR UPDATE SKIP LOCKED */"
)
# The same, leaving out the channel aliases in the first JSON array parameter (those at the
# claimant's per-channel limit): a row of theirs is never handed out, so never handed back.
# A route that names no channel is never left out (its attempt fails at once, bad_route).
# And leaving out the intents in the second (the claimant's own sends under way): however
# its clock moved, it never takes over a send it is making and renewing itself.
_ROUTE_CHANNEL = "json_extract(route, '$.channel')"
_DUE_ROWS_EXCEPT = (
    f"SELECT {_COLUMNS} FROM outbox WHERE {_DUE} AND next_attempt_at <= ? "
    f"AND ({_ROUTE_CHANNEL} IS NULL OR {_ROUTE_CHANNEL} NOT IN (SELECT value FROM json_each(?))) "
    "AND intent_id NOT IN (SELECT value FROM json_each(?)) "
    f"AND {_FIRST_OF_SESSION} ORDER BY next_attempt_at, id LIMIT ? "
    "/*pg: FOR UPDATE SKIP LOCKED */"
)
# When the first row becomes claimable (a waiting row of a busy session does not count).
NEXT_DUE = f"SELECT MIN(next_attempt_at) FROM outbox WHERE {_DUE} AND {_FIRST_OF_SESSION}"
_CLAIM = (
    "UPDATE outbox SET status = 'sending', next_attempt_at = ?, attempts = attempts + 1, "
    "claim_token = ?, claim_owner = ?, updated_at = ? WHERE id = ?"
)
# Dead owners' claims: due now, as if their leases had run out (token and attempt kept).
# The status IN term matches outbox_due's, so both statements walk that partial index.
_CLAIMED_OWNERS = (
    f"SELECT DISTINCT claim_owner FROM outbox WHERE {_DUE} AND status = 'sending' "
    "AND claim_owner > ? ORDER BY claim_owner LIMIT ?"
)
_EXPIRE = (
    f"UPDATE outbox SET next_attempt_at = ?, updated_at = ? WHERE {_DUE} "
    "AND status = 'sending' AND next_attempt_at > ? AND claim_owner IN ({owners})"
)
_EXHAUST = (
    "UPDATE outbox SET status = 'dead_lettered', next_attempt_at = NULL, last_error = ?, "
    "updated_at = ? WHERE id = ?"
)
# Fencing: only the current claimant's token changes a sending row.
_HELD = "intent_id = ? AND status = 'sending' AND claim_token = ?"
_DELIVERED = (
    "UPDATE outbox SET status = 'delivered', next_attempt_at = NULL, delivered_at = ?, "
    f"updated_at = ? WHERE {_HELD}"
)
_FAILED = (
    "UPDATE outbox SET status = ?, next_attempt_at = ?, last_error = ?, "
    "claim_token = CASE WHEN ? = 'pending' THEN NULL ELSE claim_token END, "
    f"updated_at = ? WHERE {_HELD}"
)
_EXTEND = f"UPDATE outbox SET next_attempt_at = ?, updated_at = ? WHERE {_HELD}"
_RELEASE = (
    "UPDATE outbox SET status = 'pending', next_attempt_at = ?, attempts = MAX(attempts - 1, 0), "
    f"claim_token = NULL, updated_at = ? WHERE {_HELD}"
)
_RETRY = (
    "UPDATE outbox SET status = 'pending', next_attempt_at = ?, attempts = 0, "
    "requeues = requeues + 1, claim_token = NULL, updated_at = ? "
    f"WHERE intent_id = ? AND status = 'dead_lettered' AND payload <> '{PRUNED_PAYLOAD}'"
)
# Retention of delivered intents (delivered_at is on the store's clock, as the cut-offs
# are). Rows old enough to be deleted are left to the delete, as the inbox does.
# Oldest first through outbox_delivered / outbox_delivered_payload (schema v24): a pass
# reads what it prunes, not every delivered row kept (a week of answers).
_PRUNE_ROWS = (
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE status = 'delivered' "
    "AND delivered_at < ? ORDER BY delivered_at LIMIT ?)"
)
_PRUNE_PAYLOADS = (
    f"UPDATE outbox SET payload = '{PRUNED_PAYLOAD}' WHERE id IN (SELECT id FROM outbox "
    f"WHERE status = 'delivered' AND payload <> '{PRUNED_PAYLOAD}' "
    "AND delivered_at < ? AND delivered_at >= ? ORDER BY delivered_at LIMIT ?)"
)
_PROMPT_APPROVAL = "SELECT effect, view FROM approvals WHERE approval_id = ? AND status = 'pending'"


# Said beside a summary that leaves part of the call out.
PARTIAL_PROMPT = "not all of this call is shown: approve only if you know what it runs"


def _rows(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor


# -- written with the terminal turn ----------------------------------------------------


def approval_prompt(conn: sqlite3.Connection, approval_id: str) -> dict[str, Any] | None:
    """The outbox payload asking a channel user to answer ``approval_id``, if it is pending.

    Read from the approvals row (same transaction): the tool is its effect; then
    what the approver view says beside the arguments, never cut: the tool's
    warning (``UNSANDBOXED``), the Host secrets the call binds (their names; a
    secret-named argument's value is masked), what the Host checked of where it
    goes (its target) and that it replaces a file (whose diff a chat line cannot
    hold: the prompt says so), read by ``approval_facts`` as ``hostkit approvals
    list`` reads them; then the summary of its arguments, which
    ``approval_view`` already field-name-redacted and stripped of bound secret
    values. ``bounded`` masks secret-shaped text once more and keeps each part
    to one line, its bound counted once invisible characters are escaped. When
    part of the call is not shown, ``PARTIAL_PROMPT`` follows the tool, before
    anything a platform's cut of a long prompt could take.
    """
    row = _rows(conn).execute(_PROMPT_APPROVAL, [approval_id]).fetchone()
    if row is None:
        return None
    view, _, _ = decode_view(row["view"], approval_id)
    tool = fact_line(row["effect"], 100)
    arguments = json.dumps(
        thaw(view.get("arguments", {})), ensure_ascii=False, sort_keys=True, default=str
    )
    summary = fact_line(arguments, MAX_PROMPT_SUMMARY)
    told = approval_facts(view, target_chars=MAX_PROMPT_SUMMARY)
    facts = dict(told.facts)
    partial = bool(view.get(PARTIAL_KEY)) or fact_hides(arguments, MAX_PROMPT_SUMMARY) or told.hides
    # A model can shape its arguments so the part that matters is what gets cut or masked.
    # Said first, next to the tool: a platform that cuts a long prompt cuts its end.
    note = f" ({PARTIAL_PROMPT})" if partial else ""
    said = "".join(f" {name}: {value};" for name, value in facts.items())
    code = approval_code(approval_id)
    return {
        "text": (
            f"Approval needed: {tool}{note} —{said} {summary}. "
            f"Reply `approve {code}` or `deny {code}`."
        ),
        "approval": {
            "approval_id": approval_id,
            "code": code,
            "tool": tool,
            "summary": summary + note,
            **{name.replace(" ", "_"): value for name, value in facts.items()},
        },
    }


def insert_intents(
    conn: sqlite3.Connection,
    *,
    turn_id: str,
    session_id: str,
    route: Mapping[str, Any],
    intents: Sequence[tuple[str, Mapping[str, Any]]],
    created_at: str,
) -> None:
    """One pending intent per (intent id, payload), due now (the database clock)."""
    encoded_route = canonical_json(thaw(route))
    conn.executemany(
        _INSERT,
        [
            (intent_id, turn_id, session_id, encoded_route, json.dumps(payload), created_at)
            for intent_id, payload in intents
        ],
    )


def insert_reply(
    conn: sqlite3.Connection,
    *,
    intent_id: str,
    inbound_id: str,
    session_id: str,
    route: Mapping[str, Any],
    payload: Mapping[str, Any],
    created_at: str,
) -> DeliveryIntent:
    """The pending reply to command inbound ``inbound_id`` (written once), due now."""
    conn.execute(
        _INSERT_REPLY,
        [
            intent_id,
            inbound_id,
            session_id,
            canonical_json(thaw(route)),
            json.dumps(payload),
            created_at,
        ],
    )
    found = one_intent(conn, intent_id)
    if found is None or found.inbound_id != inbound_id:
        raise StoreError(f"the reply intent {intent_id} of {inbound_id} was not written")
    return found


# -- claims ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimArgs:
    """A checked claim; ``per_channel`` None puts no limit on one channel alias."""

    owner: str
    limit: int
    lease_s: float
    max_attempts: int
    now: float
    per_channel: int | None = None
    sending: Mapping[str, int] = field(default_factory=dict)
    # The claimant's own sends under way (intent ids): never claimed again by it.
    holding: tuple[str, ...] = ()


def exhausted_message(attempts: int, max_attempts: int) -> str:
    """The error of an intent whose lease expired after its last allowed attempt."""
    return (
        f"{DELIVERY_ATTEMPTS_EXHAUSTED}: the lease of attempt {attempts} of {max_attempts} "
        "expired without an outcome"
    )


def _due_rows(
    conn: sqlite3.Connection, now: float, limit: int, full: set[str], holding: Sequence[str]
) -> list[sqlite3.Row]:
    if not full and not holding:
        return _rows(conn).execute(DUE_ROWS, [now, limit]).fetchall()
    left_out, held = json.dumps(sorted(full)), json.dumps(list(holding))
    return _rows(conn).execute(_DUE_ROWS_EXCEPT, [now, left_out, held, limit]).fetchall()


def _route_channel(row: sqlite3.Row) -> str | None:
    value = json.loads(row["route"]).get("channel")
    return value if isinstance(value, str) else None


def claim_rows(conn: sqlite3.Connection, args: ClaimArgs) -> tuple[ClaimedDelivery, ...]:
    """Lease up to ``limit`` due intents, oldest due first; dead-letter exhausted leases.

    With ``per_channel``, an alias's intents are claimed only while its sends
    (``sending`` plus this claim's) stay under it: one hanging platform cannot
    take every slot of the claimant. An alias that fills up mid-page is left out
    of the next page's query, so every page claims at least its first row. The
    intents in ``holding`` (the claimant's own sends) are never read.
    """
    claim_isolation(conn)
    fold_tallies(conn)
    lease = args.now + args.lease_s
    claimed: list[ClaimedDelivery] = []
    out = dict(args.sending)
    cap = args.per_channel
    full = set() if cap is None else {alias for alias, n in out.items() if n >= cap}
    while len(claimed) < args.limit:
        rows = _due_rows(conn, args.now, args.limit - len(claimed), full, args.holding)
        if not rows:
            break
        for row in rows:
            if row["status"] == "sending" and row["attempts"] >= args.max_attempts:
                message = exhausted_message(row["attempts"], args.max_attempts)
                conn.execute(_EXHAUST, [message, args.now, row["id"]])
                continue
            alias = _route_channel(row)
            if alias is not None and alias in full:
                continue  # read before its alias filled up in this page: not claimed
            if cap is not None and alias is not None:
                out[alias] = out.get(alias, 0) + 1
                if out[alias] >= cap:
                    full.add(alias)
            token = new_id("dlc")
            conn.execute(_CLAIM, [lease, token, args.owner, args.now, row["id"]])
            attempt = row["attempts"] + 1
            intent = _intent(row, status="sending", attempts=attempt, next_attempt_at=lease)
            claimed.append(ClaimedDelivery(intent, token, attempt, lease))
    return tuple(claimed)


def claimed_owners(conn: sqlite3.Connection, after: str | None, limit: int) -> tuple[str, ...]:
    rows = conn.execute(_CLAIMED_OWNERS, ["" if after is None else after, limit]).fetchall()
    return tuple(str(row[0]) for row in rows)


def expire_claims(conn: sqlite3.Connection, owners: Sequence[str], now: float) -> int:
    """Make the claims of ``owners`` due at ``now``; how many intents changed."""
    sql = _EXPIRE.format(owners=", ".join("?" * len(owners)))
    return conn.execute(sql, [now, now, now, *owners]).rowcount


# -- fenced steps ----------------------------------------------------------------------


def _stale(claim: ClaimedDelivery) -> StaleClaim:
    return StaleClaim(claim.intent.intent_id, subject=_SUBJECT)


def _current(conn: sqlite3.Connection, claim: ClaimedDelivery) -> DeliveryIntent:
    intent = one_intent(conn, claim.intent.intent_id)
    if intent is None:
        raise _stale(claim)
    return intent


def delivered_row(conn: sqlite3.Connection, claim: ClaimedDelivery, now: float) -> DeliveryIntent:
    """``delivered``; the same token's repeat returns the row unchanged; else ``StaleClaim``."""
    intent_id, token = claim.intent.intent_id, claim.claim_token
    if conn.execute(_DELIVERED, [now, now, intent_id, token]).rowcount == 1:
        return _current(conn, claim)
    row = (
        _rows(conn)
        .execute("SELECT status, claim_token FROM outbox WHERE intent_id = ?", [intent_id])
        .fetchone()
    )
    if row is not None and row["status"] == "delivered" and row["claim_token"] == token:
        return _current(conn, claim)
    raise _stale(claim)


def failed_row(
    conn: sqlite3.Connection,
    claim: ClaimedDelivery,
    error: str,
    retry_at: float | None,
    now: float,
) -> DeliveryIntent:
    """``pending`` until ``retry_at``, or ``dead_lettered`` without one; else ``StaleClaim``."""
    status = "dead_lettered" if retry_at is None else "pending"
    params = [status, retry_at, error, status, now, claim.intent.intent_id, claim.claim_token]
    if conn.execute(_FAILED, params).rowcount != 1:
        raise _stale(claim)
    return _current(conn, claim)


def extend_row(
    conn: sqlite3.Connection, claim: ClaimedDelivery, lease: float, now: float
) -> ClaimedDelivery:
    """The claim with its lease moved to ``lease``; ``StaleClaim`` if not the holder."""
    params = [lease, now, claim.intent.intent_id, claim.claim_token]
    if conn.execute(_EXTEND, params).rowcount != 1:
        raise _stale(claim)
    return ClaimedDelivery(_current(conn, claim), claim.claim_token, claim.attempt, lease)


def release_row(conn: sqlite3.Connection, claim: ClaimedDelivery, now: float) -> None:
    """Pending and due now, the attempt given back; nothing when no longer held."""
    conn.execute(_RELEASE, [now, now, claim.intent.intent_id, claim.claim_token])


def retry_row(
    conn: sqlite3.Connection, intent_id: str, *, reason: str, actor: str, now: float
) -> DeliveryIntent:
    """Dead letter -> pending, with its ``delivery.retry`` audit row in the same transaction."""
    if conn.execute(_RETRY, [now, now, intent_id]).rowcount != 1:
        found = one_intent(conn, intent_id)
        if found is None:
            raise NotFoundOrUnauthorized("delivery intent")
        if found.payload_pruned:
            raise InvalidValue(
                "this delivery intent's payload was erased: there is nothing to send"
            )
        raise InvalidValue("only a dead-lettered delivery intent can be retried")
    insert_audit(
        conn,
        "delivery.retry",
        principal_id=actor,
        authority="operator",
        subject=f"delivery:{intent_id}",
        reason=reason,
        detail={"intent_id": intent_id, "actor": actor},
    )
    intent = one_intent(conn, intent_id)
    assert intent is not None  # updated just above, in this transaction
    return intent


# -- retention, operators and the idle worker ------------------------------------------


def prune_rows(
    conn: sqlite3.Connection, payload_before: float, tombstone_before: float, limit: int
) -> PruneReport:
    """Delete delivered intents past the tombstone horizon, then clear the payloads of
    the delivered ones that stay."""
    removed = conn.execute(_PRUNE_ROWS, [tombstone_before, limit]).rowcount
    cleared = conn.execute(_PRUNE_PAYLOADS, [payload_before, tombstone_before, limit]).rowcount
    return PruneReport(payloads_cleared=cleared, tombstones_removed=removed)


def list_intents(
    conn: sqlite3.Connection, status: str | None, limit: int
) -> tuple[DeliveryIntent, ...]:
    # Only the filter asked for, so the planner can use outbox_dead / the rowid order.
    where, params = ("WHERE status = ? ", [status]) if status is not None else ("", [])
    order = "id"
    if status in ("pending", "sending"):
        # As the inbox's live rows (list_records): the partial index of the few intents
        # still due, not a walk back through every delivered one.
        where += "AND status IN ('pending', 'sending') "
        order = "+id"
    rows = _rows(conn).execute(
        f"SELECT {_COLUMNS} FROM outbox {where}ORDER BY {order} DESC LIMIT ?", [*params, limit]
    )
    return tuple(_intent(row) for row in rows)


def one_intent(conn: sqlite3.Connection, intent_id: str) -> DeliveryIntent | None:
    row = (
        _rows(conn)
        .execute(f"SELECT {_COLUMNS} FROM outbox WHERE intent_id = ?", [intent_id])
        .fetchone()
    )
    return None if row is None else _intent(row)


# Intents per status: the due ones counted from their partial index (outbox_due), the
# finished ones read from the tallies and the deltas not yet folded into them (schema
# v28), so a count never reads the delivered history.
COUNTS = (
    "SELECT status, SUM(n) AS n FROM ("
    "SELECT status, COUNT(*) AS n FROM outbox INDEXED BY outbox_due "
    "WHERE status IN ('pending', 'sending') GROUP BY status "
    "UNION ALL SELECT status, n FROM outbox_tallies "
    "UNION ALL SELECT status, n FROM outbox_tally_deltas"
    ") AS q GROUP BY status"
)


def count_rows(conn: sqlite3.Connection) -> DeliveryCounts:
    # SUM is PostgreSQL's numeric: a whole number here, read as int on both engines.
    return DeliveryCounts(**{status: int(n) for status, n in conn.execute(COUNTS)})


# The live status's figure: the dead letters' partial index alone, never the delivered rows.
DEAD_LETTERS = "SELECT count(*) FROM outbox INDEXED BY outbox_dead WHERE status = 'dead_lettered'"


def dead_letter_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute(DEAD_LETTERS).fetchone()[0])


def next_due_row(conn: sqlite3.Connection) -> float | None:
    row = conn.execute(NEXT_DUE).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _intent(row: sqlite3.Row, **changed: Any) -> DeliveryIntent:
    values: dict[str, Any] = {
        "intent_id": row["intent_id"],
        "turn_id": row["turn_id"],
        "inbound_id": row["inbound_id"],
        "session_id": row["session_id"],
        "route": json.loads(row["route"]),
        "payload": json.loads(row["payload"]),
        "status": row["status"],
        "attempts": row["attempts"],
        "next_attempt_at": row["next_attempt_at"],
        "created_at": row["created_at"],
        "last_error": row["last_error"],
        "delivered_at": row["delivered_at"],
        "requeues": row["requeues"],
        "payload_pruned": row["payload"] == PRUNED_PAYLOAD,
    }
    values.update(changed)
    return DeliveryIntent(**values)
