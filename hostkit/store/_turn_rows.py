"""The SQL of the turns group's records: turn states, events, fenced transcript writes,
terminal records; run on the store's writer (or reader) thread.

Each function runs inside one transaction the adapter opened, so "persist X
with Y atomically" is literally one transaction. Rows are read by column name.
Admission, renewal and recovery (the session lease itself) are in
``_lease_rows``.

The session lease invariant: a turn is ``running`` exactly while its
session's row in ``session_leases`` names it. Admission takes the lease in the
transaction that inserts the turn; the terminal commit releases it in the
transaction that ends the turn; recovery and takeover end the turn and free
the lease together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from hostkit.errors import InvalidValue, LeaseLost
from hostkit.freeze import freeze, thaw
from hostkit.store._approval_rows import (
    CANCELLED_WHILE_ASKED,
    OpenApproval,
    call_name,
    ending_approvals,
    mark_indeterminate,
    open_approval,
    void_open,
)
from hostkit.store._attachments import attached_refs, keep_attachments
from hostkit.store._context_rows import observe_step
from hostkit.store._context_values import ObservedStep
from hostkit.store._delivery_rows import approval_prompt, insert_intents
from hostkit.store._json import canonical_json
from hostkit.store._owned import next_message_seq, now, owner_predicate
from hostkit.store._rebound import unanswerable, void_if_rebound
from hostkit.store._turn_values import (
    CarriedContext,
    RecoveredTurn,
    SessionLease,
    TranscriptEntry,
    TurnState,
    TurnWrite,
    checked_context,
)
from hostkit.types import (
    EMPTY_NOTICE,
    UNKNOWN_EFFECT,
    ModelMessage,
    PrincipalScope,
    TurnOutcome,
    TurnResult,
    bounded_data,
    chat_parts,
    is_message_text,
    new_id,
)

__all__ = [
    "EMPTY_NOTICE",
    "FAILED_ACTED_NOTICE",
    "FAILED_NOTICE",
    "INDETERMINATE_NOTICE",
    "LOST_NOTICE",
    "RUNNING_COLUMNS",
    "Gone",
    "abandon",
    "all_rows",
    "append_message",
    "carried_context",
    "encode_route",
    "end_orphan",
    "extend_instructions",
    "extended_instructions",
    "fence",
    "find_turn",
    "finish",
    "input_digest",
    "insert_event",
    "insert_events",
    "one_row",
    "owned_state",
    "record_injected_context",
    "request_cancel",
    "route_of",
    "stored_route",
    "token_unbound",
]

Gone = Literal["owner_dead", "lease_expired", "shutdown", "abandoned"]
# The event holding what a turn's bootstrap slot added to its instructions.
EXTENDED_INSTRUCTIONS = "instructions.extended"
# The event holding the context the embedder injected for a turn (``injected_context``).
INJECTED_CONTEXT = "context.injected"
# Why a turn ended ``lost``, in the words of the reason recovery found: not "the Host
# stopped" for a Host that is still running but whose store refused the turn's end.
_LOST_ERRORS: dict[Gone, str] = {
    "owner_dead": "the Host process running this turn died; nothing was replayed",
    "lease_expired": (
        "the Host running this turn stopped renewing its lease (it stopped, was paused or "
        "lost the store); nothing was replayed"
    ),
    "shutdown": "the Host shut down during this turn; nothing was replayed",
    "abandoned": (
        "the Host could not record this turn's end (its store refused the write); "
        "nothing was replayed"
    ),
}
# What a routed conversation is told when its turn ended without an answer the person did
# not ask for: recovery ended it ``lost``, or the Host cut it off (a shutdown's drain, a
# deadline). Nothing will answer that message unless it is sent again.
LOST_NOTICE = (
    "I was stopped before I could answer your last message (the service stopped or "
    "restarted), so it got no answer. Please send it again."
)
# What it is told instead when the turn was cut off while one of its calls ran
# (``indeterminate``): that call may have acted, and sending the message again could
# make it act twice.
INDETERMINATE_NOTICE = (
    "I was stopped while I was acting on your last message (the service stopped or "
    "restarted): part of it may have been done, and it will not be repeated. Please "
    "check before you send it again."
)
# What a routed conversation is told when its turn ended ``failed`` (the model service
# failed, a limit was reached): the message was taken and will not be answered. The
# reason stays in the turn's record: it may name internals the person should not see.
FAILED_NOTICE = (
    "Something went wrong on my side and I could not answer your last message. "
    "Please try again later; if it was a long message, try a shorter one."
)
# What it is told instead when a call of that failed turn ran, or may have (an approved
# call its continuation ran, a tool before the model failed): "try again" would act twice.
FAILED_ACTED_NOTICE = (
    "Something went wrong on my side after I had started acting on your last message, "
    "so I could not finish answering it: part of it may have been done, and it will not "
    "be repeated. Please check before you send it again."
)


def one_row(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    row: sqlite3.Row | None = cursor.execute(sql, params).fetchone()
    return row


def all_rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def _detail(detail: Mapping[str, Any] | None) -> str:
    return canonical_json(bounded_data(detail))


_STATE_COLUMNS = (
    "t.turn_id, t.session_id, t.status, t.result, t.cancel_requested_at, t.request_id, "
    "t.core_id, t.core_revision, t.generation, t.started_at"
)


def _state(row: sqlite3.Row) -> TurnState:
    result: TurnResult | None = None
    if row["status"] != "running":
        try:
            result = TurnResult.from_json(json.loads(row["result"] or "null"))
        except (TypeError, ValueError, AttributeError, InvalidValue):
            # A terminal row whose result predates the current format (or is damaged):
            # answer with what the row itself says, never with an exception.
            result = TurnResult(
                request_id=row["request_id"],
                turn_id=row["turn_id"],
                session_id=row["session_id"],
                core_id=row["core_id"],
                core_revision=row["core_revision"],
                outcome=row["status"],
                text="",
                error="the recorded result could not be read",
                durable_result_ref=row["turn_id"],
                generation=row["generation"],
            )
    return TurnState(
        turn_id=row["turn_id"],
        session_id=row["session_id"],
        status=row["status"],
        result=result,
        cancel_requested=row["cancel_requested_at"] is not None,
        started_at=epoch_of(row["started_at"]),
    )


def epoch_of(stamp: str | None) -> float | None:
    """Wall-clock seconds of a stored ISO-8601 instant; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


