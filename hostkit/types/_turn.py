"""TurnRequest, TurnResult and TurnCancelResult: the TurnExecution seam's values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from hostkit.errors import InvalidTurnRequest, InvalidValue, bounded
from hostkit.freeze import FrozenMap, freeze, thaw
from hostkit.types._attachment import MAX_TURN_ATTACHMENT_BYTES, Attachment
from hostkit.types._bounds import is_count, is_message_text, is_text
from hostkit.types._model import MAX_TOKEN_COUNT, Usage
from hostkit.types._redact import bounded_metadata, check_route
from hostkit.types._scope import ConversationFacts, PrincipalScope

_Model = TypeVar("_Model")

__all__ = [
    "MAX_ATTACHMENTS",
    "MAX_INJECTED_CONTEXT_CHARS",
    "MAX_INJECTED_CONTEXT_ITEMS",
    "MAX_INPUT_CHARS",
    "UNKNOWN_EFFECT",
    "Attachment",
    "EffectSummary",
    "FreshSession",
    "ProviderUnavailable",
    "ResumeSession",
    "SessionSelector",
    "TurnCancelResult",
    "TurnCanceller",
    "TurnOutcome",
    "TurnRequest",
    "TurnResult",
    "session_select",
]

TurnOutcome = Literal["completed", "needs_user", "failed", "cancelled", "lost", "indeterminate"]
# Who stopped a cancelled (or indeterminate) turn: ``user`` asked for it (``cancel``,
# ``cancel_token``, a durable cancel request); ``caller`` cancelled the task running
# the turn (Ctrl-C, an inbox worker's deadline or shutdown); ``host`` is the Host
# shutting down. Only ``user`` means a person decided the turn should not finish.
TurnCanceller = Literal["user", "caller", "host"]
# A turn failed because its model provider could not be reached (a retryable
# ProviderError after the adapter's own retries): ``before_output`` when it failed
# before the model answered anything and before any effect ran (only the user's
# message was recorded), ``after_output`` when it failed later in the turn.
ProviderUnavailable = Literal["before_output", "after_output"]
MAX_INPUT_CHARS = 100_000
# A turn's injected context is kept with it (its admission records it whole), so that the
# continuation of an approval it pauses on sends it again: bounded in entries and in total.
MAX_INJECTED_CONTEXT_ITEMS = 64
MAX_INJECTED_CONTEXT_CHARS = 400_000
MAX_ATTACHMENTS = 8
_MAX_KEY = 200


@dataclass(frozen=True, slots=True)
class FreshSession:
    """Start a new session for this conversation; later requests use it too."""


@dataclass(frozen=True, slots=True)
class ResumeSession:
    """Rebind the conversation to an earlier session it owns (owner-checked)."""

    session_id: str

    def __post_init__(self) -> None:
        if not is_text(self.session_id, limit=_MAX_KEY):
            raise InvalidTurnRequest(
                "ResumeSession needs a session id of valid text (1-200 characters)"
            )
        if self.session_id in ("bound", "fresh"):
            # The store reads these as selectors: a resume would start or keep a session.
            raise InvalidTurnRequest(
                f"ResumeSession needs a session id, not {self.session_id!r} "
                "(use FreshSession() or the default 'bound')"
            )


SessionSelector = Literal["bound"] | FreshSession | ResumeSession


def session_select(selector: SessionSelector) -> str:
    """The store's spelling of ``selector``: ``"bound"``, ``"fresh"`` or the resumed id."""
    if isinstance(selector, FreshSession):
        return "fresh"
    if isinstance(selector, ResumeSession):
        return selector.session_id
    return "bound"


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One request to run a turn; deeply immutable and validated before any side effect.

    ``principal`` is either authenticated ``ConversationFacts`` (the Host
    resolves the conversation's scope and binding) or a scope the Host's
    AuthorityResolver already issued (operator, scheduled run, child agent).
    ``request_id`` is the stable idempotency key: a repeat by the same
    principal returns the first turn's result instead of running again.
    ``continues`` names an answered approval: the turn then runs that one
    approved effect (instead of taking ``input`` as a user message) and lets
    the model go on from its result. The Host builds these requests itself.
    """

    input: str
    principal: ConversationFacts | PrincipalScope
    request_id: str
    core_id: str = "assistant"
    session: SessionSelector = "bound"
    core_revision: str | None = None
    attachments: tuple[Attachment, ...] = ()
    route: Mapping[str, Any] | None = None
    injected_context: tuple[str, ...] = ()
    # Whether the session's bootstrap snapshot (by default the workspace's AGENTS.md, taken
    # once per session) is a layer of this turn's context; False for a turn that must not
    # see it (a delegated child run).
    bootstrap: bool = True
    metadata: Mapping[str, Any] = field(default_factory=FrozenMap)
    continues: str | None = None

    def __post_init__(self) -> None:
        # Plain copies first: a str subclass's own __eq__ or __hash__ never runs later.
        for name in ("input", "request_id", "core_id", "session", "core_revision", "continues"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, str.__str__(value))
        if not isinstance(self.input, str) or not self.input.strip():
            raise InvalidTurnRequest("input must be non-empty text")
        if len(self.input) > MAX_INPUT_CHARS:
            raise InvalidTurnRequest(f"input is limited to {MAX_INPUT_CHARS} characters")
        if not is_message_text(self.input, limit=MAX_INPUT_CHARS):
            # Undecodable bytes (a lone surrogate): whatever stores or summarizes it fails.
            raise InvalidTurnRequest("input must be valid text (no lone surrogates)")
        if not isinstance(self.principal, ConversationFacts | PrincipalScope):
            raise InvalidTurnRequest("principal must be ConversationFacts or a Host-issued scope")
        for name in ("request_id", "core_id"):
            value = getattr(self, name)
            if not is_text(value, limit=_MAX_KEY):
                raise InvalidTurnRequest(
                    f"{name} must be a non-empty string of at most {_MAX_KEY} chars of valid text"
                )
        if not (
            isinstance(self.session, FreshSession | ResumeSession)
            or (isinstance(self.session, str) and self.session == "bound")
        ):
            raise InvalidTurnRequest("session must be 'bound', FreshSession() or ResumeSession(id)")
        if self.core_revision is not None and not is_text(self.core_revision, limit=_MAX_KEY):
            raise InvalidTurnRequest(
                f"core_revision must be None or at most {_MAX_KEY} chars of valid text"
            )
        for name in ("attachments", "injected_context"):
            if not _is_sequence(getattr(self, name)):
                raise InvalidTurnRequest(f"{name} must be a list")
        attachments = tuple(self.attachments)
        if len(attachments) > MAX_ATTACHMENTS:
            raise InvalidTurnRequest(f"at most {MAX_ATTACHMENTS} attachments")
        if not all(isinstance(item, Attachment) for item in attachments):
            raise InvalidTurnRequest("attachments must be Attachment values")
        if len({item.ref for item in attachments}) != len(attachments):
            raise InvalidTurnRequest("each attachment may be attached once per turn")
        if sum(item.size for item in attachments) > MAX_TURN_ATTACHMENT_BYTES:
            raise InvalidTurnRequest(
                f"a turn's attachments are at most {MAX_TURN_ATTACHMENT_BYTES} bytes together"
            )
        if attachments and self.continues is not None:
            raise InvalidTurnRequest("a continuation turn carries no attachments")
        object.__setattr__(self, "attachments", attachments)
        for name in ("route", "metadata"):
            value = getattr(self, name)
            if not (isinstance(value, Mapping) or (name == "route" and value is None)):
                raise InvalidTurnRequest(f"{name} must be a mapping")
        # Kept, such a route would fail every later delivery claim (see ``check_route``).
        check_route(self.route, error=InvalidTurnRequest)
        object.__setattr__(
            self, "route", None if self.route is None else bounded_metadata(self.route)
        )
        if not all(isinstance(item, str) for item in self.injected_context):
            raise InvalidTurnRequest("injected_context entries must be bounded, valid text")
        # Plain copies: a str subclass's own __len__ or __eq__ never runs here or later.
        context = tuple(str.__str__(item) for item in self.injected_context)
        if any(item and not is_message_text(item, limit=MAX_INPUT_CHARS) for item in context):
            raise InvalidTurnRequest("injected_context entries must be bounded, valid text")
        if context and (
            len(context) > MAX_INJECTED_CONTEXT_ITEMS
            or sum(map(len, context)) > MAX_INJECTED_CONTEXT_CHARS
        ):
            raise InvalidTurnRequest(
                f"injected_context is at most {MAX_INJECTED_CONTEXT_ITEMS} entries of "
                f"{MAX_INJECTED_CONTEXT_CHARS} characters together"
            )
        object.__setattr__(self, "injected_context", context)
        object.__setattr__(self, "metadata", bounded_metadata(self.metadata))
        if self.continues is not None and not is_text(self.continues, limit=_MAX_KEY):
            raise InvalidTurnRequest(
                "continues must name an approval (1-200 characters of valid text)"
            )


def _is_sequence(value: object) -> bool:
    """A sequence, not a text: iterating anything else may run its code or never end."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


# The effect of a call that named no entry of its turn's catalog: what the model typed
# there is its own text (a prompt injection can make it a secret), so no record, event
# or span repeats it. No effect name can be it (they begin with a letter).
UNKNOWN_EFFECT = "_unknown"


@dataclass(frozen=True, slots=True)
class EffectSummary:
    """What one effect did, as the operator may see it (bounded, redacted).

    ``effect`` is a catalog name, or ``UNKNOWN_EFFECT`` for a call that named none.
    """

    call_id: str
    effect: str
    status: str
    summary: str


@dataclass(frozen=True, slots=True)
class TurnResult:
    """The frozen snapshot of a terminal turn."""

    request_id: str
    turn_id: str
    session_id: str
    core_id: str
    core_revision: str
    outcome: TurnOutcome
    text: str
    effects: tuple[EffectSummary, ...] = ()
    deliveries: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    durable_result_ref: str = ""
    generation: int = 0
    pending_approval: str | None = None
    # The final answer stopped at the output limit (the model's finish reason said so).
    truncated: bool = False
    # A completed turn of an agent with an ``output_type``: the validated answer as
    # JSON-able data (``output_as(Model)`` gives the typed value).
    output: Any = None
    # A turn ended ``cancelled`` or ``indeterminate`` by a cancellation: who stopped it.
    cancelled_by: TurnCanceller | None = None
    # A failed turn whose provider could not be reached: when in the turn (an inbox
    # worker waits out the outage for the messages behind it; a typed fact, never the
    # error text).
    provider_unavailable: ProviderUnavailable | None = None
    # With ``provider_unavailable``: the delay the provider asked for (its Retry-After,
    # ``ProviderError.retry_after``: 0 to ``MAX_RETRY_AFTER_S`` seconds), None if none.
    provider_retry_after_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "effects", tuple(self.effects))
        object.__setattr__(self, "deliveries", tuple(self.deliveries))
        object.__setattr__(self, "output", freeze(self.output))

    def output_as(self, model: type[_Model]) -> _Model:
        """The structured answer as an instance of ``model`` (the agent's ``output_type``)."""
        if self.output is None:
            raise InvalidValue(f"turn {self.turn_id} has no structured output ({self.outcome})")
        validate: Any = getattr(model, "model_validate", None)
        if validate is None:
            raise InvalidValue("output_as takes a pydantic model class")
        try:
            return validate(thaw(self.output))  # type: ignore[no-any-return]
        except ValueError as exc:  # pydantic's ValidationError, or a validator's own
            name = bounded(getattr(model, "__name__", "the model"), 80)
            raise InvalidValue(
                f"turn {self.turn_id}'s structured output does not fit {name}: "
                f"{bounded(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 200)}"
            ) from None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (persisted as the turn's durable result)."""
        return {
            "request_id": self.request_id,
            "turn_id": self.turn_id,
            "session_id": self.session_id,
            "core_id": self.core_id,
            "core_revision": self.core_revision,
            "outcome": self.outcome,
            "text": self.text,
            "effects": [
                {"call_id": e.call_id, "effect": e.effect, "status": e.status, "summary": e.summary}
                for e in self.effects
            ],
            "deliveries": list(self.deliveries),
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
                "cache_read_tokens": self.usage.cache_read_tokens,
                "cache_write_tokens": self.usage.cache_write_tokens,
            },
            "error": self.error,
            "durable_result_ref": self.durable_result_ref,
            "generation": self.generation,
            "pending_approval": self.pending_approval,
            "truncated": self.truncated,
            **({} if self.cancelled_by is None else {"cancelled_by": self.cancelled_by}),
            **(
                {}
                if self.provider_unavailable is None
                else {"provider_unavailable": self.provider_unavailable}
            ),
            **(
                {}
                if self.provider_retry_after_s is None
                else {"provider_retry_after_s": self.provider_retry_after_s}
            ),
            **({} if self.output is None else {"output": thaw(self.output)}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnResult:
        values = dict(freeze(data))
        values["effects"] = tuple(EffectSummary(**dict(e)) for e in values.get("effects", ()))
        values["usage"] = _stored_usage(values.get("usage", {}))
        values["deliveries"] = tuple(values.get("deliveries", ()))
        return cls(**values)


def _stored_usage(data: Mapping[str, Any]) -> Usage:
    """A recorded result's usage. Results recorded before counts were checked may hold
    what a provider reported as is: ``12.0`` reads as 12, ``-5`` or ``3.7`` as 0, a
    count past ``MAX_TOKEN_COUNT`` (kept before that bound) as the bound, never as an
    error that would make the whole result unreadable."""
    counts: dict[str, Any] = {}
    for name, value in dict(data).items():
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        counts[name] = min(value, MAX_TOKEN_COUNT) if is_count(value, low=0) else 0
    return Usage(**counts)


@dataclass(frozen=True, slots=True)
class TurnCancelResult:
    """The answer to an owner-checked cancel request.

    ``cancelled``: this call (or an earlier one) ended the turn: ``outcome`` is
    ``cancelled``, or ``indeterminate`` when an effect was running or unrecorded;
    ``already_terminal``: the turn had ended otherwise (``outcome`` says how);
    ``requested``: the turn runs in another Host process, which will observe
    the durable request.
    """

    turn_id: str
    disposition: Literal["cancelled", "already_terminal", "requested"]
    outcome: TurnOutcome | None
