"""Approval decisions and the session approval cache.

The cache key is the contract's ``(principal_id, session_id, policy_fingerprint,
rule_key)``; the fingerprint covers core revision, capability snapshot,
effective policy and the effect entry, so any change to those is a different
key. Entries expire after a bounded TTL and are dropped on session end or
replacement, authority or binding change, policy or revision change, explicit
revocation and Host shutdown. Decisions for one key are single-flight: one
prompt however many callers wait, and a cancelled waiter leaves the queue.

With an ``AskRecord`` an approval is durable from the moment it is asked:
the record is written before any provider sees the request, an inline answer
is recorded on it with one conditional write (an answer given meanwhile from
another process wins, and the prompt is withdrawn), and a prompt whose
record stops being pending is withdrawn too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Literal, Protocol

import anyio

from hostkit._boot_clock import boot_clock
from hostkit._cancellation import is_cancellation
from hostkit.effects._diff import bounded_view
from hostkit.errors import (
    ApprovalClosed,
    HostkitError,
    InvalidValue,
    RuntimeFailure,
    type_name,
)
from hostkit.freeze import FrozenMap
from hostkit.store import ApprovalDecision, ApprovalRevocation, ApprovalStatus, RevocationPage
from hostkit.types import is_seconds

__all__ = [
    "APPROVAL_TTL_S",
    "ApprovalDecision",
    "ApprovalKey",
    "ApprovalOutcome",
    "ApprovalProvider",
    "ApprovalRequest",
    "ApprovalRuntime",
    "AskRecord",
    "RevocationFeed",
]

APPROVAL_TTL_S = 8 * 3600.0
# Conversations whose binding is tracked, and cached approvals before expired ones are swept.
MAX_TRACKED = 10_000

ApprovalOutcome = Literal["approved", "denied", "unanswered", "void"]


@dataclass(frozen=True, slots=True)
class ApprovalKey:
    """The identity a session approval is cached under."""

    principal_id: str
    session_id: str
    policy_fingerprint: str
    rule_key: str
    core_id: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approver is shown: the effect and a bounded, field-name-redacted view.

    Never the PrincipalScope, the capability snapshot or raw secret values.
    ``view`` is for display; ``secret_names`` is the typed fact of which Host
    secrets (names only) the call binds — such a call is approved once, never
    cached for the session. ``warning`` is the tool's own warning to every
    approver (for example, that the program would run unsandboxed).
    ``expires_at`` is the wall-clock time (``time.time()``) the runtime stops
    waiting for this prompt, set when it asks (a panel counts down to it);
    the durable approval stays pending after it.
    A view's ``diff`` (a file overwrite's unified diff) keeps up to
    ``MAX_DIFF_CHARS`` characters; every other string is bounded as metadata.
    """

    approval_id: str
    key: ApprovalKey
    effect: str
    turn_id: str
    view: Mapping[str, Any] = field(default_factory=FrozenMap)
    secret_names: tuple[str, ...] = ()
    warning: str | None = None
    expires_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "view", bounded_view(self.view))
        names: object = self.secret_names  # typed, but callers may still pass one string
        if isinstance(names, str):
            raise InvalidValue("secret_names is a sequence of names, not one string")
        object.__setattr__(self, "secret_names", tuple(str(n) for n in self.secret_names))

    @property
    def binds_secret(self) -> bool:
        """True when running the call binds at least one Host secret."""
        return bool(self.secret_names)


class ApprovalProvider(Protocol):
    """Whoever answers approvals (console, widget, channel, policy script).

    ``decide`` may take as long as a person needs; the runtime bounds the wait.
    """

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision: ...


class AskRecord(Protocol):
    """The durable record of one ask, written and read around the provider.

    ``asked`` writes the pending row before any provider is asked and returns
    False when the row was stored void (its conversation already moved to
    another session): then nobody is asked;
    ``answered`` records an inline answer with one conditional write and
    returns False when the row was no longer pending (answered from another
    process, or void), so the local answer lost; ``status`` reads the row's
    status (a prompt whose row is no longer ``pending`` is withdrawn, told how
    it ended; None when it cannot be read, which withdraws nothing).
    """

    async def asked(self) -> bool: ...

    async def answered(self, decision: ApprovalDecision) -> bool: ...

    async def status(self) -> ApprovalStatus | None: ...