# -- events and terminal records ----------------------------------------------------------


def insert_event(
    conn: sqlite3.Connection,
    turn_id: str,
    seq: int | None,
    kind: str,
    detail: Mapping[str, Any] | None,
    *,
    at: str | None = None,
) -> None:
    """Append one turn event; ``seq`` None takes the next free one (recovery, takeover)."""
    if seq is None:
        row = one_row(
            conn,
            "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM turn_events WHERE turn_id = ?",
            [turn_id],
        )
        seq = int(row["next"]) if row is not None else 1
    insert_events(conn, turn_id, [(seq, kind, detail)], at=at or now(conn))


def insert_events(
    conn: sqlite3.Connection,
    turn_id: str,
    events: Sequence[tuple[int, str, Mapping[str, Any] | None]],
    *,
    at: str,
) -> None:
    """Append turn events ``(seq, kind, detail)`` in one statement (one hand-over of the
    interpreter lock between the writer's thread and the loop, however many)."""
    rows = ", ".join(["(?, ?, ?, ?, ?)"] * len(events))
    params = [v for seq, kind, detail in events for v in (turn_id, seq, kind, at, _detail(detail))]
    try:
        conn.execute(
            f"INSERT INTO turn_events (turn_id, seq, kind, at, detail) VALUES {rows}", params
        )
    except sqlite3.IntegrityError as exc:
        seqs = ", ".join(str(seq) for seq, _, _ in events)
        raise InvalidValue(f"event seq {seqs} of this turn is already recorded") from exc


def _commit_terminal(
    conn: sqlite3.Connection,
    result: TurnResult,
    *,
    event_seq: int | None,
    route: Mapping[str, Any] | None,
    detail: Mapping[str, Any] | None,
    earlier: Sequence[tuple[int, str, Mapping[str, Any] | None]] = (),
) -> TurnResult:
    """The terminal state, its event and the delivery intents (the caller's transaction).

    ``earlier`` events (the final answer's) are inserted with the terminal one, in
    one statement.

    A routed turn that answered gets one intent per part of its text; a routed turn
    that pauses ``needs_user`` on a pending approval also gets the approval
    prompt (``approval_prompt``); a routed turn ended ``lost`` (recovery) gets
    the notice that its message went unanswered, one ended ``failed`` the
    notice that it could not answer. An unrouted turn (CLI, notebook) gets none.
    """
    payloads = _deliveries(conn, result) if route is not None else []
    intents = tuple(new_id("out") for _ in payloads)
    if intents != result.deliveries:  # a replace runs every check of the result again
        result = dataclasses.replace(result, deliveries=intents)
    at = now(conn)
    cursor = conn.execute(
        "UPDATE turns SET status = ?, result = ?, ended_at = ?, lease_owner = NULL, "
        "lease_expires_at = NULL WHERE turn_id = ? AND status = 'running'",
        [result.outcome, canonical_json(result.to_json()), at, result.turn_id],
    )
    if cursor.rowcount != 1:
        raise InvalidValue("the turn already has a terminal record")
    terminal = {"error": result.error, **(detail or {})}
    if event_seq is None:  # recovery: the next free seq (nothing earlier to write)
        insert_event(conn, result.turn_id, None, f"turn.{result.outcome}", terminal, at=at)
    else:
        events = [*earlier, (event_seq, f"turn.{result.outcome}", terminal)]
        insert_events(conn, result.turn_id, events, at=at)
    if route is not None:
        insert_intents(
            conn,
            turn_id=result.turn_id,
            session_id=result.session_id,
            route=route,
            intents=tuple(zip(intents, payloads, strict=True)),
            created_at=at,
        )
    return result


