"""The store's turns group: admission, session leases, fencing, terminal records, recovery.

Written against the ``RuntimeStore`` interface: the ``runtime`` fixture yields
each adapter of the store matrix (SQLite and PostgreSQL, tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import time
from datetime import datetime
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import (
    MESSAGE_LIMIT,
    InvalidValue,
    LeaseLost,
    NotFoundOrUnauthorized,
    RequestConflict,
    ScopeError,
    StoreError,
    StoreOutcomeUnknown,
    TurnInProgress,
)
from hostkit.store import (
    INTERRUPTED,
    MAX_EXTENDED_INSTRUCTIONS_CHARS,
    Admitted,
    ConversationTarget,
    LeaseOwner,
    NewApproval,
    ObservedStep,
    RowStore,
    RuntimeStore,
    SessionBusy,
    SessionLease,
    TranscriptEntry,
    TurnAdmission,
    TurnState,
)
from hostkit.types import (
    MAX_KEY_CHARS,
    ContextDecision,
    ModelMessage,
    PrincipalScope,
    TurnResult,
    Usage,
    UsageObservation,
    new_id,
)
from tests.support import facts

pytestmark = pytest.mark.anyio


@pytest.fixture
async def live() -> LeaseOwner:
    """This very process, as a Host instance other than any test's own."""
    return await anyio.to_thread.run_sync(LeaseOwner.current, "live-instance")


def dead_like(owner: LeaseOwner) -> LeaseOwner:
    """An owner on this machine whose process is provably gone (its start time differs)."""
    return LeaseOwner(owner.host, owner.pid, owner.started - 100, "dead-instance")


REMOTE = LeaseOwner("another-machine", 4242, 1.0, "remote-instance")


async def conversation(resolver: AuthorityResolver, name: str = "c1") -> PrincipalScope:
    return await resolver.for_conversation(facts(name, "alice", "test"))


def admission(
    scope: PrincipalScope, *, request_id: str | None = None, session: object = None
) -> TurnAdmission:
    return TurnAdmission(
        turn_id=new_id("turn"),
        request_id=request_id or new_id("req"),
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="cfg-test",
        generation=1,
        session=session if session is not None else scope.session_id or "",  # type: ignore[arg-type]
        trace_id=new_id("trace"),
    )


async def admit(
    runtime: RuntimeStore,
    scope: PrincipalScope,
    owner: LeaseOwner,
    *,
    ttl_s: float = 600.0,
    request_id: str | None = None,
) -> Admitted:
    admitted = await runtime.turns.admit(
        admission(scope, request_id=request_id), owner=owner, ttl_s=ttl_s
    )
    assert isinstance(admitted, Admitted), admitted
    return admitted


def result_of(lease: SessionLease, outcome: str = "completed", text: str = "done") -> TurnResult:
    return TurnResult(
        request_id="req",
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        core_id="assistant",
        core_revision="cfg-test",
        outcome=outcome,  # type: ignore[arg-type]
        text=text,
        durable_result_ref=lease.turn_id,
        generation=1,
    )


async def say(runtime: RuntimeStore, lease: SessionLease, seq: int, text: str = "hi") -> int:
    written = await runtime.turns.append_message(
        lease, event_seq=seq, message=ModelMessage("user", text), event="input.persisted"
    )
    return written.seq


# -- admission ----------------------------------------------------------------------------


