"""The frozen values of the store's approvals group and their persisted form.

``PendingApproval`` is what approvers and operators see: the bounded,
field-name-redacted ``view`` for display, and the typed security facts
(``secret_names``: which Host secrets the call binds) that decisions read.
The persisted form is adapter-neutral JSON: ``arguments`` as given, and one
typed ``approval.view.v2`` record holding the view and the security facts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic

from hostkit.errors import InvalidValue, StoreError
from hostkit.freeze import freeze, thaw
from hostkit.types import MAX_KEY_CHARS

__all__ = [
    "MAX_APPROVAL_LIST",
    "MAX_ID_CHARS",
    "MAX_SECRET_NAMES",
    "VOID_STATUSES",
    "ApprovalAnswer",
    "ApprovalDecision",
    "ApprovalFilter",
    "ApprovalPage",
    "ApprovalStatus",
    "ClaimedApproval",
    "NewApproval",
    "PendingApproval",
    "check_id",
    "decode_view",
    "encode_approval",
]

ApprovalStatus = Literal[
    "pending", "approved", "denied", "executed", "stale", "superseded", "indeterminate"
]
# The statuses of an approval that will never run: ``void_reason`` says why.
VOID_STATUSES: tuple[ApprovalStatus, ...] = ("stale", "superseded", "indeterminate")
ApprovalDecision = Literal["approve_once", "approve_session", "deny"]
# What a listing selects: one status, or "open": every approval whose call can still run
# (pending, or answered and not yet claimed by a continuation turn: ``resume`` runs it).
ApprovalFilter = ApprovalStatus | Literal["open"]

MAX_APPROVAL_LIST = 500
# Identifiers and secret names are short tokens; anything longer is a bug or an attack.
MAX_ID_CHARS = 200
MAX_SECRET_NAMES = 64

_SECRET_GRANT = "secret.bind:"
_VIEW_KIND = "approval.view.v2"
_ID_FIELDS = (
    "approval_id",
    "session_id",
    "turn_id",
    "core_id",
    "core_revision",
    "effect",
    "call_id",
    "policy_fingerprint",
    "rule_key",
)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval as approvers and operators see it: the redacted view, never the arguments.

    ``view`` is for display only. Decisions read the typed fields:
    ``secret_names`` (the Host secrets the call binds; such a call is approved
    once, never cached for the session) and ``binds_secret``. ``void_reason``
    says why a ``stale``, ``superseded`` or ``indeterminate`` approval will
    never run.
    """

    approval_id: str
    session_id: str
    turn_id: str
    principal_id: str
    core_id: str
    core_revision: str
    effect: str
    call_id: str
    view: Mapping[str, Any]
    policy_fingerprint: str
    rule_key: str
    status: ApprovalStatus
    decision: str | None
    decided_by: str | None
    continuation_turn_id: str | None
    created_at: str
    decided_at: str | None
    secret_names: tuple[str, ...] = ()
    void_reason: str | None = None
    # What the tool's pre-approval check found when it was asked (a digest of its
    # target view: a file's content, say). The continuation runs the check again and
    # runs the call only if it finds the same. None: no check, or asked before this.
    target_digest: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "view", freeze(self.view))
        object.__setattr__(self, "secret_names", tuple(self.secret_names))

    @property
    def binds_secret(self) -> bool:
        """True when running the call binds at least one Host secret."""
        return bool(self.secret_names)

    @property
    def awaiting_continuation(self) -> bool:
        """Answered, but no continuation turn has claimed it yet: ``resume`` runs it."""
        return self.status in ("approved", "denied") and self.continuation_turn_id is None


@dataclass(frozen=True, slots=True)
class ApprovalPage:
    """One listing of approvals, newest first; ``truncated`` when older ones were left out
    (a reader who is not told would take the page for all there is), and then
    ``next_before``: what ``page(before=...)`` takes to list them."""

    approvals: tuple[PendingApproval, ...]
    truncated: bool
    next_before: int | None = None