def _deliveries(conn: sqlite3.Connection, result: TurnResult) -> list[dict[str, Any]]:
    """The payloads a routed terminal turn sends: its answer, then its approval prompt.

    A ``lost`` turn (its process died) and a turn the Host or its caller cut
    off (``cancelled`` with ``cancelled_by`` not the user: a shutdown's drain,
    a deadline) send the notice that the message went unanswered, unless a
    call of the turn ran or may have run (``indeterminate``, or a recorded
    call that acted): then they say that part of it may have been done
    (``INDETERMINATE_NOTICE``), never to just send it again, which would act
    twice. A person's own cancel sends nothing. A ``failed`` turn sends the
    notice that it could not answer (``FAILED_NOTICE``), never its error; or,
    when a call of it acted (an approved call its continuation ran),
    ``FAILED_ACTED_NOTICE``, never "try again". An answer goes in at most
    ``MAX_PARTS`` parts of at most ``MAX_PART_UNITS`` (``_answer_parts``); a
    ``completed`` turn with nothing visible to say sends ``EMPTY_NOTICE``, never
    a text no platform would post.
    """
    if result.outcome == "indeterminate" and result.cancelled_by != "user":
        return [{"text": INDETERMINATE_NOTICE}]
    cut_off = result.cancelled_by in ("host", "caller")
    if result.outcome == "lost" or (result.outcome == "cancelled" and cut_off):
        acted = _acted(conn, result.turn_id)
        return [{"text": INDETERMINATE_NOTICE if acted else LOST_NOTICE}]
    if result.outcome == "failed":
        return [{"text": FAILED_ACTED_NOTICE if _acted(conn, result.turn_id) else FAILED_NOTICE}]
    payloads: list[dict[str, Any]] = []
    if result.outcome in ("completed", "needs_user"):
        # In parts that fit one chat message each: one intent each, written together and
        # sent in order (a session's intents go one at a time), so none is lost or repeated.
        payloads.extend(_answer_parts(result.turn_id, result.text))
    if result.outcome == "completed" and not payloads:
        payloads.append({"text": EMPTY_NOTICE})
    if result.outcome == "needs_user" and result.pending_approval:
        prompt = approval_prompt(conn, result.pending_approval)
        if prompt is not None:
            payloads.append(prompt)
    return payloads


def _answer_parts(turn_id: str, text: str) -> list[dict[str, Any]]:
    """One payload per part of an answer: what the chat shows, and what a receiver needs
    to put the answer back together (its turn, the part's place, what the split added)."""
    parts = chat_parts(text)
    payloads: list[dict[str, Any]] = []
    for number, part in enumerate(parts, 1):
        payload: dict[str, Any] = {
            "text": part.shown,
            "turn_id": turn_id,
            "part": number,
            "parts": len(parts),
        }
        if part.before or part.after:
            payload["added"] = {"before": part.before, "after": part.after}
        payloads.append(payload)
    return payloads


# Recorded effect statuses after which the call ran, or may have, and acted on the world.
_ACTED_STATUSES = frozenset({"succeeded", "failed", "timed_out", "indeterminate"})


def _acted(conn: sqlite3.Connection, turn_id: str) -> bool:
    """Whether a recorded call of the turn ran (or may have): its message, sent again,
    would run it again. An event that cannot be read counts as one that acted."""
    for (detail,) in conn.execute(
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = 'effect.completed'",
        [turn_id],
    ):
        try:
            status = json.loads(detail or "{}").get("status")
        except (ValueError, AttributeError):
            return True
        if status in _ACTED_STATUSES:
            return True
    return False


