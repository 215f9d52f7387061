"""What an attempt's end means for its inbound: a business result, or a typed failure.

A turn that exists is the inbound's business result, whatever its outcome:
its request id is spent, so running the message "again" could only return
the same record (``failed`` and ``lost`` turns included). Only failures that
left no turn behind are retried: the store or the Host could not start one
now, or an earlier attempt's turn is still running elsewhere.
"""

from __future__ import annotations

from hostkit.errors import (
    HostkitError,
    InvalidTurnRequest,
    NotFoundOrUnauthorized,
    ProviderError,
    RequestConflict,
    ScopeError,
    StoreError,
    TurnInfrastructureError,
    TurnInProgress,
    TurnRejected,
    UserError,
)
from hostkit.types import (
    UNPROCESSABLE,
    FailureKind,
    InboundEnvelope,
    InboundFailure,
    InboundResult,
    TurnResult,
)

__all__ = ["failure_of", "needs_no_turn", "result_of", "unsupported_content"]

# The detail of an inbound whose turn was stopped by the Host, not by its user.
_CUT_OFF = "cut off by the Host, not cancelled by the user"


def unsupported_content(envelope: InboundEnvelope) -> InboundFailure | None:
    """A permanent failure for content the worker cannot give a turn yet, or None.

    Stored content (``payload_ref``) and artifacts are not resolved into turns
    yet: answering without them would answer another message, and ``ignored``
    would end it for good. A dead letter keeps it, requeueable once transports
    resolve such references.
    """
    if envelope.kind == UNPROCESSABLE:
        why = envelope.metadata.get(UNPROCESSABLE)
        return InboundFailure(
            "permanent",
            UNPROCESSABLE,
            f"the channel accepted the event without its text: {why}"
            if isinstance(why, str)
            else "the channel accepted the event without its text",
        )
    unsupported = []
    if envelope.payload_ref is not None:
        unsupported.append("stored content (payload_ref)")
    if envelope.artifacts:
        unsupported.append(f"{len(envelope.artifacts)} artifact(s)")
    if not unsupported:
        return None
    what = " and ".join(unsupported)
    return InboundFailure(
        "permanent", "unsupported_content", f"the worker cannot answer {what} yet"
    )


def needs_no_turn(envelope: InboundEnvelope) -> str | None:
    """Why ``envelope`` is answered without a model turn (``ignored``), or None."""
    if envelope.kind != "message":
        return f"an inbound of kind {envelope.kind!r} needs no turn"
    if not envelope.payload.strip():
        return "the message has no text to answer"
    return None


def result_of(result: TurnResult) -> InboundResult:
    """The inbox record of a turn: ``cancelled`` when the user cancelled it, else ``turn``.

    A turn the Host cut off (the worker's deadline or shutdown, the Host
    closing) is no user's decision, so it is not ``cancelled``; it is still
    the message's terminal result (``turn``, outcome ``cancelled``, a detail
    naming the cut): the turn may have run effects before it was cut, and its
    request id is spent, so the message is never run blindly again.
    """
    if result.outcome == "cancelled" and result.cancelled_by == "user":
        return InboundResult("cancelled", result.turn_id, result.outcome, result.error or "")
    detail = result.error or ""
    if result.outcome in ("cancelled", "indeterminate") and result.cancelled_by in (
        "host",
        "caller",
    ):
        detail = f"{_CUT_OFF}: {detail}" if detail else _CUT_OFF
    return InboundResult("turn", result.turn_id, result.outcome, detail)


def failure_of(exc: BaseException) -> InboundFailure:
    """A typed, redacted failure for an attempt that ended with ``exc`` and no turn result.

    ``transient``: worth another attempt after backoff (the store, a busy or
    closing Host, an earlier attempt's turn still running, a provider outage
    before admission, a bug). ``permanent``: this envelope can never become a
    turn as it is (an invalid request, a refused principal, an unknown agent).
    """
    if isinstance(exc, TurnInProgress):
        return InboundFailure("transient", "turn_in_progress", exc.message)
    if isinstance(exc, TimeoutError):
        return InboundFailure("transient", "timeout", "the attempt did not end within its deadline")
    if isinstance(exc, InvalidTurnRequest):
        return InboundFailure("permanent", "invalid_request", exc.message)
    if isinstance(exc, RequestConflict):
        return InboundFailure("permanent", "request_conflict", exc.message)
    if isinstance(exc, TurnRejected):
        if isinstance(exc.__cause__, StoreError):
            # The store could not admit it: not about this message, as any store failure.
            return InboundFailure("transient", "store", exc.message)
        # The code says it was rejected: the text says why, not "turn rejected:" again.
        return InboundFailure(_kind(exc), "turn_rejected", exc.reason)
    if isinstance(exc, ScopeError | NotFoundOrUnauthorized):
        return InboundFailure("permanent", "principal_refused", exc.message)
    if isinstance(exc, ProviderError):
        return InboundFailure(_kind(exc), "provider", exc.message)
    if isinstance(exc, TurnInfrastructureError):
        # The turn may exist without a terminal record: the next attempt reconciles it.
        return InboundFailure("transient", "turn_infrastructure", exc.message)
    if isinstance(exc, StoreError):
        # Not about this message: retried, and dead-lettered only if it never clears.
        return InboundFailure("transient", "store", exc.message)
    if isinstance(exc, UserError):
        return InboundFailure("permanent", "invalid", exc.message)
    if isinstance(exc, HostkitError):
        return InboundFailure(_kind(exc), "failed", exc.message)
    # A bug: its text may hold anything, so only its type is kept; retried, then dead-lettered.
    return InboundFailure("transient", "internal", f"internal error ({type(exc).__name__})")


def _kind(exc: HostkitError) -> FailureKind:
    return "transient" if exc.retryable else "permanent"