class RevocationFeed(Protocol):
    """Where ends of session approvals recorded by any Host process are read
    (``ApprovalStore.revocations_after``)."""

    async def revocations_after(self, cursor: int | None) -> RevocationPage: ...


def withdraw(provider: ApprovalProvider, request: ApprovalRequest, reason: str) -> None:
    """Tell a provider that offers ``withdrawn(request, reason)`` why its prompt went away.

    Optional for providers: a notebook panel uses it to mark itself stale
    instead of leaving buttons that do nothing.
    """
    told = getattr(provider, "withdrawn", None)
    if callable(told):
        with contextlib.suppress(Exception):
            told(request, reason)


def still_pending(approval_id: str, why: str) -> str:
    """What a withdrawn prompt says when its durable approval can still be answered."""
    return (
        f"{why}; the approval is still pending: answer it with host.approvals "
        f"or `hostkit approvals approve {approval_id}`"
    )


CLOSED = "this Host was closed"
TIMED_OUT = "no answer in time"
# Where a person reads how an approval that is no longer pending ended.
LOOK = "`hostkit approvals list --all` shows it"
ANSWERED_ELSEWHERE = f"answered elsewhere first: this prompt's answer was not used; {LOOK}"
GONE = "no longer pending (answered elsewhere, or void)"
# A stop recorded while the prompt waited voided its approval (``superseded``) first.
VOIDED = "stopped: the approval is void, the call never ran"
# How a row that stopped being pending ended, as a withdrawn prompt says it.
_ENDED: dict[str, str] = {
    "approved": "approved elsewhere",
    "executed": "approved elsewhere and run",
    "denied": "denied elsewhere",
    "stale": "void: the policy, revision or binding changed",
    "superseded": "void: the turn stopped, or a newer turn ran in the session",
    "indeterminate": "void: its call may have run and never runs again",
}
# What a cancelled prompt's record can say: it was voided by the stop itself.
_VOID = frozenset({"superseded", "stale", "indeterminate"})
# How long a cancelled prompt reads its record to learn whether the stop voided it.
_VOIDED_READ_S = 2.0


def gone(status: str | None) -> str:
    """What a withdrawn prompt says when its durable row stopped being pending: how it
    ended, when known, and where to look."""
    ended = _ENDED.get(status or "")
    return f"{GONE}: {ended}; {LOOK}" if ended else f"{GONE}; {LOOK}"


def _ends(revocation: ApprovalRevocation, key: ApprovalKey) -> bool:
    """True when ``revocation`` ends the answers cached under ``key``."""
    return (
        (revocation.session_id is None or revocation.session_id == key.session_id)
        and (revocation.principal_id is None or revocation.principal_id == key.principal_id)
        and (revocation.core_id is None or revocation.core_id == key.core_id)
    )


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    waiters: int = 0