def end_orphan(conn: sqlite3.Connection, row: sqlite3.Row, reason: Gone) -> RecoveredTurn:
    """End a running turn whose holder is gone: ``lost``, ``cancelled`` if one was asked,
    ``indeterminate`` when a call of it may have run without its result being recorded,
    or ``needs_user`` when it stopped while its approval was being decided.

    Nothing is replayed: its provider or effect step may or may not have
    happened, and the terminal record says so. The calls of its last step that
    have no result get one (``answer_dangling_calls``); when the first of them
    may have run, or an approved call it claimed may have (``settle_claims``),
    the turn ends ``indeterminate``, as a turn cut off during a call does. An approval is durable
    from the moment it is asked, so a turn that stopped while a person decided
    still has it open: the turn pauses on it (``needs_user``), and whoever
    answers it runs the call — unless a cancel was asked, which voids it. A
    call this turn claimed from an approval and never recorded a result for
    is ``indeterminate`` (``settle_claims``). Frees its session lease.

    A routed turn (its route is on the turn row since admission) tells its
    conversation in the same transaction, as ``finish`` would have: the
    approval prompt when it pauses, a notice that the message went
    unanswered when it is ``lost``; a ``cancelled`` turn sends nothing (the
    person asked for that). The terminal commit is conditional on the row
    still running, so a second recovery (another process) writes nothing.
    """
    turn_id, session_id = row["turn_id"], row["session_id"]
    settled, paused = settle_claims(conn, turn_id)
    maybe_ran = settled > 0
    cancelled = row["cancel_requested_at"] is not None
    outcome: TurnOutcome = "cancelled" if cancelled else "lost"
    error, pending = _LOST_ERRORS[reason], None
    if (
        paused is not None
        and not cancelled
        and void_if_rebound(conn, session_id, paused.approval_id)
    ):
        paused = None  # its conversation moved on: nobody can answer it
    if paused is not None and not cancelled:
        outcome, pending = "needs_user", paused.approval_id
        error = f"waiting for approval {paused.approval_id} (the Host stopped while it was asked)"
        answer_dangling_calls(conn, session_id, turn_id, paused=paused.call_id)
    else:
        if paused is not None:
            void_open(conn, paused.approval_id, CANCELLED_WHILE_ASKED)
        maybe_ran = answer_dangling_calls(conn, session_id, turn_id) > 0 or maybe_ran
        if maybe_ran:
            outcome = "indeterminate"
            error = f"{error} (a tool call may have run before it stopped: its outcome is unknown)"
    result = TurnResult(
        request_id=row["request_id"],
        turn_id=turn_id,
        session_id=session_id,
        core_id=row["core_id"],
        core_revision=row["core_revision"],
        outcome=outcome,
        text="",
        error=error,
        durable_result_ref=turn_id,
        generation=row["generation"],
        pending_approval=pending,
        cancelled_by="user" if cancelled else None,
    )
    _commit_terminal(
        conn,
        result,
        event_seq=None,
        route=stored_route(row["route"]),
        detail={"recovered": True, "reason": reason},
    )
    _free(conn, session_id, turn_id=turn_id)
    return RecoveredTurn(turn_id, session_id, outcome)


_UNKNOWN_APPROVED = (
    "[indeterminate] this approved call may have run, but the turn running it stopped "
    "before its result was recorded: its outcome is unknown"
)
_DENIED_NOT_RUN = "[denied] not run: the approver denied this call"


def settle_claims(conn: sqlite3.Connection, turn_id: str) -> tuple[int, OpenApproval | None]:
    """Settle the approved calls ``turn_id`` claimed and never recorded a result for.

    Each may have run: its approval becomes ``indeterminate`` with a reason and
    never runs again. A call paused by an earlier turn is answered by this
    (continuation) turn in the transcript, so the next model reads that its
    outcome is unknown (a claimed denial: that it never ran). Returns how many
    approvals became ``indeterminate``, and the open approval the turn is paused
    on (read in the same statement).
    """
    settled = 0
    claims, paused = ending_approvals(conn, turn_id)
    for claim in claims:
        if claim.status == "executed" and mark_indeterminate(conn, claim.approval_id, turn_id):
            settled += 1
        if not claim.answered and claim.asked_in != turn_id:
            text = _UNKNOWN_APPROVED if claim.status == "executed" else _DENIED_NOT_RUN
            name = call_name(conn, claim.session_id, claim.asked_in, claim.call_id)
            message = ModelMessage("tool", text, tool_call_id=claim.call_id, name=name)
            insert_message(conn, claim.session_id, turn_id, message, at=now(conn))
    return settled, paused


DANGLING_UNKNOWN = (
    "[indeterminate] this call may have run, but the Host running the turn stopped before "
    "its result was recorded: its outcome is unknown"
)
DANGLING_NOT_RUN = "[cancelled] not run: the Host running the turn stopped before this call"