@dataclass(frozen=True, slots=True)
class NewApproval:
    """What ``ApprovalStore.insert`` records for an unanswered ``ask``."""

    approval_id: str
    session_id: str
    turn_id: str
    principal_id: str
    core_id: str
    core_revision: str
    effect: str
    call_id: str
    arguments: Mapping[str, Any]
    view: Mapping[str, Any]
    policy_fingerprint: str
    rule_key: str
    secret_names: tuple[str, ...]
    target_digest: str | None = None

    def __post_init__(self) -> None:
        for name in ("arguments", "view"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise InvalidValue(f"approval {name} must be a mapping")
            try:
                object.__setattr__(self, name, freeze(value))
            except (TypeError, RecursionError) as exc:
                raise InvalidValue(f"approval {name} must hold only plain values") from exc
        names: object = self.secret_names
        if isinstance(names, str):
            raise InvalidValue("secret_names is a sequence of names, not one string")
        object.__setattr__(self, "secret_names", tuple(self.secret_names))


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """The outcome of ``ApprovalStore.answer``: the row after the attempt.

    ``accepted`` is True for the one answer that was recorded; otherwise
    ``approval.status`` says what stopped it (already answered, ``stale``,
    ``superseded``).
    """

    approval: PendingApproval
    accepted: bool


@dataclass(frozen=True, slots=True)
class ClaimedApproval:
    """What a continuation turn claimed: the decision and the frozen call to run once."""

    approval: PendingApproval
    arguments: Mapping[str, Any]


class _StoredView(pydantic.BaseModel):
    """The ``approvals.view`` column: the display view and the typed security facts.

    Kept together in one JSON document so no migration is needed; rows written
    before this record existed hold the bare view (see ``decode_view``).
    """

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=True)

    kind: Literal["approval.view.v2"]
    view: dict[str, Any]
    secret_names: tuple[str, ...] = ()
    target_digest: str | None = None


def decode_view(
    text: str, approval_id: str
) -> tuple[Mapping[str, Any], tuple[str, ...], str | None]:
    """(view, secret names, target digest) of a stored ``view`` column; ``StoreError`` if it
    is unreadable."""
    try:
        raw = json.loads(text)
        if isinstance(raw, dict) and raw.get("kind") == _VIEW_KIND:
            stored = _StoredView.model_validate_json(text)
            return freeze(stored.view), stored.secret_names, stored.target_digest
    except (ValueError, pydantic.ValidationError) as exc:
        raise StoreError(f"approval {approval_id[:MAX_ID_CHARS]}: unreadable view record") from exc
    if not isinstance(raw, dict):
        raise StoreError(f"approval {approval_id[:MAX_ID_CHARS]}: unreadable view record")
    # A row from before the typed record: its view listed bound secrets under "binds".
    # Fail safe: anything there at all counts as binding a secret.
    binds = raw.get("binds")
    if not binds:
        return freeze(raw), (), None
    names = [str(b).removeprefix(_SECRET_GRANT) for b in binds] if isinstance(binds, list) else []
    return freeze(raw), tuple(names) or ("?",), None


def check_id(name: str, value: object, *, limit: int = MAX_ID_CHARS) -> str:
    """``value`` if it is a 1..``limit``-character string of valid Unicode."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidValue(f"approval {name} must be a string of 1-{limit} characters")
    _encodable(name, value)
    return str.__str__(value)  # a plain copy: a subclass's own methods never run later


def _encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(f"approval {name} is not valid Unicode") from exc


def _json(name: str, value: object) -> str:
    if not isinstance(value, Mapping):
        raise InvalidValue(f"approval {name} must be a mapping")
    try:
        text = json.dumps(thaw(value), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidValue(f"approval {name} cannot be stored as JSON") from exc
    _encodable(name, text)
    return text


def encode_approval(approval: NewApproval) -> tuple[str, str]:
    """The (arguments, view) columns of a valid ``NewApproval``; else ``InvalidValue``."""
    if not isinstance(approval, NewApproval):
        raise InvalidValue("insert takes a NewApproval")
    for name in _ID_FIELDS:
        check_id(name, getattr(approval, name))
    # A principal id is an identity key, held to the bound turn admission holds it to.
    check_id("principal_id", approval.principal_id, limit=MAX_KEY_CHARS)
    names = approval.secret_names
    if len(names) > MAX_SECRET_NAMES:
        raise InvalidValue(f"an approval binds at most {MAX_SECRET_NAMES} secrets")
    for secret in names:
        check_id("secret name", secret)
    if len(set(names)) != len(names):
        raise InvalidValue("an approval names each bound secret once")
    target = approval.target_digest
    if target is not None:
        check_id("target digest", target)
    record = {"kind": _VIEW_KIND, "view": approval.view, "secret_names": names}
    if target is not None:
        record["target_digest"] = target
    view = _json("view", record)
    return _json("arguments", approval.arguments), view
