"""ApprovalRuntime: cache key, TTL, invalidation, one prompt per identity, waiters, shutdown."""

from __future__ import annotations

import time

import anyio
import pytest

from hostkit.effects import (
    APPROVAL_TTL_S,
    ApprovalDecision,
    ApprovalKey,
    ApprovalRequest,
    ApprovalRuntime,
)
from hostkit.errors import ApprovalClosed, InvalidValue, StoreError
from hostkit.store import ApprovalRevocation, RevocationPage

pytestmark = pytest.mark.anyio

KEY = ApprovalKey("webhook:alice", "ses_1", "fp_1", "files.write")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Approver:
    """Answers with a fixed decision, optionally after a gate opens; counts prompts."""

    def __init__(self, decision: ApprovalDecision, gate: anyio.Event | None = None) -> None:
        self.decision = decision
        self.gate = gate
        self.prompts: list[ApprovalRequest] = []
        self.asked = anyio.Event()

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.prompts.append(request)
        self.asked.set()
        if self.gate is not None:
            await self.gate.wait()
        return self.decision


def make_request(key: ApprovalKey = KEY) -> ApprovalRequest:
    return ApprovalRequest(
        "apr_1", key, "files.write", "turn_1", {"path": "notes.md", "api_key": "sk-secret"}
    )