def answer_dangling_calls(
    conn: sqlite3.Connection, session_id: str, turn_id: str, *, paused: str | None = None
) -> int:
    """Give each call of the turn's last model step that has no result a tool message of
    its own, so the next turn's model reads what is known: calls run one at a time, so
    the first unanswered one may have run (indeterminate) and the rest did not. The call
    the turn ``paused`` on for an approval is left for its continuation to answer, and
    nothing after it ran. Returns how many were answered as may have run (0 or 1).

    Call ids are unique per step only (``call_0`` in every response of a server
    that sends none), so only tool messages after that step's answer it."""
    last = one_row(
        conn,
        "SELECT seq, content FROM messages WHERE session_id = ? AND turn_id = ? "
        "AND role = 'assistant' ORDER BY seq DESC LIMIT 1",
        [session_id, turn_id],
    )
    if last is None:
        return 0
    calls = json.loads(last["content"]).get("tool_calls") or []
    answered = {
        json.loads(content).get("tool_call_id")
        for (content,) in conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND turn_id = ? AND role = 'tool' "
            "AND seq > ?",
            [session_id, turn_id, last["seq"]],
        )
    }
    names = _answer_names(conn, turn_id, calls)
    dangling = [
        (call, name)
        for call, name in zip(calls, names, strict=True)
        if call.get("call_id") not in answered and call.get("call_id") != paused
    ]
    at = now(conn)
    for index, (call, name) in enumerate(dangling):
        text = DANGLING_UNKNOWN if index == 0 and paused is None else DANGLING_NOT_RUN
        message = ModelMessage("tool", text, tool_call_id=str(call["call_id"]), name=name)
        insert_message(conn, session_id, turn_id, message, at=at)
    return 1 if dangling and paused is None else 0