async def test_admission_takes_the_session_lease_with_the_turn(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    admitted = await admit(runtime, scope, live, ttl_s=30)
    lease = admitted.lease
    assert (lease.session_id, lease.token, lease.owner) == (scope.session_id, 1, live.encode())
    assert lease.ttl_s == 30
    assert admitted.owner.owner_kind == "conversation"
    assert await runtime.turns.session_lease(lease.session_id) == lease
    state = await runtime.turns.state(scope, lease.turn_id)
    assert (state.status, state.result, state.terminal) == ("running", None, False)


async def test_admission_resolves_the_conversation_binding_in_its_own_transaction(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver, "elsewhere")  # only for the principal id
    principal_id = "test:alice"
    assert scope.principal_id == principal_id

    async def run(select: str) -> Admitted:
        target = ConversationTarget("test", "new-conversation", select)
        admitted = await runtime.turns.admit(admission(scope, session=target), owner=live, ttl_s=60)
        assert isinstance(admitted, Admitted)
        await runtime.turns.finish(admitted.lease, result_of(admitted.lease), event_seq=2)
        return admitted

    first = await run("bound")
    again = await run("bound")
    fresh = await run("fresh")
    back = await run(first.session_id)
    assert first.created
    assert fresh.created
    assert not again.created
    assert not back.created
    assert again.session_id == back.session_id == first.session_id != fresh.session_id
    assert first.owner.conversation_key == "new-conversation"


async def test_a_conversation_bound_to_a_session_it_does_not_own_is_refused(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The binding alone never grants a session: its owner row must name the very
    conversation (a row another version or a hand edit left is no authority)."""
    scope = await conversation(resolver, "c1")
    other = await conversation(resolver, "c2")
    assert isinstance(runtime, RowStore)
    await runtime.write(
        lambda c: c.execute(
            "UPDATE conversation_bindings SET session_id = ? "
            "WHERE channel = 'test' AND conversation_key = 'c1'",
            [other.session_id],
        )
    )
    attempt = admission(scope, session=ConversationTarget("test", "c1"))
    with pytest.raises(ScopeError, match="no durable conversation owner"):
        await runtime.turns.admit(attempt, owner=live, ttl_s=60)
    assert await runtime.turns.find(scope.principal_id, attempt.request_id) is None
    assert await runtime.turns.session_lease(other.session_id or "") is None


@pytest.mark.parametrize("by", ["session", "conversation"])
async def test_a_repeated_request_returns_the_existing_turn_and_writes_nothing(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner, by: str
) -> None:
    """By session id, or by the conversation's binding (whose one read also answers
    whether the key was used)."""
    scope = await conversation(resolver)
    target = scope.session_id if by == "session" else ConversationTarget("test", "c1")
    same = functools.partial(admission, scope, request_id="req-same", session=target)
    first = await admit(runtime, scope, live, request_id="req-same")
    running = await runtime.turns.admit(same(), owner=live, ttl_s=60)
    assert isinstance(running, TurnState)
    assert (running.turn_id, running.status) == (first.lease.turn_id, "running")
    await runtime.turns.finish(first.lease, result_of(first.lease), event_seq=2)
    done = await runtime.turns.admit(same(), owner=live, ttl_s=60)
    assert isinstance(done, TurnState)
    assert done.result is not None
    assert done.result.text == "done"
    assert await runtime.turns.find(scope.principal_id, "req-same") == done
    other = dataclasses.replace(same(), core_id="another")
    with pytest.raises(RequestConflict):
        await runtime.turns.admit(other, owner=live, ttl_s=60)
    # The repeats took no lease: the next new turn gets token 2.
    assert (await admit(runtime, scope, live)).lease.token == 2


@pytest.mark.parametrize("gone", ["owner_dead", "lease_expired"])
async def test_a_repeat_of_a_turn_whose_holder_is_gone_gets_its_ended_record(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner, gone: str
) -> None:
    """A repeat is answered from the turn's record: while its holder lives that is "still
    running", but once the holder is gone (its lease expired, its owner provably dead)
    the repeat ends the turn as recovery would and gets that end, in the same
    transaction, instead of waiting until someone else runs recovery."""
    scope = await conversation(resolver)
    if gone == "owner_dead":
        holder = await admit(runtime, scope, dead_like(live), request_id="req-orphan")
    else:
        holder = await admit(runtime, scope, REMOTE, ttl_s=0.05, request_id="req-orphan")
        await anyio.sleep(0.1)  # wall-clock expiry is the subject of this case
        # The first look past the expiry only notices the lapse: the holder has a ttl more.
        noticed = await runtime.turns.admit(
            admission(scope, request_id="req-orphan"), owner=live, ttl_s=60
        )
        assert isinstance(noticed, TurnState)
        assert noticed.status == "running"
        assert noticed.holder_expires_at is not None
        assert noticed.holder_expires_at > holder.lease.expires_at
        await anyio.sleep(0.1)
    repeat = await runtime.turns.admit(
        admission(scope, request_id="req-orphan"), owner=live, ttl_s=60
    )
    assert isinstance(repeat, TurnState)
    assert (repeat.turn_id, repeat.status) == (holder.lease.turn_id, "lost")
    assert repeat.result is not None
    assert "nothing was replayed" in (repeat.result.error or "")
    # The record says why, in the reason's own words: not "the Host stopped" for a live one.
    said = {"owner_dead": "process running this turn died", "lease_expired": "renewing its lease"}
    assert said[gone] in (repeat.result.error or "")
    # The session is free: the next turn takes it over without recovering anything.
    successor = await admit(runtime, scope, live)
    assert successor.recovered == ()
    assert successor.lease.token == holder.lease.token + 1


async def test_a_repeat_a_closing_host_looks_up_also_ends_a_gone_holders_turn(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """``find_repeat`` answers a repeat where no turn may be admitted (the Host closing,
    its agent gone): by the same rule, a running turn whose holder is gone is ended
    and its record returned, never "still running" for a turn nobody runs."""
    scope = await conversation(resolver)
    holder = await admit(runtime, scope, dead_like(live), request_id="req-closing")
    found = await runtime.turns.find_repeat(
        scope.principal_id, "req-closing", core_id="assistant", message=None
    )
    assert found is not None
    assert (found.turn_id, found.status) == (holder.lease.turn_id, "lost")
    assert await runtime.turns.session_lease(holder.lease.session_id) is None


async def test_a_repeat_of_a_turn_whose_holder_lives_is_still_running(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    """The control: a holder on another machine with a live lease is never ended early.
    The repeat learns when the turn started and when its holder's lease runs out (when
    asking again can first tell more)."""
    scope = await conversation(resolver)
    holder = await admit(runtime, scope, REMOTE, request_id="req-held")
    repeat = await runtime.turns.admit(
        admission(scope, request_id="req-held"), owner=REMOTE, ttl_s=60
    )
    assert isinstance(repeat, TurnState)
    assert (repeat.turn_id, repeat.status) == (holder.lease.turn_id, "running")
    assert repeat.holder_expires_at == holder.lease.expires_at
    assert repeat.started_at is not None
    assert abs(repeat.started_at - time.time()) < 60


async def test_a_repeat_is_found_only_for_the_request_its_key_named(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """What a Host that may not admit (closing, its agent gone) answers a repeated key
    with: the turn when agent and input match, as an admission would; else a conflict."""
    scope = await conversation(resolver)
    said = ModelMessage("user", "hello")
    first = await runtime.turns.admit(
        dataclasses.replace(admission(scope, request_id="req-kept"), input=said),
        owner=live,
        ttl_s=60,
    )
    assert isinstance(first, Admitted)
    find = functools.partial(runtime.turns.find_repeat, scope.principal_id, "req-kept")
    found = await find(core_id="assistant", message=said)
    assert found is not None
    assert (found.turn_id, found.status) == (first.lease.turn_id, "running")
    for core_id, message in (("other", said), ("assistant", ModelMessage("user", "bye"))):
        with pytest.raises(RequestConflict):
            await find(core_id=core_id, message=message)
    assert (
        await runtime.turns.find_repeat(
            scope.principal_id, "req-unused", core_id="assistant", message=said
        )
        is None
    )
    with pytest.raises(InvalidValue):
        await find(core_id="assistant", message="hello")  # type: ignore[arg-type]


async def test_a_busy_session_admits_nobody_else(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    holder = await admit(runtime, scope, live)
    for owner in (live, REMOTE):
        second = admission(scope)
        busy = await runtime.turns.admit(second, owner=owner, ttl_s=60)
        assert isinstance(busy, SessionBusy)
        assert (busy.session_id, busy.holder_turn_id) == (scope.session_id, holder.lease.turn_id)
        assert await runtime.turns.find(scope.principal_id, second.request_id) is None
    # Another session is not affected.
    other = await admit(runtime, await conversation(resolver, "c2"), live)
    assert other.lease.token == 1


# -- leases: takeover, renewal, fencing ---------------------------------------------------


async def test_a_dead_holder_is_taken_over_at_once_and_its_writes_are_fenced(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    stale = (await admit(runtime, scope, dead_like(live), ttl_s=600)).lease
    assert await say(runtime, stale, 2, "before the crash") == 1
    successor = await admit(runtime, scope, live)
    assert successor.lease.token == stale.token + 1
    assert [(r.turn_id, r.outcome) for r in successor.recovered] == [(stale.turn_id, "lost")]
    ended = await runtime.turns.state(scope, stale.turn_id)
    assert ended.status == "lost"
    assert ended.result is not None
    assert "nothing was replayed" in (ended.result.error or "")
    # Every write the stale holder still tries is refused, and changes nothing.
    with pytest.raises(LeaseLost):
        await say(runtime, stale, 3, "after the takeover")
    with pytest.raises(LeaseLost):
        await runtime.turns.renew(stale)
    with pytest.raises(LeaseLost):
        await runtime.turns.finish(stale, result_of(stale), event_seq=3)
    with pytest.raises(LeaseLost):
        await runtime.turns.abandon(stale)
    # Nor may it leave an approval behind: answered later, it would run the call the
    # transcript marked indeterminate after the session moved on.
    with pytest.raises(LeaseLost):
        await runtime.approvals.insert(asked(scope, stale))
    assert (await runtime.turns.state(scope, stale.turn_id)).status == "lost"
    assert (await runtime.approvals.insert(asked(scope, successor.lease))).status == "pending"
    assert await say(runtime, successor.lease, 2, "the successor's message") == 2
    assert await runtime.turns.session_lease(stale.session_id) == successor.lease


def asked(scope: PrincipalScope, lease: SessionLease) -> NewApproval:
    """The approval a call of ``lease``'s turn asks for."""
    return NewApproval(
        approval_id=new_id("apr"),
        session_id=lease.session_id,
        turn_id=lease.turn_id,
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="rev1",
        effect="files.stamp",
        call_id=new_id("call"),
        arguments={"label": "one"},
        view={"effect": "files.stamp"},
        policy_fingerprint="fp1",
        rule_key="files.stamp",
        secret_names=(),
    )