class ApprovalRuntime:
    """Resolves ``ask`` effects through an ApprovalProvider with a bounded session cache.

    One per Host, shared by its config generations (the key's fingerprint
    already separates revisions). ``provider`` is whoever answers now: the
    console, a notebook widget, a script, or None (every ``ask`` then pauses
    its turn ``needs_user``); it can be replaced at any time.

    With ``revocations`` (the Host passes its store), ends recorded by any
    Host process reach this one: they are read before a cached answer is
    used and before one is kept, and a read that fails uses no cached answer.
    """

    def __init__(
        self,
        *,
        provider: ApprovalProvider | None = None,
        ttl_s: float = APPROVAL_TTL_S,
        decision_timeout_s: float = 300.0,
        clock: Callable[[], float] = boot_clock,
        watch_interval_s: float = 1.0,
        revocations: RevocationFeed | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # A NaN or infinite ttl would keep an "approve for the session" answer for ever.
        for name, seconds in (
            ("ttl_s", ttl_s),
            ("decision_timeout_s", decision_timeout_s),
            ("watch_interval_s", watch_interval_s),
        ):
            if not is_seconds(seconds):
                raise InvalidValue(f"ApprovalRuntime {name} must be a positive, finite number")
        self.provider = provider
        # ``ApprovalRequest.expires_at`` is wall-clock time: a person reads it as a countdown.
        self._wall_clock = wall_clock
        self._watch_interval_s = watch_interval_s
        self._ttl_s = ttl_s
        self._decision_timeout_s = decision_timeout_s
        # The cache's TTL counts time the machine slept (``boot_clock``): "approve for the
        # session" lasts ``ttl_s`` of real time, not of time the machine was awake.
        self._clock = clock
        self._cache: dict[ApprovalKey, float] = {}
        self._pending: dict[ApprovalKey, _Pending] = {}
        # Last session seen per conversation, for rebinding; bounded (oldest forgotten).
        self._bindings: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        # Prompts in progress: their scope, and who was asked what (to withdraw on close).
        self._asking: dict[anyio.CancelScope, tuple[ApprovalProvider, ApprovalRequest, bool]] = {}
        # Bumped by every invalidation: an answer given across one is not cached.
        self._epoch = 0
        # Ends recorded by every Host process, read up to ``_seen`` before a cached
        # answer is used or one is kept (None: not read yet).
        self._revocations = revocations
        self._seen: int | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def observe_binding(self, principal_id: str, conversation: str, session_id: str) -> None:
        """A turn runs in ``session_id`` for this conversation: a new session replaces the old.

        Starting a replacement session, or resuming another one, is a
        conversation-binding change: the previous session's approvals go.
        """
        self._rebind(("principal", principal_id, conversation), session_id)

    def observe_conversation(self, channel: str, conversation_key: str, session_id: str) -> None:
        """The conversation is bound to ``session_id`` now (told by the AuthorityResolver).

        Whoever moved it, and whether a turn runs there or not, a change ends
        the previous session's approvals for every principal.
        """
        self._rebind(("conversation", channel, conversation_key), session_id)

    def _rebind(self, tracked: tuple[str, str, str], session_id: str) -> None:
        previous = self._bindings.pop(tracked, None)
        self._bindings[tracked] = session_id
        if len(self._bindings) > MAX_TRACKED:
            self._bindings.popitem(last=False)
        if previous is not None and previous != session_id:
            self.invalidate(session_id=previous)

    async def refresh(self) -> int | None:
        """Apply the ends of session approvals recorded by every Host process since the
        last read; returns the mark ``remember`` takes (None when they could not be read).

        Take it before a durable answer is recorded: ``remember`` then keeps
        the answer only if nothing ended answers between the mark and itself.
        """
        return self._epoch if await self._caught_up() else None

    async def remember(self, key: ApprovalKey, *, since: int | None) -> None:
        """Cache an "approve for session" given outside a prompt (a durable answer).

        ``since`` is the mark ``refresh`` returned before the answer was
        recorded. Not cached when the ends could not be read then or now, when
        anything ended answers in this Host since the mark (another task may
        have read an end of this one), or when an end of it was recorded since.
        """
        if since is None or since != self._epoch or self._closed:
            return
        if await self._caught_up(key) and not self._closed:
            self._store(key)

    async def _caught_up(self, key: ApprovalKey | None = None) -> bool:
        """Apply the ends recorded by every Host process since the last read.

        False when they could not be read (no cached answer is used or kept
        then: the call is asked, since one may have been revoked), or when one
        of them ends ``key``'s answers.
        """
        if self._revocations is None:
            return True
        try:
            page = await self._revocations.revocations_after(self._seen)
        except Exception:  # whatever failed, an unread end must never approve a call
            return False
        ends_key = page.overflow
        if page.overflow:
            self._epoch += 1
            self._cache.clear()
        for revocation in page.revocations:
            self._revoked(revocation)
            ends_key = ends_key or (key is not None and _ends(revocation, key))
        # Two reads may finish out of order: the cursor never moves back.
        self._seen = page.cursor if self._seen is None else max(self._seen, page.cursor)
        return not ends_key

    def _revoked(self, revocation: ApprovalRevocation) -> None:
        if revocation.session_id is not None:
            self.invalidate(session_id=revocation.session_id, principal_id=revocation.principal_id)
        elif revocation.core_id is not None:
            self.invalidate(core_id=revocation.core_id)

    def _store(self, key: ApprovalKey) -> None:
        now = self._clock()
        self._cache.pop(key, None)  # re-inserted last: the cache is in expiry order
        if len(self._cache) >= MAX_TRACKED:
            # Expired entries are otherwise dropped only when their key is looked up.
            for stale in [k for k, expires in self._cache.items() if expires <= now]:
                del self._cache[stale]
            # Still full of live answers: the oldest tenth are forgotten (their calls are
            # asked again), so the cache stays bounded and a full one is not rescanned
            # on every answer.
            if len(self._cache) >= MAX_TRACKED:
                for oldest in list(islice(self._cache, MAX_TRACKED // 10)):
                    del self._cache[oldest]
        self._cache[key] = now + self._ttl_s

    def cached(self, key: ApprovalKey) -> bool:
        """True while a session approval for ``key`` is live (expired entries are dropped)."""
        expires = self._cache.get(key)
        if expires is None:
            return False
        if self._clock() >= expires:
            del self._cache[key]
            return False
        return True

    async def resolve(
        self,
        key: ApprovalKey,
        request: Callable[[], ApprovalRequest],
        provider: ApprovalProvider | None,
        *,
        cacheable: bool = True,
        record: AskRecord | None = None,
    ) -> ApprovalOutcome:
        """``approved``, ``denied``, ``unanswered`` (no provider, no answer in time, or
        answered from another process first) or ``void`` (the ``record`` was stored
        void: its conversation had moved to another session, and nobody was asked).

        Callers for the same key are serialized: each later caller rechecks the
        cache when the earlier decision lands, so "approve for session" is
        asked once. ``unanswered`` is never a silent deny: the caller pauses the
        turn (``needs_user``) with a durable pending approval. ``cacheable=False``
        (secret bindings) ignores and never writes the session cache: every
        such call is approved once. ``record`` makes the ask durable before the
        provider is asked (see ``AskRecord``).
        """
        while True:
            if self._closed:
                raise ApprovalClosed()
            if cacheable and self.cached(key) and await self._caught_up() and self.cached(key):
                return "approved"
            pending = self._pending.get(key)
            if pending is None:
                break
            pending.waiters += 1
            try:
                await pending.done.wait()
            finally:
                pending.waiters -= 1
        pending = self._pending[key] = _Pending()
        try:
            return await self._ask(key, request(), provider, cacheable=cacheable, record=record)
        finally:
            del self._pending[key]
            pending.done.set()

    async def _ask(
        self,
        key: ApprovalKey,
        request: ApprovalRequest,
        provider: ApprovalProvider | None,
        *,
        cacheable: bool,
        record: AskRecord | None,
    ) -> ApprovalOutcome:
        if record is not None and not await record.asked():  # durable before anyone is asked
            return "void"  # stored void (its conversation moved on): nobody can answer it
        if provider is None:
            return "unanswered"
        request = dataclasses.replace(
            request, expires_at=self._wall_clock() + self._decision_timeout_s
        )
        decision: ApprovalDecision | None = None
        # Read before the person is asked: the read after the answer then sees only
        # the ends recorded while they decided (unread, the answer is not kept).
        fed = cacheable and await self._caught_up()
        epoch = self._epoch
        with anyio.move_on_after(self._decision_timeout_s) as asking:
            self._asking[asking] = (provider, request, record is not None)
            try:
                decision = await self._decide(provider, request, record)
            except BaseException as exc:
                if record is not None and is_cancellation(exc) and not self._closed:
                    await self._voided(provider, request, record)
                raise
            finally:
                self._asking.pop(asking, None)
        if self._closed:
            raise ApprovalClosed()
        if decision is None:
            if record is not None and asking.cancelled_caught:
                withdraw(provider, request, still_pending(request.approval_id, TIMED_OUT))
            return "unanswered"
        if record is not None and not await record.answered(decision):
            withdraw(provider, request, ANSWERED_ELSEWHERE)
            return "unanswered"
        if (
            decision == "approve_session"
            and fed
            and epoch == self._epoch
            and await self._caught_up(key)
            and not self._closed
        ):
            self._store(key)
        return "denied" if decision == "deny" else "approved"

    async def _decide(
        self, provider: ApprovalProvider, request: ApprovalRequest, record: AskRecord | None
    ) -> ApprovalDecision | None:
        """The provider's answer; None when the durable record stopped being pending first.

        An ``Exception`` the provider raised (not a ``HostkitError``) is a
        ``RuntimeFailure`` naming the provider and the exception's type: the turn's
        record says it was the approver, and nothing runs.
        """
        if record is None:
            try:
                return await provider.decide(request)
            except HostkitError:
                raise
            except Exception as exc:
                raise _provider_failed(provider, exc) from exc
        decision: ApprovalDecision | None = None
        failed: BaseException | None = None
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                # A poll, not an event: the answer may come from another process.
                while (status := await record.status()) in (None, "pending"):  # noqa: ASYNC110
                    await anyio.sleep(self._watch_interval_s)
                # Told before the prompt is cancelled, so it can say why (it is not pending).
                withdraw(provider, request, gone(status))
                group.cancel_scope.cancel()

            group.start_soon(watch)
            try:
                decision = await provider.decide(request)
            except BaseException as exc:
                # Raised as it is below, not inside an ExceptionGroup that hides its type
                # (a BaseException too); real cancellation goes on as itself.
                if is_cancellation(exc):
                    raise
                failed = exc
            group.cancel_scope.cancel()
        if isinstance(failed, Exception) and not isinstance(failed, HostkitError):
            raise _provider_failed(provider, failed) from failed
        if failed is not None:
            raise failed
        return decision

    async def _voided(
        self, provider: ApprovalProvider, request: ApprovalRequest, record: AskRecord
    ) -> None:
        """A prompt cancelled by a stop: the stop voided its approval before it cancelled
        the turn (``request_cancel``), and the prompt must not offer it as pending.

        Read shielded and bounded; an unreadable record tells nothing.
        """
        status: ApprovalStatus | None = None
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_VOIDED_READ_S),
            contextlib.suppress(Exception),
        ):
            status = await record.status()
        if status in _VOID:
            withdraw(provider, request, VOIDED)

    def waiting(self, key: ApprovalKey) -> int:
        """How many callers wait on the decision for ``key`` (cancelled ones are removed)."""
        pending = self._pending.get(key)
        return 0 if pending is None else pending.waiters

    def invalidate(
        self,
        *,
        session_id: str | None = None,
        principal_id: str | None = None,
        policy_fingerprint: str | None = None,
        core_id: str | None = None,
        key: ApprovalKey | None = None,
    ) -> int:
        """Drop cached approvals matching every given field; returns how many were dropped.

        Call with ``session_id`` on session end or replacement, ``principal_id``
        on an authority or conversation-binding change, ``policy_fingerprint``
        or ``core_id`` when policy or core revision changes, ``key`` for an
        explicit revocation.
        """
        self._epoch += 1
        if key is not None:
            return 1 if self._cache.pop(key, None) is not None else 0
        fields = (session_id, principal_id, policy_fingerprint, core_id)
        if all(value is None for value in fields):
            raise InvalidValue("say what to invalidate (session, principal, policy, core or key)")
        doomed = [
            cached
            for cached in self._cache
            if (session_id is None or cached.session_id == session_id)
            and (principal_id is None or cached.principal_id == principal_id)
            and (policy_fingerprint is None or cached.policy_fingerprint == policy_fingerprint)
            and (core_id is None or cached.core_id == core_id)
        ]
        for cached in doomed:
            del self._cache[cached]
        return len(doomed)

    def close(self) -> None:
        """Host shutdown: forget every approval and reject every pending decision."""
        self._closed = True
        self._cache.clear()
        for asking, (provider, request, durable) in self._asking.items():
            why = still_pending(request.approval_id, CLOSED) if durable else CLOSED
            withdraw(provider, request, why)
            asking.cancel()
        for pending in self._pending.values():
            pending.done.set()


def _provider_failed(provider: object, exc: BaseException) -> RuntimeFailure:
    """What an approval provider that raised ends its call's turn with: only the types (its
    own message may quote what it was shown)."""
    return RuntimeFailure(
        f"the approval provider {type_name(provider)} raised {type_name(exc)}; the call did not run"
    )