async def test_session_approval_is_cached_until_the_ttl() -> None:
    clock = Clock()
    runtime = ApprovalRuntime(clock=clock)
    approver = Approver("approve_session")
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert len(approver.prompts) == 1
    clock.now += APPROVAL_TTL_S - 1
    assert runtime.cached(KEY)
    clock.now += 2
    assert not runtime.cached(KEY)
    await runtime.resolve(KEY, make_request, approver)
    assert len(approver.prompts) == 2


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="no CLOCK_BOOTTIME here")
async def test_session_approval_ttl_counts_time_the_machine_slept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default clock: a laptop that slept 14 hours asks again. A suspend stops
    ``CLOCK_MONOTONIC`` (time.monotonic), never ``CLOCK_BOOTTIME``, which the TTL counts."""
    slept = [0.0]
    gettime = time.clock_gettime

    def suspended(clock: int) -> float:
        return gettime(clock) + (slept[0] if clock == time.CLOCK_BOOTTIME else 0.0)

    monkeypatch.setattr(time, "clock_gettime", suspended)
    runtime = ApprovalRuntime()
    approver = Approver("approve_session")
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert runtime.cached(KEY)
    slept[0] = 14 * 3600.0  # the machine sleeps; time.monotonic does not move
    assert not runtime.cached(KEY)
    await runtime.resolve(KEY, make_request, approver)
    assert len(approver.prompts) == 2


async def test_approve_once_and_deny_are_not_cached() -> None:
    runtime = ApprovalRuntime()
    once, deny = Approver("approve_once"), Approver("deny")
    assert await runtime.resolve(KEY, make_request, once) == "approved"
    assert not runtime.cached(KEY)
    assert await runtime.resolve(KEY, make_request, deny) == "denied"
    assert not runtime.cached(KEY)


@pytest.mark.parametrize(
    "other",
    [
        ApprovalKey("webhook:bob", "ses_1", "fp_1", "files.write"),
        ApprovalKey("webhook:alice", "ses_2", "fp_1", "files.write"),
        ApprovalKey("webhook:alice", "ses_1", "fp_2", "files.write"),
        ApprovalKey("webhook:alice", "ses_1", "fp_1", "terminal.run"),
    ],
    ids=["principal", "session", "policy fingerprint", "rule"],
)
async def test_every_key_field_separates_approvals(other: ApprovalKey) -> None:
    runtime = ApprovalRuntime()
    await runtime.resolve(KEY, make_request, Approver("approve_session"))
    assert runtime.cached(KEY)
    assert not runtime.cached(other)


@pytest.mark.parametrize(
    "invalidation",
    [
        {"session_id": "ses_1"},
        {"principal_id": "webhook:alice"},
        {"policy_fingerprint": "fp_1"},
        {"key": KEY},
    ],
    ids=["session end", "authority change", "policy or revision change", "revocation"],
)
async def test_each_invalidation_drops_the_approval(invalidation: dict) -> None:
    runtime = ApprovalRuntime()
    unrelated = ApprovalKey("webhook:zed", "ses_9", "fp_9", "files.write")
    await runtime.resolve(KEY, make_request, Approver("approve_session"))
    await runtime.resolve(unrelated, lambda: make_request(unrelated), Approver("approve_session"))
    assert runtime.invalidate(**invalidation) == 1
    assert not runtime.cached(KEY)
    assert runtime.cached(unrelated)


async def test_invalidate_needs_a_target() -> None:
    with pytest.raises(InvalidValue):
        ApprovalRuntime().invalidate()


async def test_concurrent_callers_get_one_prompt() -> None:
    gate = anyio.Event()
    approver = Approver("approve_session", gate)
    runtime = ApprovalRuntime()
    outcomes: list[str] = []

    async def caller() -> None:
        outcomes.append(await runtime.resolve(KEY, make_request, approver))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(caller)
        while runtime.waiting(KEY) < 4:
            await anyio.lowlevel.checkpoint()
        gate.set()
    assert outcomes == ["approved"] * 5
    assert len(approver.prompts) == 1


async def test_cancelled_waiters_are_removed() -> None:
    gate = anyio.Event()
    runtime = ApprovalRuntime()
    first = Approver("approve_session", gate)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runtime.resolve, KEY, make_request, first)
        await first.asked.wait()
        with anyio.CancelScope() as waiter:
            tg.start_soon(_cancel_when_waiting, runtime, waiter)
            await runtime.resolve(KEY, make_request, Approver("deny"))
        assert runtime.waiting(KEY) == 0
        gate.set()
    assert runtime.cached(KEY)


async def _cancel_when_waiting(runtime: ApprovalRuntime, scope: anyio.CancelScope) -> None:
    while runtime.waiting(KEY) < 1:
        await anyio.lowlevel.checkpoint()
    scope.cancel()


async def test_no_provider_or_no_answer_in_time_is_unanswered_not_denied() -> None:
    runtime = ApprovalRuntime(decision_timeout_s=0.05)
    assert await runtime.resolve(KEY, make_request, None) == "unanswered"
    assert await runtime.resolve(KEY, make_request, Approver("approve_once", anyio.Event())) == (
        "unanswered"
    )


async def test_shutdown_clears_the_cache_and_rejects_pending_decisions() -> None:
    gate = anyio.Event()
    runtime = ApprovalRuntime()
    await runtime.resolve(KEY, make_request, Approver("approve_session"))
    other = ApprovalKey("webhook:bob", "ses_2", "fp_1", "files.write")
    failures: list[BaseException] = []

    async def pending() -> None:
        try:
            await runtime.resolve(
                other, lambda: make_request(other), Approver("approve_once", gate)
            )
        except ApprovalClosed as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pending)
        await anyio.lowlevel.checkpoint()
        runtime.close()
        gate.set()
    assert not runtime.cached(KEY)
    assert len(failures) == 1
    with pytest.raises(ApprovalClosed):
        await runtime.resolve(KEY, make_request, Approver("approve_session"))


def test_the_approver_sees_a_bounded_redacted_view() -> None:
    request = make_request()
    assert request.view["api_key"] == "[redacted]"
    assert request.view["path"] == "notes.md"


async def test_expired_approvals_are_swept_when_the_cache_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hostkit.effects import _approvals

    monkeypatch.setattr(_approvals, "MAX_TRACKED", 3)
    clock = Clock()
    runtime = ApprovalRuntime(clock=clock)
    keys = [ApprovalKey("p", f"ses_{i}", "fp", "files.write") for i in range(3)]
    for key in keys:
        await runtime.remember(key, since=await runtime.refresh())
    clock.now += APPROVAL_TTL_S + 1
    fresh = ApprovalKey("p", "ses_new", "fp", "files.write")
    await runtime.remember(fresh, since=await runtime.refresh())
    assert len(runtime._cache) == 1
    assert runtime.cached(fresh)


async def test_a_cache_full_of_live_approvals_forgets_the_oldest_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It used to insert past its cap (and rescan the whole cache on every answer) while
    # every entry was still live: a long-running Host grew with each session's approvals.
    from hostkit.effects import _approvals

    monkeypatch.setattr(_approvals, "MAX_TRACKED", 20)
    runtime = ApprovalRuntime(clock=Clock())
    keys = [ApprovalKey("p", f"ses_{i}", "fp", "files.write") for i in range(100)]
    for key in keys:
        await runtime.remember(key, since=await runtime.refresh())
        assert len(runtime._cache) <= 20
    assert all(runtime.cached(key) for key in keys[-10:])
    assert not runtime.cached(keys[0])  # forgotten: that session is asked again
    # Answered again: kept as the newest.
    await runtime.remember(keys[-20], since=await runtime.refresh())
    assert list(runtime._cache)[-1] == keys[-20]


@pytest.mark.parametrize("where", ["this Host", "another process"])
async def test_an_end_while_a_person_decides_keeps_the_answer_out_of_the_cache(where: str) -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    gate = anyio.Event()
    approver = Approver("approve_session", gate)
    async with anyio.create_task_group() as group:
        outcome: list[str] = []

        async def ask() -> None:
            outcome.append(await runtime.resolve(KEY, make_request, approver))

        group.start_soon(ask)
        await approver.asked.wait()
        if where == "this Host":
            runtime.invalidate(session_id=KEY.session_id)  # e.g. the session was replaced
        else:
            feed.end(session_id=KEY.session_id)  # recorded in the store by another process
        gate.set()
    assert outcome == ["approved"]  # this call was answered...
    assert not runtime.cached(KEY)  # ...but the session approval does not outlive the change


# -- ends recorded by other Host processes (the store's revocation feed) ----------------


class Feed:
    """A test adapter of the store's revocation rows: appended here as another process
    would, read by cursor as ``ApprovalStore.revocations_after`` does."""

    def __init__(self) -> None:
        self.rows: list[ApprovalRevocation] = []
        self.reads = 0
        self.failing = False
        self.overflow = False

    def end(
        self,
        *,
        session_id: str | None = None,
        principal_id: str | None = None,
        core_id: str | None = None,
    ) -> None:
        self.rows.append(
            ApprovalRevocation(
                len(self.rows) + 1, session_id, principal_id, core_id, "ops", "revoked", 0.0
            )
        )

    async def revocations_after(self, cursor: int | None) -> RevocationPage:
        self.reads += 1
        if self.failing:
            raise StoreError("the database is unavailable")
        if cursor is None:
            return RevocationPage(len(self.rows), ())
        if self.overflow:
            return RevocationPage(len(self.rows), (), overflow=True)
        return RevocationPage(len(self.rows), tuple(self.rows[cursor:]))


async def test_an_end_recorded_elsewhere_is_applied_before_a_cached_answer_is_used() -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    approver = Approver("approve_session")
    other = ApprovalKey("webhook:bob", "ses_2", "fp_1", "files.write")
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert await runtime.resolve(other, lambda: make_request(other), approver) == "approved"
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert len(approver.prompts) == 2  # both cached
    feed.end(session_id=KEY.session_id, principal_id=KEY.principal_id)
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert len(approver.prompts) == 3  # asked again: another process ended it
    assert await runtime.resolve(other, lambda: make_request(other), approver) == "approved"
    assert len(approver.prompts) == 3  # another session's answer stays


async def test_a_core_end_recorded_elsewhere_drops_every_answer_for_the_core() -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    notes = ApprovalKey("p", "ses_1", "fp", "files.write", core_id="notes")
    other = ApprovalKey("p", "ses_1", "fp", "files.write", core_id="other")
    approver = Approver("approve_session")
    for key in (notes, other):
        assert await runtime.resolve(key, lambda k=key: make_request(k), approver) == "approved"
    feed.end(core_id="notes")
    for key in (notes, other):
        assert await runtime.resolve(key, lambda k=key: make_request(k), approver) == "approved"
    assert [p.key for p in approver.prompts] == [notes, other, notes]


async def test_no_cached_answer_is_used_or_kept_while_the_ends_cannot_be_read() -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    approver = Approver("approve_session")
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    feed.failing = True
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert len(approver.prompts) == 2  # asked: it may have been revoked
    feed.failing = False
    # A durable answer: kept once the ends can be read.
    await runtime.remember(KEY, since=await runtime.refresh())
    assert runtime.cached(KEY)
    feed.failing = True
    runtime.invalidate(key=KEY)
    await runtime.remember(KEY, since=await runtime.refresh())
    assert not runtime.cached(KEY)


async def test_ends_recorded_before_an_answer_or_for_others_do_not_void_it() -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    await runtime.refresh()
    feed.end(session_id=KEY.session_id)  # before the answer below
    assert await runtime.refresh()
    gate = anyio.Event()
    approver = Approver("approve_session", gate)
    async with anyio.create_task_group() as group:
        group.start_soon(runtime.resolve, KEY, make_request, approver)
        await approver.asked.wait()
        feed.end(session_id="ses_other")  # while asked: another session
        feed.end(core_id="another_core")
        gate.set()
    assert runtime.cached(KEY)
    mark = await runtime.refresh()  # a durable answer: marked, recorded, then ended
    feed.end(session_id=KEY.session_id)
    await runtime.remember(KEY, since=mark)
    assert not runtime.cached(KEY)


async def test_a_reader_too_far_behind_forgets_every_cached_answer() -> None:
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    approver = Approver("approve_session")
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    feed.overflow = True
    assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert len(approver.prompts) == 2


async def test_the_ends_are_read_only_when_a_cached_answer_would_be_used() -> None:
    # The turn's hot path pays nothing: a call that needs no approval never reaches the
    # runtime, and one with no cached answer reads the ends once, before its prompt.
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    approver = Approver("approve_once")
    for _ in range(3):
        assert await runtime.resolve(KEY, make_request, approver) == "approved"
    assert feed.reads == 3


async def test_an_answer_is_not_kept_when_the_ends_could_not_be_read_before_the_prompt() -> None:
    feed = Feed()
    feed.failing = True
    runtime = ApprovalRuntime(revocations=feed)
    gate = anyio.Event()
    approver = Approver("approve_session", gate)
    async with anyio.create_task_group() as group:
        group.start_soon(runtime.resolve, KEY, make_request, approver)
        await approver.asked.wait()
        feed.failing = False  # readable again when the answer comes: still not kept
        gate.set()
    assert not runtime.cached(KEY)


async def test_an_end_another_task_read_between_the_mark_and_remember_still_counts() -> None:
    # Another call's cached check (or a revoke's own refresh) may read the end first: the
    # durable answer recorded before it is still not kept.
    feed = Feed()
    runtime = ApprovalRuntime(revocations=feed)
    mark = await runtime.refresh()
    feed.end(session_id=KEY.session_id)
    assert await runtime.refresh() is not None  # another task read it
    await runtime.remember(KEY, since=mark)
    assert not runtime.cached(KEY)
    runtime.invalidate(session_id="ses_unrelated")  # a local end after the mark: the same
    mark = await runtime.refresh()
    runtime.invalidate(session_id=KEY.session_id)
    await runtime.remember(KEY, since=mark)
    assert not runtime.cached(KEY)


async def test_a_durable_answer_marked_while_the_ends_could_not_be_read_is_not_kept() -> None:
    feed = Feed()
    feed.failing = True
    runtime = ApprovalRuntime(revocations=feed)
    mark = await runtime.refresh()
    assert mark is None
    feed.failing = False
    feed.end(session_id=KEY.session_id)  # recorded after the answer: must not be missed
    await runtime.remember(KEY, since=mark)
    assert not runtime.cached(KEY)
    await runtime.remember(KEY, since=await runtime.refresh())  # marked after it: kept
    assert runtime.cached(KEY)