async def test_an_expired_lease_is_taken_over_a_ttl_after_its_lapse_was_noticed(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A live but silent holder (paused, stalled, cut off from the database) loses its
    session: the first look past its expiry notices the lapse and says how long the
    session stays held, the first look a ttl later takes the session over."""
    scope = await conversation(resolver)
    ttl_s = 0.2
    silent = (await admit(runtime, scope, live, ttl_s=ttl_s)).lease
    await anyio.sleep(ttl_s + 0.05)  # wall-clock expiry is the subject of this test
    before = time.time()
    busy = await runtime.turns.admit(admission(scope), owner=REMOTE, ttl_s=60)
    assert isinstance(busy, SessionBusy)
    assert busy.holder_turn_id == silent.turn_id
    assert before + ttl_s - 0.01 <= busy.expires_at <= time.time() + ttl_s + 0.01
    # Asking again before then changes nothing (the notice is not moved by it).
    again = await runtime.turns.admit(admission(scope), owner=REMOTE, ttl_s=60)
    assert isinstance(again, SessionBusy)
    assert again.expires_at == busy.expires_at
    await anyio.sleep(max(0.0, busy.expires_at - time.time()) + 0.05)
    successor = await admit(runtime, scope, REMOTE)
    assert [r.turn_id for r in successor.recovered] == [silent.turn_id]
    with pytest.raises(LeaseLost):
        await runtime.turns.renew(silent)


async def test_a_holder_that_renews_after_its_lapse_was_noticed_keeps_its_session(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The database was unreachable for longer than the ttl (a restart, a failover): no
    holder could renew, and the first Host back must not take over every live turn.
    The holder's renewal after the notice voids it: the session stays its own, and a
    later lapse is noticed afresh, with a whole ttl again."""
    scope = await conversation(resolver)
    ttl_s = 0.3
    lease = (await admit(runtime, scope, REMOTE, ttl_s=ttl_s)).lease
    await anyio.sleep(ttl_s + 0.05)  # "the outage": no renewal reached the database
    noticed = await runtime.turns.admit(admission(scope), owner=live, ttl_s=60)
    assert isinstance(noticed, SessionBusy)
    assert await runtime.turns.renew(lease) is False  # the holder is back first
    await anyio.sleep(max(0.0, noticed.expires_at - time.time()) + 0.05)
    # Past the old notice's end: the renewal voided it, a lapse now is only noticed.
    later = await runtime.turns.admit(admission(scope), owner=live, ttl_s=60)
    assert isinstance(later, SessionBusy)
    assert later.holder_turn_id == lease.turn_id
    assert later.expires_at > noticed.expires_at
    held = await runtime.turns.session_lease(lease.session_id)
    assert held is not None
    assert held.token == lease.token
    assert await runtime.turns.renew(lease) is False


async def test_a_holder_that_renews_keeps_its_lease_past_its_first_expiry(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    # A ttl the renewal and the next admission fit in, on a loaded machine too.
    ttl_s = 2.0
    lease = (await admit(runtime, scope, REMOTE, ttl_s=ttl_s)).lease
    await anyio.sleep(ttl_s + 0.1)  # expired, but nobody took the session over yet
    assert await runtime.turns.renew(lease) is False
    held = await runtime.turns.session_lease(lease.session_id)
    assert held is not None
    assert held.token == lease.token
    assert held.expires_at > lease.expires_at
    busy = await runtime.turns.admit(admission(scope), owner=live, ttl_s=60)
    assert isinstance(busy, SessionBusy)


async def test_fencing_tokens_grow_per_session_and_are_never_reused(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    first, second = await conversation(resolver, "one"), await conversation(resolver, "two")
    tokens: dict[str, list[int]] = {"one": [], "two": []}
    for _ in range(3):
        for name, scope in (("one", first), ("two", second)):
            lease = (await admit(runtime, scope, live)).lease
            tokens[name].append(lease.token)
            await runtime.turns.finish(lease, result_of(lease), event_seq=2)
    assert tokens == {"one": [1, 2, 3], "two": [1, 2, 3]}
    assert await runtime.turns.session_lease(first.session_id or "") is None


# -- the running turn's writes ------------------------------------------------------------


async def test_transcript_writes_take_the_next_seq_and_finish_releases_the_session(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    before = time.time()
    lease = (await admit(runtime, scope, live)).lease
    assert [await say(runtime, lease, seq) for seq in (2, 3, 4)] == [1, 2, 3]
    committed = await runtime.turns.finish(
        lease, result_of(lease), event_seq=5, route={"channel": "test"}
    )
    assert len(committed.deliveries) == 1
    assert await runtime.turns.session_lease(lease.session_id) is None
    state = await runtime.turns.state(scope, lease.turn_id)
    assert state.status == "completed"
    assert state.result == committed
    with pytest.raises(LeaseLost):
        await runtime.turns.finish(lease, result_of(lease, "failed"), event_seq=6)
    assert (await runtime.turns.state(scope, lease.turn_id)).result == committed
    messages = await runtime.list_messages(scope, lease.session_id)
    assert [m.seq for m in messages.items] == [1, 2, 3]
    # Stamped by the database clock (this machine's), as ISO-8601 UTC with milliseconds.
    after = time.time()
    stamps = [m.created_at for m in messages.items]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s) for s in stamps)
    assert stamps == sorted(stamps)
    assert all(before - 1 <= datetime.fromisoformat(s).timestamp() <= after + 1 for s in stamps)
    assert state.started_at is not None
    assert before - 1 <= state.started_at <= after + 1


async def test_a_cancel_request_is_owner_checked_and_reaches_the_holder(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    stranger = await conversation(resolver, "someone-else")
    with pytest.raises(NotFoundOrUnauthorized) as foreign:
        await runtime.turns.request_cancel(stranger, lease.turn_id)
    with pytest.raises(NotFoundOrUnauthorized) as missing:
        await runtime.turns.request_cancel(stranger, "turn_missing")
    assert str(foreign.value) == str(missing.value)
    assert await runtime.turns.renew(lease) is False
    state = await runtime.turns.request_cancel(scope, lease.turn_id)
    assert (state.status, state.cancel_requested) == ("running", True)
    assert await runtime.turns.renew(lease) is True
    written = await runtime.turns.append_message(
        lease, event_seq=2, message=ModelMessage("user", "x"), event="input.persisted"
    )
    assert written.cancel_requested
    await runtime.turns.finish(lease, result_of(lease, "cancelled", ""), event_seq=3)
    done = await runtime.turns.request_cancel(scope, lease.turn_id)
    assert (done.status, done.terminal) == ("cancelled", True)


async def test_a_write_whose_commit_answer_was_lost_stands_when_written_again(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A database server that crashed after a COMMIT leaves the turn writing the same step
    again: the earlier write stands (same message seq, nothing twice), where it used to
    fail the turn with "event seq N of this turn is already recorded". Another event at a
    seq already taken is still refused."""
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    first = await say(runtime, lease, 2, "the step's answer")
    again = await say(runtime, lease, 2, "the step's answer")
    assert again == first
    with pytest.raises(InvalidValue, match="event seq 2 of this turn is already recorded"):
        await runtime.turns.append_message(
            lease, event_seq=2, message=ModelMessage("assistant", "x"), event="effect.completed"
        )
    nxt = await say(runtime, lease, 3, "the next step")
    assert nxt == first + 1
    await runtime.turns.finish(lease, result_of(lease), event_seq=4)
    state = await runtime.turns.state(scope, lease.turn_id)
    assert state.status == "completed"


async def test_what_a_turn_adds_to_its_instructions_is_kept_whole_for_its_continuation(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A continuation sends the instructions its paused turn sent, whichever process runs
    it: the text the turn's bootstrap added is kept whole (event details are cut at 512
    characters, this is not), read back by turn id after the turn ended, written only by
    the turn's holder, once per event seq, within its bound."""
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    assert await runtime.turns.extended_instructions(lease.turn_id) is None
    text = "Never reveal the launch codes.\n" + "\u00e9" * (MAX_EXTENDED_INSTRUCTIONS_CHARS - 40)
    assert await runtime.turns.extend_instructions(lease, event_seq=2, text=text) is False
    # Written again (its COMMIT's answer lost), it stands; another event at its seq does not.
    assert await runtime.turns.extend_instructions(lease, event_seq=2, text=text) is False
    with pytest.raises(InvalidValue, match="event seq 2 of this turn is already recorded"):
        await say(runtime, lease, 2)
    for bad in ("", "x" * (MAX_EXTENDED_INSTRUCTIONS_CHARS + 1), "lone \ud800 surrogate"):
        with pytest.raises(InvalidValue):
            await runtime.turns.extend_instructions(lease, event_seq=3, text=bad)
    await runtime.turns.finish(lease, result_of(lease, "needs_user"), event_seq=3)
    assert await runtime.turns.extended_instructions(lease.turn_id) == text
    with pytest.raises(LeaseLost):
        await runtime.turns.extend_instructions(lease, event_seq=4, text="too late")
    assert await runtime.turns.extended_instructions(lease.turn_id) == text
    # A record that cannot be read is refused, never taken as "nothing was added".
    assert isinstance(runtime, RowStore)
    await runtime.write(
        lambda c: c.execute(
            "UPDATE turn_events SET detail = '{}' WHERE turn_id = ? AND seq = 2", [lease.turn_id]
        )
    )
    with pytest.raises(InvalidValue, match="cannot be read"):
        await runtime.turns.extended_instructions(lease.turn_id)


# -- recovery -----------------------------------------------------------------------------


async def test_recovery_ends_gone_holders_and_frees_their_sessions(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scopes = [await conversation(resolver, name) for name in ("live", "dead", "expired")]
    kept = (await admit(runtime, scopes[0], live, ttl_s=600)).lease
    dead = (await admit(runtime, scopes[1], dead_like(live), ttl_s=600)).lease
    expired = (await admit(runtime, scopes[2], REMOTE, ttl_s=0.05)).lease
    await runtime.turns.request_cancel(scopes[2], expired.turn_id)
    await anyio.sleep(0.1)  # the remote holder's lease runs out
    # The dead owner's turn ends at once; the lapsed lease is only noticed ...
    recovered = await runtime.turns.recover()
    assert {(r.turn_id, r.outcome) for r in recovered} == {(dead.turn_id, "lost")}
    await anyio.sleep(0.1)
    # ... and ends a ttl later, unless its holder renewed meanwhile.
    recovered = await runtime.turns.recover()
    assert {(r.turn_id, r.outcome) for r in recovered} == {(expired.turn_id, "cancelled")}
    assert await runtime.turns.recover() == ()
    assert await runtime.turns.session_lease(dead.session_id) is None
    assert await runtime.turns.session_lease(kept.session_id) == kept
    # A Host's shutdown ends what its own instance holds, whatever the lease says.
    mine = await runtime.turns.recover(instance="live-instance")
    assert [(r.turn_id, r.outcome) for r in mine] == [(kept.turn_id, "lost")]
    assert await runtime.turns.session_lease(kept.session_id) is None


async def test_reads_show_a_gone_holders_turn_interrupted_and_write_nothing(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The inspect queries call a running turn ``interrupted`` exactly when the lease rule
    would end it now (its owner provably dead, or its lapse noticed a ttl ago), never a
    holder merely late to renew (the database was locked or unreachable: it still runs).
    Being reads, they neither end a turn nor notice a lapse: that is left to a writer."""
    operator = await resolver.operator_issuer().issue("ops", reason="inspect gone holders")
    scopes = [await conversation(resolver, name) for name in ("live", "dead", "late")]
    kept = (await admit(runtime, scopes[0], live, ttl_s=600)).lease
    dead = (await admit(runtime, scopes[1], dead_like(live), ttl_s=600)).lease
    late = (await admit(runtime, scopes[2], REMOTE, ttl_s=1.0)).lease
    await anyio.sleep(1.2)  # the remote holder's lease runs out by the store's clock

    async def shown_everywhere(expected: dict[str, str]) -> None:
        listed = await runtime.inspect.recent_sessions(operator)
        assert {row.session.session_id: row.last_outcome for row in listed} == {
            lease.session_id: expected[lease.turn_id] for lease in (kept, dead, late)
        }
        for lease in (kept, dead, late):
            session = lease.session_id
            decisions = await runtime.inspect.turn_decisions(operator, session_id=session)
            usage = await runtime.inspect.session_usage(operator, session)
            assert decisions.turn is not None
            assert decisions.turn.status == expected[lease.turn_id]
            assert [turn.turn.status for turn in usage.turns] == [expected[lease.turn_id]]
            recorded = "running" if expected[lease.turn_id] == INTERRUPTED else None
            state = await runtime.turns.state(operator, lease.turn_id)
            assert state.status == (recorded or expected[lease.turn_id])

    # Not noticed yet: the late holder may be renewing as soon as it can reach the database.
    await shown_everywhere(
        {kept.turn_id: "running", dead.turn_id: INTERRUPTED, late.turn_id: "running"}
    )
    # Nothing was written: the dead owner's turn ends now, the lapse is only noticed now.
    recovered = await runtime.turns.recover()
    assert {(r.turn_id, r.outcome) for r in recovered} == {(dead.turn_id, "lost")}
    after = {kept.turn_id: "running", dead.turn_id: "lost", late.turn_id: "running"}
    await shown_everywhere(after)  # noticed less than a ttl ago: it may still renew
    await anyio.sleep(1.2)
    await shown_everywhere({**after, late.turn_id: INTERRUPTED})  # a ttl since the notice
    assert (await runtime.turns.state(operator, late.turn_id)).status == "running"


async def test_abandon_ends_the_turn_lost_and_frees_the_session_at_once(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    ended = await runtime.turns.abandon(lease)
    assert (ended.turn_id, ended.outcome) == (lease.turn_id, "lost")
    record = await runtime.turns.state(scope, lease.turn_id)
    assert record.result is not None
    # The Host is alive: its store refused the turn's end, and the record says so.
    assert "could not record this turn's end" in (record.result.error or "")
    assert (await admit(runtime, scope, live)).lease.token == lease.token + 1


# -- bad input ----------------------------------------------------------------------------


def _bounded(error: InvalidValue) -> bool:
    return 0 < len(str(error)) <= MESSAGE_LIMIT


BAD_ADMISSIONS = [
    pytest.param({"turn_id": ""}, id="empty turn id"),
    pytest.param({"request_id": "r" * 5000}, id="huge request id"),
    pytest.param({"principal_id": None}, id="no principal"),
    pytest.param({"principal_id": "p" * (MAX_KEY_CHARS + 1)}, id="principal past the key bound"),
    pytest.param({"core_id": 7}, id="core id not a string"),
    pytest.param({"generation": -1}, id="negative generation"),
    pytest.param({"generation": True}, id="bool generation"),
    pytest.param({"generation": 2**63}, id="generation past 64 bits"),
    pytest.param({"session": ""}, id="empty session"),
    pytest.param({"trace_id": "t" * 201}, id="long trace id"),
]


@pytest.mark.parametrize("change", BAD_ADMISSIONS)
def test_bad_admissions_are_refused_on_construction(change: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "turn_id": "turn_x",
        "request_id": "req_x",
        "principal_id": "test:alice",
        "core_id": "assistant",
        "core_revision": "cfg",
        "generation": 1,
        "session": "ses_x",
        **change,
    }
    with pytest.raises(InvalidValue) as caught:
        TurnAdmission(**fields)  # type: ignore[arg-type]
    assert _bounded(caught.value)
    assert "5000" not in str(caught.value)
    assert "rrrrrrrr" not in str(caught.value)


@pytest.mark.parametrize(
    "target",
    [
        {"channel": "", "conversation_key": "k"},
        {"channel": "c", "conversation_key": "k" * (MAX_KEY_CHARS + 1)},
        {"channel": "c", "conversation_key": "k", "select": ""},
        {"channel": "c", "conversation_key": "k", "owner_kind": "legacy_local"},
    ],
)
def test_bad_conversation_targets_are_refused(target: dict[str, str]) -> None:
    with pytest.raises(InvalidValue) as caught:
        ConversationTarget(**target)  # type: ignore[arg-type]
    assert _bounded(caught.value)


@pytest.mark.parametrize("ttl_s", [0, -1.0, math.nan, math.inf, 86_401.0, True, "60", None])
async def test_admission_refuses_a_bad_ttl_and_writes_nothing(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner, ttl_s: object
) -> None:
    scope = await conversation(resolver)
    bad = admission(scope)
    with pytest.raises(InvalidValue) as caught:
        await runtime.turns.admit(bad, owner=live, ttl_s=ttl_s)  # type: ignore[arg-type]
    assert _bounded(caught.value)
    assert await runtime.turns.find(scope.principal_id, bad.request_id) is None
    assert await runtime.turns.session_lease(scope.session_id or "") is None


async def test_admission_refuses_what_is_not_an_admission_or_an_owner(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    with pytest.raises(InvalidValue):
        await runtime.turns.admit({"turn_id": "x"}, owner=live, ttl_s=60)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        await runtime.turns.admit(admission(scope), owner=live.encode(), ttl_s=60)  # type: ignore[arg-type]
    assert await runtime.turns.session_lease(scope.session_id or "") is None


async def test_sessions_that_are_missing_or_not_the_conversations_are_refused_alike(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    mine = await conversation(resolver)
    theirs = await conversation(resolver, "theirs")
    errors = []
    for session in (
        ConversationTarget("test", "c1", theirs.session_id or ""),
        ConversationTarget("test", "c1", "ses_missing"),
        "ses_missing",
    ):
        attempt = admission(mine, session=session)
        with pytest.raises(NotFoundOrUnauthorized) as caught:
            await runtime.turns.admit(attempt, owner=live, ttl_s=60)
        errors.append(str(caught.value))
        assert await runtime.turns.find(mine.principal_id, attempt.request_id) is None
    assert len(set(errors)) == 1
    # The failed resume did not rebind the conversation.
    again = await runtime.turns.admit(
        admission(mine, session=ConversationTarget("test", "c1")), owner=live, ttl_s=60
    )
    assert isinstance(again, Admitted)
    assert again.session_id == mine.session_id


async def test_bad_writes_are_refused_and_lose_nothing_accepted(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    assert await say(runtime, lease, 2, "accepted") == 1
    message = ModelMessage("user", "x")
    other = SessionLease(lease.session_id, "turn_other", 1, "x", 0.0, 1.0)
    turns = runtime.turns
    bad_calls = [
        lambda: turns.append_message(lease, event_seq=0, message=message, event="e"),
        lambda: turns.append_message(lease, event_seq=True, message=message, event="e"),
        lambda: turns.append_message(lease, event_seq=3, message="x", event="e"),  # type: ignore[arg-type]
        lambda: turns.append_message(lease, event_seq=3, message=message, event=""),
        lambda: turns.append_message(lease, event_seq=3, message=message, event="e" * 101),
        lambda: turns.append_message("lease", event_seq=3, message=message, event="e"),  # type: ignore[arg-type]
        # Seq 2 is the accepted message's event already: refused, and the insert rolls back.
        lambda: turns.append_message(lease, event_seq=2, message=message, event="e"),
        lambda: turns.renew(object()),  # type: ignore[arg-type]
        lambda: turns.finish(lease, "done", event_seq=3),  # type: ignore[arg-type]
        lambda: turns.finish(lease, result_of(other), event_seq=3),
        lambda: turns.session_lease(""),
        lambda: turns.find("", "req"),
        lambda: turns.state(scope, "t" * 500),
        lambda: turns.recover(instance=""),
    ]
    for call in bad_calls:
        with pytest.raises(InvalidValue) as caught:
            await call()
        assert _bounded(caught.value)
    # Everything accepted before is intact and the turn still holds its session.
    assert await runtime.turns.session_lease(lease.session_id) == lease
    assert await say(runtime, lease, 3, "next") == 2
    messages = await runtime.list_messages(scope, lease.session_id)
    assert [m.content["text"] for m in messages.items] == ["accepted", "next"]


async def test_owned_append_is_refused_while_a_turn_holds_the_session(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    admitted = await admit(runtime, scope, live)
    session_id = admitted.lease.session_id
    with pytest.raises(TurnInProgress):
        await runtime.append_message(scope, session_id, role="user", content={"text": "x"})
    await say(runtime, admitted.lease, 2)
    await runtime.turns.finish(admitted.lease, result_of(admitted.lease), event_seq=3)
    appended = await runtime.append_message(scope, session_id, role="user", content={"text": "y"})
    page = await runtime.list_messages(scope, session_id)
    assert [m.seq for m in page.items] == [1, appended.seq]
    assert appended.seq == 2


async def test_admission_writes_the_input_and_finish_the_final_answer_atomically(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    with_input = dataclasses.replace(admission(scope), input=ModelMessage("user", "question"))
    admitted = await runtime.turns.admit(with_input, owner=live, ttl_s=600)
    assert isinstance(admitted, Admitted)
    assert admitted.next_event_seq == 3  # turn.started 1, input.persisted 2
    lease = admitted.lease
    answer = TranscriptEntry(ModelMessage("assistant", "the answer"), "provider.completed", 3)
    # Bad input is refused before anything is written.
    for bad in (
        dataclasses.replace(answer, event_seq=4),  # not before the terminal event
        "the answer",
    ):
        with pytest.raises(InvalidValue) as caught:
            await runtime.turns.finish(lease, result_of(lease), event_seq=4, final=bad)  # type: ignore[arg-type]
        assert _bounded(caught.value)
    with pytest.raises(InvalidValue):
        TranscriptEntry(ModelMessage("assistant", "x"), "provider.completed", 1)
    # A terminal commit that fails writes no final answer either: one transaction.
    other = SessionLease(lease.session_id, lease.turn_id, lease.token + 1, "x", 0.0, 1.0)
    with pytest.raises(LeaseLost):
        await runtime.turns.finish(other, result_of(lease), event_seq=4, final=answer)
    messages = await runtime.list_messages(scope, lease.session_id)
    assert [(m.role, m.content["text"]) for m in messages.items] == [("user", "question")]
    await runtime.turns.finish(lease, result_of(lease), event_seq=4, final=answer)
    messages = await runtime.list_messages(scope, lease.session_id)
    assert [(m.seq, m.role) for m in messages.items] == [(1, "user"), (2, "assistant")]
    assert (await runtime.turns.state(scope, lease.turn_id)).status == "completed"
    assert await runtime.turns.session_lease(lease.session_id) is None


def _observed_step(lease: SessionLease, decision_id: str, step: int) -> ObservedStep:
    decision = ContextDecision(
        decision_id=decision_id,
        session_id=lease.session_id,
        turn_id=lease.turn_id,
        step_id=step,
        kind="ready",
        estimated_input_tokens=120,
        hard_budget=1_000,
        output_budget=200,
        context_window=1_500,
        raw_input_tokens=100,
        estimator="charclass/3.5/1.5",
        provider="p",
        model="m",
    )
    observation = UsageObservation(
        decision_id=decision_id,
        session_id=lease.session_id,
        turn_id=lease.turn_id,
        step_id=step,
        provider="p",
        model="m",
        usage=Usage(110, 7),
    )
    return ObservedStep(decision, observation)


async def test_a_step_observation_commits_with_the_transcript_write(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    scope = await conversation(resolver)
    lease = (await admit(runtime, scope, live)).lease
    first = _observed_step(lease, "ctx_step0", 0)
    written = await runtime.turns.append_message(
        lease,
        event_seq=2,
        message=ModelMessage("assistant", "calling"),
        event="provider.completed",
        observed=first,
    )
    assert written.step is not None
    assert written.step.observed
    assert written.step.calibration is not None
    assert written.step.calibration.samples == 1
    assert await runtime.context.decision("ctx_step0") == first.decision
    # Already recorded: the same observation again changes nothing.
    assert not await runtime.context.record_usage(first.observation)
    # An observation of another turn is refused, and nothing of the write happens.
    other = dataclasses.replace(
        _observed_step(lease, "ctx_other", 1),
        observation=dataclasses.replace(first.observation, turn_id="turn_other"),
        decision=None,
    )
    for bad in (other, "observed"):
        with pytest.raises(InvalidValue) as caught:
            await runtime.turns.append_message(
                lease,
                event_seq=3,
                message=ModelMessage("assistant", "x"),
                event="provider.completed",
                observed=bad,  # type: ignore[arg-type]
            )
        assert _bounded(caught.value)
    with pytest.raises(InvalidValue):
        ObservedStep(first.decision, dataclasses.replace(first.observation, decision_id="x"))
    # The terminal commit carries the last step's observation.
    last = _observed_step(lease, "ctx_step1", 1)
    final = TranscriptEntry(ModelMessage("assistant", "done"), "provider.completed", 3)
    await runtime.turns.finish(lease, result_of(lease), event_seq=4, final=final, observed=last)
    assert await runtime.context.decision("ctx_step1") == last.decision
    assert not await runtime.context.record_usage(last.observation)
    messages = await runtime.list_messages(scope, lease.session_id)
    assert [m.role for m in messages.items] == ["assistant", "assistant"]


# -- a COMMIT whose answer was lost ----------------------------------------------------


def lost_answers(
    runtime: RuntimeStore, monkeypatch: pytest.MonkeyPatch, *, landed: bool
) -> list[int]:
    """The next write's COMMIT loses its answer (the connection broke), after committing
    (``landed``) or not; PostgreSQL reports that as ``StoreOutcomeUnknown``."""
    real = runtime.write
    hits: list[int] = []

    async def write(fn: Any) -> Any:
        if hits:
            return await real(fn)
        hits.append(1)
        if landed:
            await real(fn)
        raise StoreOutcomeUnknown("the connection broke during COMMIT")

    monkeypatch.setattr(runtime, "write", write)
    return hits


async def test_an_admission_whose_commit_landed_unanswered_is_read_back_and_goes_on(
    runtime: RuntimeStore,
    resolver: AuthorityResolver,
    live: LeaseOwner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It used to fail permanently: an inbound was dead-lettered, its turn left to be lost.
    scope = await conversation(resolver)
    hits = lost_answers(runtime, monkeypatch, landed=True)
    wanted = admission(scope)
    admitted = await runtime.turns.admit(wanted, owner=live, ttl_s=60)
    assert hits == [1]
    assert isinstance(admitted, Admitted)
    lease = admitted.lease
    assert (lease.turn_id, lease.token, lease.owner) == (wanted.turn_id, 1, live.encode())
    assert await runtime.turns.session_lease(lease.session_id) == lease
    assert admitted.next_event_seq == 2
    # The turn goes on under that lease, to its one terminal record.
    assert await say(runtime, lease, admitted.next_event_seq) == 1
    await runtime.turns.finish(lease, result_of(lease), event_seq=3)
    assert (await runtime.turns.state(scope, lease.turn_id)).status == "completed"


async def test_an_admission_whose_commit_did_not_land_is_retryable_and_the_id_stays_free(
    runtime: RuntimeStore,
    resolver: AuthorityResolver,
    live: LeaseOwner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scope = await conversation(resolver)
    lost_answers(runtime, monkeypatch, landed=False)
    wanted = admission(scope, request_id="req-unanswered")
    with pytest.raises(StoreError) as caught:
        await runtime.turns.admit(wanted, owner=live, ttl_s=60)
    assert caught.value.retryable
    assert not isinstance(caught.value, StoreOutcomeUnknown)
    assert await runtime.turns.find(scope.principal_id, "req-unanswered") is None
    again = await runtime.turns.admit(wanted, owner=live, ttl_s=60)
    assert isinstance(again, Admitted)
    assert again.lease.turn_id == wanted.turn_id


async def test_an_admission_that_could_not_be_read_back_says_its_outcome_is_unknown(
    runtime: RuntimeStore,
    resolver: AuthorityResolver,
    live: LeaseOwner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The database went down with the COMMIT: the turn may hold its session, which the
    # Host must know to free it. It used to be told that nothing of it had landed.
    async def unreadable(fn: Any) -> Any:
        raise StoreError("read failed: the database is down", retryable=True)

    scope = await conversation(resolver)
    lost_answers(runtime, monkeypatch, landed=True)
    monkeypatch.setattr(runtime, "read", unreadable)
    wanted = admission(scope)
    with pytest.raises(StoreOutcomeUnknown) as caught:
        await runtime.turns.admit(wanted, owner=live, ttl_s=60)
    assert caught.value.retryable  # admission is keyed by its request id
    monkeypatch.undo()
    held = await runtime.turns.session_lease(scope.session_id or "")
    assert held is not None
    assert held.turn_id == wanted.turn_id