def _answer_names(
    conn: sqlite3.Connection, turn_id: str, calls: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The name each answer of the step's ``calls`` is given, as the turn recorded it in the
    step's ``provider.completed`` event: a tool's name, or ``UNKNOWN_EFFECT`` for a name
    the model made up (its own text, which may hold a secret, repeated nowhere else).
    A call the event does not name as the model did (a list cut at its bound) is
    answered as ``UNKNOWN_EFFECT`` too."""
    row = one_row(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = 'provider.completed' "
        "ORDER BY seq DESC LIMIT 1",
        [turn_id],
    )
    recorded: object = None
    if row is not None and row["detail"]:
        with contextlib.suppress(ValueError, AttributeError):
            recorded = json.loads(row["detail"]).get("tool_calls")
    if not isinstance(recorded, list) or len(recorded) != len(calls):
        return [UNKNOWN_EFFECT] * len(calls)
    return [
        name if isinstance(name, str) and name == call.get("name") else UNKNOWN_EFFECT
        for call, name in zip(calls, recorded, strict=True)
    ]


def _free(conn: sqlite3.Connection, session_id: str, *, turn_id: str) -> int:
    """Release the session lease if ``turn_id`` holds it; the token stays for the next holder."""
    return conn.execute(
        "UPDATE session_leases SET owner = NULL, turn_id = NULL, expires_at = NULL, "
        "ttl_s = NULL, updated_at = ? WHERE session_id = ? AND turn_id = ?",
        [now(conn), session_id, turn_id],
    ).rowcount


RUNNING_COLUMNS = (
    "t.turn_id, t.request_id, t.session_id, t.core_id, t.core_revision, t.generation, "
    "t.cancel_requested_at, t.route"
)


def encode_route(route: Mapping[str, Any] | None) -> str | None:
    """The turns.route text of a captured (already bounded) route; None when unrouted."""
    return None if route is None else canonical_json(thaw(route))


def stored_route(text: str | None) -> Mapping[str, Any] | None:
    """A turn row's captured route, frozen; None when unrouted.

    A value that does not decode to an object (a damaged row) counts as
    unrouted: recovery must still end the turn, it just cannot tell anyone.
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return freeze(value) if isinstance(value, dict) else None


def route_of(conn: sqlite3.Connection, turn_id: str) -> Mapping[str, Any] | None:
    """The route ``turn_id`` captured at admission; None when unrouted or unknown."""
    row = one_row(conn, "SELECT route FROM turns WHERE turn_id = ?", [turn_id])
    return None if row is None else stored_route(row["route"])


# -- reads, cancel -------------------------------------------------------------------------


def find_turn(conn: sqlite3.Connection, principal_id: str, request_id: str) -> TurnState | None:
    """The turn an idempotency key already created, if any."""
    row = one_row(
        conn,
        f"SELECT {_STATE_COLUMNS} FROM turns t WHERE t.principal_id = ? AND t.request_id = ?",
        [principal_id, request_id],
    )
    return _state(row) if row is not None else None


def same_request(
    conn: sqlite3.Connection, existing: TurnState, core_id: str, message: ModelMessage | None
) -> bool:
    """Whether a request for ``core_id`` with the input ``message`` repeats the request that
    created ``existing``: same agent and, for an ordinary turn, the same input (a turn
    stored before inputs were kept with the admission has no input row and is taken as
    the same)."""
    row = one_row(conn, "SELECT core_id FROM turns WHERE turn_id = ?", [existing.turn_id])
    if row is None or row["core_id"] != core_id:
        return False
    if message is None:
        return True
    content = canonical_json(message.to_json())
    # A core with an input slot persists its input after the slot (input.admitted keeps
    # the digest of the input as admitted); any other turn persisted it at admission.
    admitted = one_row(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = 'input.admitted' "
        "ORDER BY seq LIMIT 1",
        [existing.turn_id],
    )
    if admitted is not None:
        return bool(json.loads(admitted["detail"]).get("sha256") == input_digest(message))
    stored = one_row(
        conn,
        "SELECT content FROM messages WHERE session_id = ? AND turn_id = ? AND role = 'user' "
        "ORDER BY seq LIMIT 1",
        [existing.session_id, existing.turn_id],
    )
    return stored is None or bool(stored["content"] == content)


# -- fenced writes of a running turn ------------------------------------------------------


_FENCE = (
    "FROM session_leases l JOIN turns t ON t.turn_id = l.turn_id "
    "WHERE l.session_id = ? AND l.token = ? AND l.turn_id = ? AND t.status = 'running'"
)


def fence(conn: sqlite3.Connection, lease: SessionLease) -> bool:
    """Refuse (``LeaseLost``) unless ``lease`` still holds its session; True if cancel was asked."""
    row = one_row(
        conn,
        f"SELECT t.cancel_requested_at {_FENCE}",
        [lease.session_id, lease.token, lease.turn_id],
    )
    if row is None:
        raise LeaseLost("session lease")
    return row["cancel_requested_at"] is not None


def _fence_at(
    conn: sqlite3.Connection, lease: SessionLease, event_seq: int
) -> tuple[bool, str | None]:
    """``fence``, and the kind of the event already recorded at ``event_seq`` (or None).

    One statement for both: each statement is a hand-over of the interpreter lock
    between the writer's thread and a busy event loop.
    """
    row = one_row(
        conn,
        "SELECT t.cancel_requested_at, (SELECT e.kind FROM turn_events e "
        f"WHERE e.turn_id = t.turn_id AND e.seq = ?) AS kind {_FENCE}",
        [event_seq, lease.session_id, lease.token, lease.turn_id],
    )
    if row is None:
        raise LeaseLost("session lease")
    return row["cancel_requested_at"] is not None, row["kind"]


def append_message(
    conn: sqlite3.Connection,
    lease: SessionLease,
    *,
    event_seq: int,
    message: ModelMessage,
    event: str,
    detail: Mapping[str, Any] | None,
    observed: ObservedStep | None = None,
) -> TurnWrite:
    """Append a transcript message of the lease's turn together with its event (fenced).

    ``observed`` — the step's decision, usage and calibration — commits in the
    same transaction.
    """
    cancel_requested, recorded = _fence_at(conn, lease, event_seq)
    if recorded is not None:
        return TurnWrite(
            _written_before(conn, lease, event_seq, recorded, event), cancel_requested, None
        )
    at = now(conn)
    seq = insert_message(conn, lease.session_id, lease.turn_id, message, at=at)
    insert_event(conn, lease.turn_id, event_seq, event, detail, at=at)
    step = None if observed is None else observe_step(conn, observed)
    return TurnWrite(seq, cancel_requested, step)


def extend_instructions(
    conn: sqlite3.Connection, lease: SessionLease, *, event_seq: int, text: str
) -> bool:
    """Record the text the lease's turn added to its instructions (fenced); whether a
    cancel was requested.

    An ``instructions.extended`` event at ``event_seq`` holds it whole (not cut as
    event details are): a continuation of the turn, in any process, sends it again.
    The same write retried (a COMMIT whose answer was lost) stands.
    """
    cancel_requested, recorded = _fence_at(conn, lease, event_seq)
    if recorded is not None:
        if recorded != EXTENDED_INSTRUCTIONS:
            raise InvalidValue(f"event seq {event_seq} of this turn is already recorded")
        return cancel_requested
    conn.execute(
        "INSERT INTO turn_events (turn_id, seq, kind, at, detail) VALUES (?, ?, ?, ?, ?)",
        [
            lease.turn_id,
            event_seq,
            EXTENDED_INSTRUCTIONS,
            now(conn),
            canonical_json({"chars": len(text), "text": text}),
        ],
    )
    return cancel_requested


def extended_instructions(conn: sqlite3.Connection, turn_id: str, limit: int) -> str | None:
    """What ``turn_id`` added to its instructions (``extend_instructions``), or None.

    A record that cannot be read is refused (``InvalidValue``) rather than taken
    as none: the turn's guardrails must not silently go missing.
    """
    row = one_row(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
        [turn_id, EXTENDED_INSTRUCTIONS],
    )
    if row is None:
        return None
    try:
        text = json.loads(row["detail"]).get("text")
    except (TypeError, ValueError, AttributeError):
        text = None
    if not is_message_text(text, limit=limit):
        raise InvalidValue("the instructions this turn recorded cannot be read")
    return text


def record_injected_context(
    conn: sqlite3.Connection,
    turn_id: str,
    seq: int,
    context: Sequence[str],
    *,
    bootstrap: bool,
    at: str,
) -> None:
    """Record ``context``, the turn's injected context (bounded by ``TurnAdmission``),
    whole with its ``context.injected`` event ``seq``, and whether the turn leaves the
    bootstrap snapshot out: part of the admission transaction."""
    detail = {
        "entries": len(context),
        "chars": sum(map(len, context)),
        "context": list(context),
        "bootstrap": bootstrap,
    }
    conn.execute(
        "INSERT INTO turn_events (turn_id, seq, kind, at, detail) VALUES (?, ?, ?, ?, ?)",
        [turn_id, seq, INJECTED_CONTEXT, at, canonical_json(detail)],
    )


def carried_context(conn: sqlite3.Connection, turn_id: str) -> CarriedContext:
    """What ``turn_id``'s admission kept for a continuation (``record_injected_context``);
    the default (nothing injected, the snapshot taken) when it kept nothing.

    A record that cannot be read is refused (``InvalidValue``) rather than taken
    as none: what the embedder injected (a guardrail) must not silently go missing.
    """
    row = one_row(
        conn,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = ? ORDER BY seq LIMIT 1",
        [turn_id, INJECTED_CONTEXT],
    )
    if row is None:
        return CarriedContext()
    try:
        detail = json.loads(row["detail"])
        bootstrap = detail.get("bootstrap", True)
        if not isinstance(bootstrap, bool):
            raise InvalidValue("bootstrap")
        return CarriedContext(checked_context(detail.get("context")), bootstrap)
    except (TypeError, ValueError, AttributeError, InvalidValue):
        raise InvalidValue("the context injected for this turn cannot be read") from None


def _written_before(
    conn: sqlite3.Connection, lease: SessionLease, event_seq: int, recorded: str, event: str
) -> int:
    """The message seq of this very write, whose event (of kind ``recorded``) is already there.

    A COMMIT whose answer was lost (a database server that crashed) leaves the
    turn writing the same step again: its event is already there, of the same
    kind, with the turn's last message. That write stands; another event at
    that seq is a caller's mistake (``InvalidValue``).
    """
    last = one_row(
        conn,
        "SELECT MAX(seq) AS seq FROM messages WHERE session_id = ? AND turn_id = ?",
        [lease.session_id, lease.turn_id],
    )
    if recorded != event or last is None or last["seq"] is None:
        raise InvalidValue(f"event seq {event_seq} of this turn is already recorded")
    return int(last["seq"])


def input_digest(message: ModelMessage) -> str:
    """The sha256 (hex) of a user input as stored: how a repeated request is recognised."""
    return hashlib.sha256(canonical_json(message.to_json()).encode()).hexdigest()


def insert_message(
    conn: sqlite3.Connection, session_id: str, turn_id: str, message: ModelMessage, *, at: str
) -> int:
    """Insert one transcript message at the session's next seq; returns the seq.

    The caller holds the session lease (checked in the same transaction), so
    no other writer takes the seq. The session references the attachments the
    message names (the turn's principal's rows) until it is erased.
    """
    refs = attached_refs(message)
    if refs:
        owner = conn.execute(
            "SELECT principal_id FROM turns WHERE turn_id = ?", [turn_id]
        ).fetchone()
        if owner is not None:
            keep_attachments(conn, str(owner[0]), session_id, refs, required=False)
    (row,) = conn.execute(
        "INSERT INTO messages (message_id, session_id, seq, role, content, turn_id, created_at) "
        f"VALUES (?, ?, {next_message_seq('?')}, ?, ?, ?, ?) RETURNING seq",
        [
            new_id("msg"),
            session_id,
            session_id,
            session_id,
            message.role,
            canonical_json(message.to_json()),
            turn_id,
            at,
        ],
    ).fetchall()
    return int(row[0])


def finish(
    conn: sqlite3.Connection,
    lease: SessionLease,
    result: TurnResult,
    *,
    event_seq: int,
    route: Mapping[str, Any] | None,
    final: TranscriptEntry | None = None,
    observed: ObservedStep | None = None,
) -> TurnResult:
    """Commit the terminal state with its event and delivery intents; release the lease (fenced).

    ``final`` (the turn's last answer) is appended first, in the same transaction.
    """
    if (result.turn_id, result.session_id) != (lease.turn_id, lease.session_id):
        raise InvalidValue("the result is not the lease's turn")
    cancel_requested = fence(conn, lease)
    if result.outcome == "needs_user" and cancel_requested:
        # A cancel recorded (maybe by another process) while the turn was asking voided
        # its approval: the turn does not wait for it, it was stopped.
        result = dataclasses.replace(
            result, outcome="cancelled", error="cancelled on request", pending_approval=None
        )
    earlier: list[tuple[int, str, Mapping[str, Any] | None]] = []
    if final is not None:
        insert_message(conn, lease.session_id, lease.turn_id, final.message, at=now(conn))
        earlier.append((final.event_seq, final.event, final.detail))
    if observed is not None:
        observe_step(conn, observed)
    _, paused = settle_claims(conn, lease.turn_id)
    if result.outcome == "needs_user" and result.pending_approval:
        why = unanswerable(
            conn, lease.session_id, result.pending_approval, still_open=paused is not None
        )
        if why is not None:
            # Its conversation moved to another session while it asked: no answer can come.
            result = dataclasses.replace(
                result, outcome="cancelled", error=why, pending_approval=None
            )
            paused = None
    if result.outcome != "needs_user" and paused is not None:
        # A turn that ends any other way while its approval is asked voids it: nobody
        # is waiting for that call any more (an explicit cancel, a deadline).
        void_open(conn, paused.approval_id, _void_reason(result.outcome))
    committed = _commit_terminal(
        conn, result, event_seq=event_seq, route=route, detail=None, earlier=earlier
    )
    _free(conn, lease.session_id, turn_id=lease.turn_id)
    return committed


def _void_reason(outcome: str) -> str:
    if outcome == "cancelled":
        return CANCELLED_WHILE_ASKED
    return f"the turn ended {outcome} while its approval was asked: the call never ran"


def abandon(conn: sqlite3.Connection, lease: SessionLease) -> RecoveredTurn:
    """End the lease's turn as recovery would (``end_orphan``) and free its session (fenced)."""
    fence(conn, lease)
    row = one_row(
        conn,
        f"SELECT {RUNNING_COLUMNS} FROM turns t WHERE t.turn_id = ? AND t.status = 'running'",
        [lease.turn_id],
    )
    if row is None:  # the fence joins a running turn; kept for a clear failure
        raise LeaseLost("session lease")
    return end_orphan(conn, row, "abandoned")


# -- cancel and owned reads ---------------------------------------------------------------


def owned_state(conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str) -> TurnState | None:
    """The state of a turn the scope owns through its session, else None."""
    where, params = owner_predicate(scope)
    row = one_row(
        conn,
        f"SELECT {_STATE_COLUMNS} FROM turns t "
        f"JOIN session_owners o ON o.session_id = t.session_id WHERE t.turn_id = ? AND {where}",
        [turn_id, *params],
    )
    return _state(row) if row is not None else None


def token_unbound(conn: sqlite3.Connection, turn_id: str, token_digest: str) -> str | None:
    """``"token_unbound"`` when ``token_digest`` is not the turn's cancellation token, else None.

    A turn admitted before tokens were recorded has none: every token is unbound.
    """
    row = conn.execute(
        "SELECT cancellation_digest FROM turns WHERE turn_id = ?", [turn_id]
    ).fetchone()
    if row is not None and row[0] is not None and hmac.compare_digest(row[0], token_digest):
        return None
    return "token_unbound" if row is not None else None


def request_cancel(
    conn: sqlite3.Connection, scope: PrincipalScope, turn_id: str, *, token_digest: str | None
) -> TurnState | None:
    """Record a cancel request on a running turn the scope owns; its state, or None.

    With ``token_digest``, None also when it is not the turn's cancellation token.
    """
    state = owned_state(conn, scope, turn_id)
    if state is None:
        return None
    if token_digest is not None and token_unbound(conn, turn_id, token_digest):
        return None
    if state.terminal:
        return state
    conn.execute(
        "UPDATE turns SET cancel_requested_at = COALESCE(cancel_requested_at, ?) "
        "WHERE turn_id = ? AND status = 'running'",
        [now(conn), turn_id],
    )
    # The person asked to stop: the call the turn is asking about must never run, even
    # if someone approves it before the turn's own process notices the cancel.
    paused = open_approval(conn, turn_id)
    if paused is not None:
        void_open(conn, paused.approval_id, CANCELLED_WHILE_ASKED)
    return dataclasses.replace(state, cancel_requested=True)
