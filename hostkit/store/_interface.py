"""The store seam: ``RuntimeStore``, the interface every storage adapter implements.

Seams, the Host and front ends see only this interface and the frozen values
it returns; no SQL and no database driver exists outside ``hostkit.store``
(import-linter enforces it). Storage is grouped by what it stores: the
methods on ``RuntimeStore`` itself cover sessions, ownership, owned queries
and the audit log; ``turns``, ``context``, ``approvals``, ``memory``,
``attachments``, ``inspect``, ``terminal_runs``, ``mcp_servers``, ``inbox``,
``delivery`` and ``cores`` are the groups, each an abstract base of its own.

An adapter (SQLite today, PostgreSQL later) subclasses ``RuntimeStore`` and
each group; the contract suite in ``tests/contract/test_store_*`` runs
against every adapter.
"""

from __future__ import annotations

import functools
import importlib
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import AsyncResource

from hostkit._extras import require_extra
from hostkit._opening import Opening
from hostkit.types import (
    AuditRecord,
    LegacyRepairView,
    MessageRecord,
    OwnerKind,
    Page,
    PrincipalScope,
    SessionRecord,
    TaskRecord,
)

if TYPE_CHECKING:
    from hostkit.store._approvals import ApprovalStore
    from hostkit.store._attachments import AttachmentStore
    from hostkit.store._connection import Synchronous
    from hostkit.store._context import ContextStore
    from hostkit.store._cores import CoreStore
    from hostkit.store._delivery import DeliveryStore
    from hostkit.store._erase import ErasedSession
    from hostkit.store._inbox import InboxStore
    from hostkit.store._inspect import InspectQueries
    from hostkit.store._mcp import McpStatusStore
    from hostkit.store._memory import MemoryStore
    from hostkit.store._schema import Migration
    from hostkit.store._scopes import ScopeMint
    from hostkit.store._sessions import ConversationSelect, OwnerFacts
    from hostkit.store._terminal_runs import TerminalRunStore
    from hostkit.store._turns import TurnStore

__all__ = ["RuntimeStore"]


class SchemaUpgrade(Protocol):
    """What opening the store did to its schema (each adapter's report of it)."""

    @property
    def from_version(self) -> int: ...

    @property
    def to_version(self) -> int: ...

    @property
    def backup(self) -> Path | None: ...


