"""Agent Core values: revision history, promotion gates, session pins and authored state.

An Agent Core is a Git repository (``agent.yaml`` + ``agent/``); the Host
owns which commit is live (a ref it moves only after gates) and records each
move, refused or not, as a ``CoreEvent``. Authored state (``ctx.state``) is
a JSON value per (core, scope, key) with a version for compare-and-set.
Every value is frozen and checked on construction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue, bounded, redact_credentials
from hostkit.freeze import FrozenMap, freeze

__all__ = [
    "CORE_ACTIONS",
    "MAX_STATE_KEY",
    "MAX_STATE_VALUE_BYTES",
    "CoreAction",
    "CoreEvent",
    "GateOutcome",
    "SessionPin",
    "StateEntry",
    "is_core_id",
    "is_revision",
    "state_json",
]

# promote / rollback: the Host-owned ref moved; refused: a promotion whose gates failed
# (or whose review token was missing or stale): the ref did not move.
CoreAction = Literal["promote", "rollback", "refused"]
CORE_ACTIONS: tuple[str, ...] = get_args(CoreAction)
MAX_STATE_KEY = 200
# One state value, serialised as JSON.
MAX_STATE_VALUE_BYTES = 64 * 1024
_MAX_DETAIL = 2_000
# A long detail keeps its first line (the headline a refusal quotes) up to this.
_MAX_DETAIL_HEADLINE = 300
_MAX_REASON = 500
_CORE_ID = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_REVISION = re.compile(r"[0-9a-f]{40}")


def is_core_id(value: object) -> bool:
    """A core id: lower-case, starts with a letter, at most 64 of a-z 0-9 '_' '-'."""
    return isinstance(value, str) and _CORE_ID.fullmatch(value) is not None


def is_revision(value: object) -> bool:
    """A core revision: a full 40-hex Git commit id."""
    return isinstance(value, str) and _REVISION.fullmatch(value) is not None


def _check_core(core_id: object) -> None:
    if not is_core_id(core_id):
        raise InvalidValue("core_id must be a core id (a-z, 0-9, '_', '-'; at most 64)")


def state_json(value: Any) -> str:
    """``value`` as canonical JSON within ``MAX_STATE_VALUE_BYTES``; else ``InvalidValue``."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidValue(f"a state value must be JSON data ({bounded(str(exc), 120)})") from None
    if len(text.encode()) > MAX_STATE_VALUE_BYTES:
        raise InvalidValue(f"a state value is at most {MAX_STATE_VALUE_BYTES} bytes as JSON")
    return text


def _gate_detail(text: object, *, limit: int = _MAX_DETAIL) -> str:
    """A gate's output, redacted and bounded like ``bounded()`` but kept line by line.

    The first line is the gate's headline (``pytest exited 1``: what a refusal
    quotes); a failed suite's verdict is at the end of its output (the summary,
    the last traceback). So a long detail keeps its first line and its tail,
    with a ``…`` line where the middle was cut; line endings become ``\\n``.
    """
    # Whole, not line by line: a "token:" whose value is on the next line is masked, as
    # bounded() masks it (the patterns' \s spans a newline as it spans a space).
    value = redact_credentials(str(text).replace("\r\n", "\n").replace("\r", "\n"))
    if len(value) <= limit:
        return value
    first, _, rest = value.partition("\n")
    if not rest:
        return bounded(value, limit)  # one long line: a message, read from its start
    first = bounded(first, _MAX_DETAIL_HEADLINE)
    room = max(0, limit - len(first) - len("\n…\n"))
    return f"{first}\n…\n{rest[len(rest) - room :]}"


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """One promotion gate's verdict: ``tests``, ``dependencies``, ``mcp_review``, ``manifest``."""

    gate: str
    passed: bool
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.gate, str) or not 0 < len(self.gate) <= 64:
            raise InvalidValue("gate must be a short name")
        object.__setattr__(self, "detail", _gate_detail(self.detail))


@dataclass(frozen=True, slots=True)
class CoreEvent:
    """One recorded move (or refused move) of a core's Host-owned ref.

    ``revision`` is the commit the ref moved to (or was asked to move to);
    ``previous`` the commit it pointed at before (None: the first promotion).
    ``security_diff`` is the secret-safe MCP declaration diff shown to the
    operator (empty when the MCP declarations did not change). ``event_id``
    is 0 until the store assigns it.
    """

    core_id: str
    action: CoreAction
    revision: str
    previous: str | None
    gates: tuple[GateOutcome, ...]
    actor: str
    at: float
    reason: str | None = None
    security_diff: Mapping[str, Any] = field(default_factory=FrozenMap)
    event_id: int = 0

    def __post_init__(self) -> None:
        _check_core(self.core_id)
        if self.action not in CORE_ACTIONS:
            raise InvalidValue(f"action must be one of {', '.join(CORE_ACTIONS)}")
        for name in ("revision", "previous"):
            value = getattr(self, name)
            if not (value is None and name == "previous") and not is_revision(value):
                raise InvalidValue(f"{name} must be a 40-hex commit id")
        object.__setattr__(self, "gates", tuple(self.gates))
        if not all(isinstance(gate, GateOutcome) for gate in self.gates):
            raise InvalidValue("gates must be GateOutcome values")
        if not isinstance(self.actor, str) or not 0 < len(self.actor) <= 256:
            raise InvalidValue("actor must be a non-empty string of at most 256 characters")
        if self.reason is not None:
            object.__setattr__(self, "reason", bounded(str(self.reason), _MAX_REASON))
        object.__setattr__(self, "security_diff", freeze(self.security_diff))

    @property
    def passed(self) -> bool:
        return all(gate.passed for gate in self.gates)


@dataclass(frozen=True, slots=True)
class SessionPin:
    """The revision a session's latest turn of a core ran on (what it is pinned to)."""

    session_id: str
    core_id: str
    core_revision: str
    turn_id: str
    at: float


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One authored state value and its version (1 on first write, +1 on every set)."""

    core_id: str
    scope: str
    key: str
    value: Any
    version: int

    def __post_init__(self) -> None:
        _check_core(self.core_id)
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise InvalidValue("version must be a positive integer")
        object.__setattr__(self, "value", freeze(self.value))
