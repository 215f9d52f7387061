"""The author-facing ``ctx`` SDK: what slots and authored tools are handed, and nothing more.

``AuthorContext`` carries the turn's identities, its two state handles and
``emit``. It never holds a PrincipalScope, a lease, a store, the Host or any
operator authority as data: the handles and the emitter keep what they write
with in private slots. That is an interface boundary, not a sandbox: code in
the Host's process can reach anything the Host user can.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from hostkit.cores._state import StateHandle, StateRuntime, StateScopes
from hostkit.effects import AuthorHandles
from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap
from hostkit.store import SessionLease
from hostkit.types import TurnExecutionContext, bounded_metadata, redact_secret_fields

__all__ = ["MAX_EMITS", "AuthorContext", "AuthorTurn", "Emitter"]

# Events one turn's authored code may emit (slots and tools together); later ones are dropped.
MAX_EMITS = 200
_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
_MAX_KIND = 64
Sink = Callable[[str, Mapping[str, Any]], None]


class _Budget:
    """How many events the turn's authored code may still emit; nothing once the turn ended."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class Emitter:
    """``emit(kind, data)``: one ``<prefix>.<kind>`` event on the turn's observer.

    ``kind`` is a dotted lower_snake name (``InvalidValue`` otherwise); ``data``
    is redacted (secret-named fields, then ``redact`` over every string) and
    bounded like any event metadata. Emitting never fails the caller once the
    kind is valid: past ``MAX_EMITS`` per turn, or after the turn ended, an
    event is dropped. Called from a sync slot's worker thread, the event is
    handed to the event loop (observers run there).
    """

    __slots__ = ("_budget", "_loop_thread", "_prefix", "_redact", "_sink")

    def __init__(
        self, sink: Sink, prefix: str, budget: _Budget, redact: Callable[[str], str] = str
    ) -> None:
        self._sink = sink
        self._prefix = prefix
        self._budget = budget
        self._redact = redact
        # Observers run on the event loop: a sync slot's worker thread hands events back.
        self._loop_thread = threading.get_ident()

    def __repr__(self) -> str:
        return f"<emit {self._prefix}.*>"

    def __call__(self, kind: str, data: Mapping[str, Any] | None = None) -> None:
        if not isinstance(kind, str) or len(kind) > _MAX_KIND or not _KIND.fullmatch(kind):
            raise InvalidValue("an event kind is a dotted lower_snake name of at most 64")
        if data is not None and not isinstance(data, Mapping):
            raise InvalidValue("event data is a mapping")
        if self._budget.left <= 0:
            return
        self._budget.left -= 1
        try:
            safe = bounded_metadata(_strings(redact_secret_fields(dict(data or {})), self._redact))
        except Exception:
            safe = FrozenMap({"error": "the event data could not be made safe"})
        if threading.get_ident() == self._loop_thread:
            self._sink(f"{self._prefix}.{kind}", safe)
            return
        with contextlib.suppress(RuntimeError):  # not a worker thread of this loop: dropped
            anyio.from_thread.run_sync(self._sink, f"{self._prefix}.{kind}", safe)

    def close(self) -> None:
        self._budget.left = 0


def _strings(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` as JSON-like data whose every text is masked: keys, bytes (as UTF-8) and
    other objects (as their repr) too, since a tool emits whatever it read."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return redact(bytes(value).decode("utf-8", "backslashreplace"))
    if isinstance(value, Mapping):
        return {redact(str(key)): _strings(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_strings(item, redact) for item in value]
    return redact(repr(value))


@dataclass(frozen=True, slots=True)
class AuthorContext:
    """A slot's ``ctx``: identities, ``state`` (session), ``core_state`` (core-wide), ``emit``.

    ``await ctx.state.get(key)``, ``await ctx.state.entry(key)``,
    ``await ctx.state.set(key, value, expected=...)`` and the same on
    ``ctx.core_state``; ``ctx.emit("progress", {"n": 1})`` sends a
    ``slot.progress`` event.
    """

    turn_id: str
    session_id: str
    core_id: str
    core_revision: str
    request_id: str
    state: StateHandle
    core_state: StateHandle
    emit: Emitter


class AuthorTurn:
    """The SDK of one running turn: the slots' ``ctx`` and what its tools are lent.

    Opened by the turn after admission and closed when it ends: from then on
    ``set`` raises ``LeaseLost`` and ``emit`` drops events.
    """

    __slots__ = ("_budget", "_state", "context", "tools")

    def __init__(
        self,
        runtime: StateRuntime,
        *,
        turn_id: str,
        session_id: str,
        core_id: str,
        core_revision: str,
        request_id: str,
        lease: SessionLease,
        sink: Sink,
    ) -> None:
        self._state: StateScopes = runtime.open(core_id=core_id, session_id=session_id, lease=lease)
        self._budget = _Budget(MAX_EMITS)
        self.context = AuthorContext(
            turn_id=turn_id,
            session_id=session_id,
            core_id=core_id,
            core_revision=core_revision,
            request_id=request_id,
            state=self._state.session,
            core_state=self._state.core,
            emit=Emitter(sink, "slot", self._budget),
        )
        self.tools = AuthorHandles(
            state=self._state.session,
            core_state=self._state.core,
            emit=lambda redact: Emitter(sink, "tool", self._budget, redact),
        )

    @classmethod
    def of(
        cls,
        runtime: StateRuntime,
        context: TurnExecutionContext,
        lease: SessionLease,
        sink: Sink,
    ) -> AuthorTurn:
        """The SDK of the admitted turn ``context`` holding ``lease``; events go to ``sink``."""
        return cls(
            runtime,
            turn_id=context.turn_id,
            session_id=context.session_id,
            core_id=context.core_id,
            core_revision=context.core_revision,
            request_id=context.request_id,
            lease=lease,
            sink=sink,
        )

    def close(self) -> None:
        self._state.close()
        self._budget.left = 0