class RuntimeStore(AsyncResource):
    """The transactional source of truth behind every Host seam.

    ``await RuntimeStore.open(path)`` opens the embedded SQLite adapter.
    Every method either completes its whole transaction or raises
    (``StoreError`` with ``retryable``; ``StoreClosed`` after ``aclose``).
    Owned operations verify that the scope was issued by this open of the
    store and apply the owner predicate inside the same statement; a missing
    object and another owner's object give the same ``NotFoundOrUnauthorized``.
    """

    turns: TurnStore
    context: ContextStore
    approvals: ApprovalStore
    memory: MemoryStore
    attachments: AttachmentStore
    inspect: InspectQueries
    terminal_runs: TerminalRunStore
    mcp_servers: McpStatusStore
    inbox: InboxStore
    delivery: DeliveryStore
    cores: CoreStore
    # The schema upgrade this open ran, if any (from_version == to_version: none).
    migration: SchemaUpgrade

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_s: float = 5.0,
        max_batch: int = 64,
        lock_timeout_s: float = 30.0,
        migrations: Sequence[Migration] | None = None,
    ) -> Opening[RuntimeStore]:
        """Open (creating or upgrading) the embedded SQLite store at ``path``.

        ``async with RuntimeStore.open(path) as store`` or ``store = await
        RuntimeStore.open(path)`` (then ``await store.aclose()``).
        ``migrations`` defaults to the whole schema; tests pass a prefix of it
        to build a database of an older released version. ``busy_timeout_s``
        is how long one statement waits for another process's lock (0: not
        at all); a write waits for another process's write lock, try after
        try, up to ``lock_timeout_s`` in all (then ``StoreError``, retryable).
        """
        from hostkit.store._sqlite import SqliteStore

        return Opening(
            lambda: SqliteStore.connect(
                path,
                synchronous=synchronous,
                busy_timeout_s=busy_timeout_s,
                max_batch=max_batch,
                lock_timeout_s=lock_timeout_s,
                migrations=migrations,
            )
        )

    @classmethod
    def open_postgres(
        cls,
        url: str,
        *,
        pool_size: int = 8,
        connect_timeout_s: float = 10.0,
        statement_timeout_s: float = 30.0,
        backup_dir: Path | None = None,
        migrations: Sequence[Migration] | None = None,
        max_clock_skew_s: float = 2.0,
    ) -> Opening[RuntimeStore]:
        """Open (creating or upgrading) the PostgreSQL store at ``url`` (``hostkit[postgres]``).

        Any number of Hosts may open the same database. Keep the password out
        of ``url``: libpq reads ``PGPASSWORD``, ``PGPASSFILE`` or ``~/.pgpass``.
        ``ClockSkew`` when this machine's clock is more than
        ``max_clock_skew_s`` seconds off the server's (leases follow the
        server's clock, ``now``; a machine that far off shows wrong times).
        """
        return Opening(
            lambda: _connect_postgres(
                url,
                pool_size=pool_size,
                connect_timeout_s=connect_timeout_s,
                statement_timeout_s=statement_timeout_s,
                backup_dir=backup_dir,
                migrations=migrations,
                max_clock_skew_s=max_clock_skew_s,
            )
        )

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once ``aclose`` ran; every later call raises ``StoreClosed``."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the data lives, for messages and operators (a path or a redacted URL)."""

    @abstractmethod
    def now(self) -> float:
        """The time (epoch seconds) every lease, claim, expiry and due time here is in.

        Whatever writes or compares one of those times takes it from here, so
        the Hosts sharing a store agree on it: on SQLite this machine's wall
        clock (``time.time``: every process on the file shares it); on
        PostgreSQL the server's clock, sampled when the store opens and again
        every few seconds by a transaction under way, and carried between
        samples on a clock that counts a suspend and never steps: a Host's own
        wall clock, however wrong or however it steps, decides no lease. A
        read of memory, never a round trip; safe on any thread.
        """

    @abstractmethod
    def limit_waits(self, seconds: float) -> None:
        """End every wait for another process's lock by ``seconds`` from now, for good.

        For an owner that is closing: what it still writes may not wait a whole
        lock timeout per write for a stopped process that holds a lock. A write
        that has not got its lock by then fails (``StoreError``, retryable),
        having done nothing; a wait already under way ends then too. A later,
        longer limit does not lift an earlier one. On a database server the
        limit also ends a wait for the server itself (a frozen or unreachable
        one): a read then fails with a retryable ``StoreError``, a write with
        ``StoreOutcomeUnknown`` (its COMMIT may have been sent).
        """

    # -- authority -------------------------------------------------------------------

    @abstractmethod
    def bind_authority(self) -> ScopeMint:
        """Hand the scope-signing capability to the one AuthorityResolver of this open."""

    @abstractmethod
    def verify_scope(self, scope: object) -> PrincipalScope:
        """Return ``scope`` if this open issued it and it is still live; else ``ScopeError``."""

    # -- durable ownership facts (grant nothing; used by the AuthorityResolver) --------

    @abstractmethod
    async def bind_conversation(
        self,
        *,
        channel: str,
        conversation_key: str,
        principal_id: str,
        owner_kind: OwnerKind = "conversation",
        select: ConversationSelect = "bound",
    ) -> tuple[str, bool]:
        """Atomically resolve, create or switch a conversation's session: (id, created)."""

    @abstractmethod
    async def create_session(
        self,
        *,
        owner_kind: OwnerKind,
        principal_id: str,
        parent_session_id: str | None = None,
        parent_turn_id: str | None = None,
        title: str | None = None,
    ) -> str:
        """Create an unbound session with its owner row (children, scheduled runs)."""

    @abstractmethod
    async def owner_facts(self, session_id: str) -> OwnerFacts | None:
        """The durable owner row of a session, or None."""

    @abstractmethod
    async def audit(self, kind: str, **fields: Any) -> int:
        """Append a Host-only audit row; returns its id."""

    @abstractmethod
    async def read_audit(
        self,
        scope: PrincipalScope,
        *,
        kind: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> tuple[AuditRecord, ...]:
        """Host-only audit rows, in order; requires a live operator scope.

        ``after_id`` is an integer from 0 to 2**63 - 1 and ``kind`` text;
        anything else is an ``InvalidValue`` on every adapter.
        """

    @abstractmethod
    async def erase_session(
        self, scope: PrincipalScope, session_id: str, reason: str
    ) -> ErasedSession:
        """Erase a session's content in one transaction, keeping id-only tombstones.

        Messages, turn results and event details, context decisions, summary and
        bootstrap snapshot, session-scoped core state, outbox and inbound payloads,
        approvals' arguments and views (open ones become ``stale``), its
        references to attachments (the bytes go when no other session references
        them and no upload of them waits for its turn): deleted or emptied. The session, its
        owner rows, the turns' ids and statuses stay. Writes one ``session.erased``
        audit row (scope, reason, counts; never content). ``ScopeError`` without a
        live operator scope; ``InvalidValue`` for a missing or too long reason;
        ``NotFoundOrUnauthorized`` for an unknown session; ``TurnInProgress`` while
        a turn of the session runs (erase after it ended, or cancel it).
        """

    # -- owned queries ---------------------------------------------------------------

    @abstractmethod
    async def get_session(self, scope: PrincipalScope, session_id: str) -> SessionRecord:
        """One owned session, or ``NotFoundOrUnauthorized``."""

    @abstractmethod
    async def list_sessions(
        self, scope: PrincipalScope, *, cursor: str | None = None, limit: int = 50
    ) -> Page[SessionRecord]:
        """The scope's sessions, newest first, keyset-paginated."""

    @abstractmethod
    async def list_messages(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        after_seq: int = 0,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page[MessageRecord]:
        """An owned session's messages in order, after ``after_seq`` (or ``cursor``).

        ``after_seq`` is an integer from 0 to 2**63 - 1 (else ``InvalidValue``).
        """

    @abstractmethod
    async def append_message(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        role: str,
        content: Mapping[str, Any],
        turn_id: str | None = None,
    ) -> MessageRecord:
        """Append to an owned session's transcript (owner predicate inside the INSERT)."""

    @abstractmethod
    async def get_task(self, scope: PrincipalScope, task_id: str) -> TaskRecord:
        """One owned task, or ``NotFoundOrUnauthorized``."""

    @abstractmethod
    async def list_tasks(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page[TaskRecord]:
        """The scope's tasks (optionally of one session), newest first."""

    @abstractmethod
    async def create_task(
        self,
        scope: PrincipalScope,
        session_id: str,
        *,
        kind: str,
        detail: Mapping[str, Any] | None = None,
    ) -> TaskRecord:
        """Create a pending task in an owned session."""

    @abstractmethod
    async def query_legacy_for_repair(
        self,
        scope: PrincipalScope,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
        reason: str,
    ) -> LegacyRepairView:
        """The only path to rows with missing or ambiguous ownership (operator, audited)."""


async def _connect_postgres(url: str, **options: Any) -> RuntimeStore:
    """Check the extra and import the adapter off the event loop, then connect."""
    await anyio.to_thread.run_sync(
        functools.partial(require_extra, "postgres", feature="a PostgreSQL store", key="store.url")
    )
    module = await anyio.to_thread.run_sync(importlib.import_module, "hostkit.store._pg")
    store: RuntimeStore = await module.PgStore.connect(url, **options)
    return store
