"""TurnExecutionContext: the deeply immutable bindings of one admitted turn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap, freeze
from hostkit.types._redact import bounded_metadata
from hostkit.types._scope import PrincipalScope

__all__ = ["TokenKind", "TurnExecutionContext", "TurnToken"]

TokenKind = Literal["route", "admission", "cancellation"]


@dataclass(frozen=True, slots=True)
class TurnToken:
    """An immutable identity naming one request/turn/session.

    Tokens are identities, not control objects: the live lease, route and
    cancellation state stay behind their owning modules, which resolve a token
    to that state and refuse a token from another turn.
    """

    kind: TokenKind
    request_id: str
    turn_id: str
    session_id: str
    nonce: str

    def __post_init__(self) -> None:
        if self.kind not in ("route", "admission", "cancellation"):
            raise InvalidValue("token kind must be route, admission or cancellation")
        for name in ("request_id", "turn_id", "session_id", "nonce"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidValue(f"token {name} must be a non-empty string")


@dataclass(frozen=True, slots=True)
class TurnExecutionContext:
    """Created once after admission; every downstream operation of a turn uses it.

    Secret values, stores, provider clients, approval caches and adapters are
    never fields here: they are injected dependencies of the owning modules.
    The bindings must agree, and ``__post_init__`` refuses a context whose
    principal does not authorize its session or whose tokens name another turn.
    """

    request_id: str
    turn_id: str
    principal: PrincipalScope
    session_id: str
    core_id: str
    core_revision: str
    capability_snapshot: Mapping[str, Any]
    workspace_scope: str
    route_token: TurnToken
    admission_lease_token: TurnToken
    cancellation_token: TurnToken
    trace_ids: tuple[str, ...]
    interaction_metadata: Mapping[str, Any]
    generation: int = 0

    def __post_init__(self) -> None:
        for name in ("request_id", "turn_id", "session_id", "core_id", "core_revision"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidValue(f"{name} must be a non-empty string")
        if not isinstance(self.principal, PrincipalScope):
            raise InvalidValue("principal must be a PrincipalScope")
        if self.session_id not in self.principal.allowed_session_ids:
            raise InvalidValue("principal does not authorize session_id")
        expected = {
            "route_token": "route",
            "admission_lease_token": "admission",
            "cancellation_token": "cancellation",
        }
        for name, kind in expected.items():
            token = getattr(self, name)
            if not isinstance(token, TurnToken) or token.kind != kind:
                raise InvalidValue(f"{name} must be a {kind} TurnToken")
            if (token.request_id, token.turn_id, token.session_id) != (
                self.request_id,
                self.turn_id,
                self.session_id,
            ):
                raise InvalidValue(f"{name} names another request, turn or session")
        object.__setattr__(self, "capability_snapshot", FrozenMap(self.capability_snapshot))
        object.__setattr__(self, "trace_ids", freeze(tuple(self.trace_ids)))
        object.__setattr__(
            self, "interaction_metadata", bounded_metadata(self.interaction_metadata)
        )
