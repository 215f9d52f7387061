"""Host authority: only the store-bound resolver makes scopes; owned queries apply them in SQL."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.errors import (
    InvalidTurnRequest,
    InvalidValue,
    NotFoundOrUnauthorized,
    ScopeError,
    StoreClosed,
)
from hostkit.store import Admitted, LeaseOwner, RuntimeStore, TurnAdmission
from hostkit.types import MAX_KEY_CHARS, FreshSession, PrincipalScope, ResumeSession, new_id
from tests.support import facts

pytestmark = pytest.mark.anyio


async def denials(store: RuntimeStore, operator: PrincipalScope) -> list[tuple[str, str]]:
    rows = await store.read_audit(operator, kind="principal_scope.owner_lookup_denied")
    return [(row.subject or "", row.reason or "") for row in rows]


_HOLDER = LeaseOwner("another-machine", 4242, 1.0, "remote-instance", "other-boot:1")


def admission(scope: PrincipalScope, session_id: str | None = None) -> TurnAdmission:
    """A turn of ``scope``'s principal in ``session_id`` (its own session by default)."""
    return TurnAdmission(
        turn_id=new_id("turn"),
        request_id=new_id("req"),
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="rev1",
        generation=1,
        session=session_id or scope.session_id or "",
    )


async def turn_in(store: RuntimeStore, scope: PrincipalScope) -> str:
    """Admit (and free again) one turn of ``scope`` in its session; its turn id."""
    asked = admission(scope)
    admitted = await store.turns.admit(asked, owner=_HOLDER, ttl_s=600.0)
    assert isinstance(admitted, Admitted), admitted
    await store.turns.abandon(admitted.lease)
    return asked.turn_id


# -- conversation scopes ------------------------------------------------------------


async def test_conversation_scope_is_bound_to_exactly_its_session(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    scope = await authority.for_conversation(facts("c1", "alice"))
    assert scope.authority == "conversation"
    assert scope.principal_id == "webhook:alice"
    assert scope.allowed_session_ids == frozenset({scope.session_id})
    record = await store.get_session(scope, scope.session_id or "")
    assert record.owner_kind == "conversation"
    again = await authority.for_conversation(facts("c1", "alice"))
    assert again.session_id == scope.session_id


async def test_session_selectors_are_the_turn_requests_or_their_store_spellings(
    authority: AuthorityResolver,
) -> None:
    """``FreshSession()``/``ResumeSession(id)`` select as ``"fresh"``/the id do; anything
    else is refused with a bounded ``InvalidValue`` and the binding stays where it was."""
    first = await authority.for_conversation(facts("c1", "alice"))
    fresh = await authority.for_conversation(facts("c1", "alice"), session=FreshSession())
    assert fresh.session_id not in (None, first.session_id)
    back = await authority.for_conversation(
        facts("c1", "alice"), session=ResumeSession(first.session_id or "")
    )
    assert back.session_id == first.session_id
    again = await authority.for_conversation(facts("c1", "alice"), session="fresh")
    assert again.session_id not in (first.session_id, fresh.session_id)
    for word in ("fresh", "bound"):  # selectors, never ids: a resume must not start one
        with pytest.raises(InvalidTurnRequest, match="needs a session id"):
            ResumeSession(word)
    for bad in (None, 7, b"fresh", object(), "x" * 201, "bad\ud800"):
        with pytest.raises(InvalidValue, match="session must be") as raised:
            await authority.for_conversation(facts("c1", "alice"), session=bad)  # type: ignore[arg-type]
        assert len(str(raised.value)) < 200
    still = await authority.for_conversation(facts("c1", "alice"))
    assert still.session_id == again.session_id


async def test_concurrent_first_messages_of_a_conversation_share_one_session(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    scopes: list[PrincipalScope] = []

    async def first_message() -> None:
        scopes.append(await authority.for_conversation(facts("race")))

    async with anyio.create_task_group() as tg:
        for _ in range(25):
            tg.start_soon(first_message)
    assert len({s.session_id for s in scopes}) == 1
    created = await store.read_audit(operator, kind="session.created")
    assert len([row for row in created if row.session_id == scopes[0].session_id]) == 1


async def test_session_created_is_recorded_with_the_owner_row(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    scope = await authority.for_conversation(facts("c-owner", "dana"))
    owner = await store.owner_facts(scope.session_id or "")
    assert owner is not None
    assert (owner.owner_kind, owner.principal_id, owner.channel, owner.conversation_key) == (
        "conversation",
        "webhook:dana",
        "webhook",
        "c-owner",
    )


@pytest.mark.parametrize("channel", ["operator", "schedule", "agent"])
async def test_transports_cannot_claim_host_channels(
    authority: AuthorityResolver, channel: str
) -> None:
    with pytest.raises(ScopeError, match="reserved"):
        await authority.for_conversation(facts("ops/default", "ops", channel=channel))


# -- forged, foreign and revoked scopes -----------------------------------------------


async def test_hand_built_scope_is_rejected(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    real = await authority.for_conversation(facts("c1"))
    forged = PrincipalScope(
        principal_id=real.principal_id,
        authority="conversation",
        channel=real.channel,
        conversation_key=real.conversation_key,
        session_id=real.session_id,
        allowed_session_ids=real.allowed_session_ids,
        issuer_id=real.issuer_id,
        proof="0" * 64,
    )
    with pytest.raises(ScopeError, match="forged"):
        await store.get_session(forged, real.session_id or "")


async def test_altered_scope_is_rejected(store: RuntimeStore, authority: AuthorityResolver) -> None:
    mine = await authority.for_conversation(facts("mine"))
    theirs = await authority.for_conversation(facts("theirs", "mallory"))
    widened = dataclasses.replace(
        mine, allowed_session_ids=mine.allowed_session_ids | {theirs.session_id or ""}
    )
    with pytest.raises(ScopeError):
        await store.get_session(widened, theirs.session_id or "")
    promoted = dataclasses.replace(mine, authority="system")
    with pytest.raises(ScopeError):
        await store.list_sessions(promoted)


async def test_scope_from_another_store_is_rejected(tmp_path: Path) -> None:
    async with (
        await RuntimeStore.open(tmp_path / "a.db") as store_a,
        await RuntimeStore.open(tmp_path / "b.db") as store_b,
    ):
        scope_a = await AuthorityResolver.bind(store_a).for_conversation(facts("c"))
        AuthorityResolver.bind(store_b)
        with pytest.raises(ScopeError, match="another store"):
            await store_b.list_sessions(scope_a)
        with pytest.raises(ScopeError, match="another store"):
            await store_b.append_message(
                scope_a, scope_a.session_id or "", role="user", content={"t": 1}
            )


async def test_reopening_the_same_file_invalidates_old_scopes(db_path: Path) -> None:
    async with await RuntimeStore.open(db_path) as first:
        scope = await AuthorityResolver.bind(first).for_conversation(facts("c"))
    async with await RuntimeStore.open(db_path) as second:
        with pytest.raises(ScopeError, match="another store"):
            await second.get_session(scope, scope.session_id or "")


async def test_store_binds_exactly_one_resolver(store: RuntimeStore) -> None:
    AuthorityResolver.bind(store)
    with pytest.raises(ScopeError, match="already bound"):
        AuthorityResolver.bind(store)


# -- operator authority ----------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   ", None, "x" * 501, "ticket \udcff"])
async def test_operator_scope_needs_a_bounded_nonempty_reason(
    issuer: OperatorIssuer, reason: object
) -> None:
    with pytest.raises(ScopeError, match="reason"):
        await issuer.issue("ops", reason=reason)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("operator_id", "conversation_key"),
    [("op\udcff", None), ("", None), (7, None), ("ops", 5), ("ops", "k\udcff"), ("ops", "")],
)
async def test_operator_ids_are_text_that_can_be_stored(
    issuer: OperatorIssuer, operator_id: object, conversation_key: object
) -> None:
    with pytest.raises(InvalidValue, match="valid text"):
        await issuer.issue(operator_id, reason="audit", conversation_key=conversation_key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("schedule_id", "run_id"), [("nightly\udcff", "r1"), ("nightly", 3), ("", "r1")]
)
async def test_scheduled_run_ids_are_text_that_can_be_stored(
    authority: AuthorityResolver, schedule_id: object, run_id: object
) -> None:
    with pytest.raises(InvalidValue, match="valid text"):
        await authority.for_scheduled_run(schedule_id=schedule_id, run_id=run_id)  # type: ignore[arg-type]


async def test_operator_issuance_is_audited_with_its_reason(
    issuer: OperatorIssuer, store: RuntimeStore
) -> None:
    scope = await issuer.issue("ops", reason="investigate ticket 42")
    issued = await store.read_audit(scope, kind="principal_scope.operator_issued")
    assert [(row.principal_id, row.reason) for row in issued] == [
        ("operator:ops", "investigate ticket 42")
    ]


async def test_callers_cannot_inject_allowed_session_ids(
    issuer: OperatorIssuer, authority: AuthorityResolver, store: RuntimeStore
) -> None:
    victim = await authority.for_conversation(facts("victim"))
    with pytest.raises(TypeError):
        await issuer.issue(  # type: ignore[call-arg]
            "ops", reason="r", allowed_session_ids=frozenset({victim.session_id})
        )
    scope = await issuer.issue("ops", reason="r", conversation_key="console")
    assert scope.allowed_session_ids == frozenset({scope.session_id})
    owner = await store.owner_facts(scope.session_id or "")
    assert owner is not None
    assert (owner.owner_kind, owner.principal_id) == (
        "operator",
        "operator:ops",
    )
    injected = dataclasses.replace(
        scope, allowed_session_ids=scope.allowed_session_ids | {victim.session_id or ""}
    )
    with pytest.raises(ScopeError):
        await store.list_sessions(injected)


async def test_operator_issuer_is_handed_out_once(authority: AuthorityResolver) -> None:
    authority.operator_issuer()
    with pytest.raises(ScopeError, match="already taken"):
        authority.operator_issuer()


async def test_revoked_operator_scope_is_rejected(
    issuer: OperatorIssuer, store: RuntimeStore
) -> None:
    scope = await issuer.issue("ops", reason="before shutdown")
    await store.list_sessions(scope)
    issuer.revoke()
    with pytest.raises(ScopeError, match="revoked"):
        await store.list_sessions(scope)
    with pytest.raises(ScopeError, match="revoked"):
        await issuer.issue("ops", reason="after shutdown")


async def test_shutdown_revokes_operator_scopes_even_when_a_step_raises(
    store: RuntimeStore,
) -> None:
    resolver = AuthorityResolver.bind(store)
    issuer = resolver.operator_issuer()
    scope = await issuer.issue("ops", reason="retained past close")

    async def failing_shutdown_step() -> None:
        raise RuntimeError("tool shutdown failed")

    host_shutdown = contextlib.AsyncExitStack()
    host_shutdown.push_async_callback(resolver.aclose)
    host_shutdown.push_async_callback(failing_shutdown_step)
    with pytest.raises(RuntimeError, match="tool shutdown failed"):
        await host_shutdown.aclose()
    assert not issuer.live
    with pytest.raises(ScopeError, match="revoked"):
        await store.list_sessions(scope)


async def test_reopening_the_path_does_not_enable_operator_issuance(db_path: Path) -> None:
    first = await RuntimeStore.open(db_path)
    async with first, AuthorityResolver.bind(first) as resolver:
        issuer = resolver.operator_issuer()
        old_scope = await issuer.issue("ops", reason="first host")
    async with await RuntimeStore.open(db_path) as second:
        # The retained issuer of the closed Host cannot issue against anything any more,
        # and its scopes do not work on the reopened file.
        with pytest.raises(ScopeError):
            await issuer.issue("ops", reason="after reopen")
        with pytest.raises(ScopeError):
            await second.list_sessions(old_scope)


async def test_closed_store_rejects_retained_scopes(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path)
    scope = await AuthorityResolver.bind(store).for_conversation(facts("c"))
    await store.aclose()
    with pytest.raises(ScopeError, match="closed"):
        store.verify_scope(scope)
    with pytest.raises(StoreClosed):
        await store.read(lambda c: None)


# -- system and delegated scopes ---------------------------------------------------------


async def test_scheduled_run_gets_system_scope_limited_to_its_session(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    other = await authority.for_conversation(facts("someone"))
    run = await authority.for_scheduled_run(schedule_id="nightly", run_id="2026-11-29")
    assert run.authority == "system"
    assert run.allowed_session_ids == frozenset({run.session_id})
    assert (await store.get_session(run, run.session_id or "")).owner_kind == "system"
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_session(run, other.session_id or "")
    same = await authority.for_scheduled_run(schedule_id="nightly", run_id="2026-11-29")
    assert same.session_id == run.session_id
    nxt = await authority.for_scheduled_run(schedule_id="nightly", run_id="2026-11-30")
    assert nxt.session_id != run.session_id
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_session(nxt, run.session_id or "")


async def test_child_agent_owns_its_child_session_and_nothing_of_its_parent(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    parent = await authority.for_conversation(facts("parent"))
    await store.append_message(parent, parent.session_id or "", role="user", content={"t": 1})
    turn_id = await turn_in(store, parent)
    child = await authority.for_child_agent(parent, parent_turn_id=turn_id, agent="researcher")
    assert child.authority == "delegated_agent"
    assert child.session_id != parent.session_id
    record = await store.get_session(child, child.session_id or "")
    assert (record.owner_kind, record.parent_session_id, record.parent_turn_id) == (
        "delegated_agent",
        parent.session_id,
        turn_id,
    )
    with pytest.raises(NotFoundOrUnauthorized):
        await store.list_messages(child, parent.session_id or "")
    with pytest.raises(NotFoundOrUnauthorized):
        await store.get_session(parent, child.session_id or "")
    seen = {s.session_id for s in (await store.list_sessions(operator, limit=50)).items}
    assert {parent.session_id, child.session_id} <= seen


async def test_child_agent_needs_a_verified_parent(
    authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    parent = await authority.for_conversation(facts("p"))
    forged = dataclasses.replace(parent, proof="f" * 64)
    with pytest.raises(ScopeError):
        await authority.for_child_agent(forged, parent_turn_id="t", agent="a")
    with pytest.raises(ScopeError, match="parent scope bound"):
        await authority.for_child_agent(operator, parent_turn_id="t", agent="a")
    with pytest.raises(InvalidValue):
        await authority.for_child_agent(parent, parent_turn_id="t", agent="")


async def test_child_lineage_names_a_turn_of_the_parents_own_session(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    """The owner row's parent turn is a turn of the parent session: another conversation's
    turn or none is refused (audited) with nothing written; a non-text id is refused."""
    alice = await authority.for_conversation(facts("c-alice", "alice"))
    bob = await authority.for_conversation(facts("c-bob", "bob"))
    bobs_turn = await turn_in(store, bob)
    before = len((await store.list_sessions(operator, limit=50)).items)
    for forged in (bobs_turn, "no-such-turn"):
        with pytest.raises(NotFoundOrUnauthorized):
            await authority.for_child_agent(alice, parent_turn_id=forged, agent="r")
    for bad in (12345, None, "", "t" * 129, "t\ud800"):
        with pytest.raises(InvalidValue, match="parent_turn_id") as raised:
            await authority.for_child_agent(alice, parent_turn_id=bad, agent="r")  # type: ignore[arg-type]
        assert len(str(raised.value)) < 200
    assert len((await store.list_sessions(operator, limit=50)).items) == before
    assert (f"turn:{bobs_turn}", "unauthorized") in await denials(store, operator)
    assert ("turn:no-such-turn", "missing") in await denials(store, operator)
    alices_turn = await turn_in(store, alice)
    child = await authority.for_child_agent(alice, parent_turn_id=alices_turn, agent="r")
    record = await store.get_session(child, child.session_id or "")
    assert (record.parent_session_id, record.parent_turn_id) == (alice.session_id, alices_turn)


async def test_two_schedules_never_share_a_runs_session(
    authority: AuthorityResolver, store: RuntimeStore
) -> None:
    """``schedule_id/run_id`` is one pair's key alone: a run id with ``/`` (which would make
    ``billing`` + ``eu/1`` the key of ``billing/eu`` + ``1``) is refused, and every other
    pair keeps the key it always had."""
    eu = await authority.for_scheduled_run(schedule_id="billing/eu", run_id="2026-01-01")
    assert eu.conversation_key == "billing/eu/2026-01-01"
    with pytest.raises(InvalidValue, match="run_id must not contain") as raised:
        await authority.for_scheduled_run(schedule_id="billing", run_id="eu/2026-01-01")
    assert len(str(raised.value)) < 200
    billing = await authority.for_scheduled_run(schedule_id="billing", run_id="eu-2026-01-01")
    assert billing.session_id != eu.session_id
    again = await authority.for_scheduled_run(schedule_id="billing/eu", run_id="2026-01-01")
    assert again.session_id == eu.session_id


async def _written(store: RuntimeStore, operator: PrincipalScope) -> tuple[object, ...]:
    """Every session and conversation binding in the store, as an operator reads them."""
    sessions = await store.list_sessions(operator, limit=200)
    bindings = await store.read(
        lambda c: c.execute(
            "SELECT channel, conversation_key, session_id FROM conversation_bindings "
            "ORDER BY channel, conversation_key"
        ).fetchall()
    )
    return tuple(s.session_id for s in sessions.items), tuple(map(tuple, bindings))


async def test_a_scheduled_runs_key_is_checked_whole_before_anything_is_written(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    """``schedule_id`` and ``run_id`` of 128 each make a 257-character key: refused naming
    the caller's parameters, with no session or binding left behind (so a retry is refused
    the same way, not half-written again); a key of exactly ``MAX_KEY_CHARS`` runs."""
    before = await _written(store, operator)
    for _ in range(2):
        with pytest.raises(
            InvalidValue, match="schedule_id and run_id together must be at most 255"
        ):
            await authority.for_scheduled_run(schedule_id="n" * 128, run_id="r" * 128)
        assert await _written(store, operator) == before
    run = await authority.for_scheduled_run(schedule_id="n" * 128, run_id="r" * 127)
    assert len(run.conversation_key or "") == MAX_KEY_CHARS
    await turn_in(store, run)


async def test_two_operators_consoles_never_share_a_key(
    issuer: OperatorIssuer, store: RuntimeStore, operator: PrincipalScope
) -> None:
    """``operator_id/conversation_key`` is one pair's key alone: ``team/alice``'s
    ``console`` and ``team``'s ``alice/console`` would share it, so a conversation key
    with ``/`` is refused, as is a pair whose key cannot fit, before anything is written."""
    alice = await issuer.issue("team/alice", reason="console", conversation_key="console")
    assert alice.conversation_key == "team/alice/console"
    before = await _written(store, operator)
    with pytest.raises(InvalidValue, match="conversation_key must not contain '/'"):
        await issuer.issue("team", reason="console", conversation_key="alice/console")
    with pytest.raises(
        InvalidValue, match="operator_id and conversation_key together must be at most 255"
    ):
        await issuer.issue("o" * 128, reason="console", conversation_key="k" * 128)
    assert await _written(store, operator) == before
    team = await issuer.issue("team", reason="console", conversation_key="alice-console")
    assert team.session_id not in (None, alice.session_id)


async def test_a_principals_own_session_is_never_bound_or_admitted_for_another(
    authority: AuthorityResolver, store: RuntimeStore, operator: PrincipalScope
) -> None:
    """A schedule's or child's session is its principal's alone: a binding key or session id
    that names it (an old colliding key, a forged admission) is refused, audited, and no
    turn is written; a conversation's session stays shared by its speakers."""
    run = await authority.for_scheduled_run(schedule_id="billing/eu", run_id="2026-01-01")
    session = run.session_id or ""
    for select in ("bound", session):  # the bound key (read and write paths), a resume
        with pytest.raises(NotFoundOrUnauthorized):
            await store.bind_conversation(
                channel="schedule",
                conversation_key="billing/eu/2026-01-01",
                principal_id="schedule:billing",
                owner_kind="system",
                select=select,
            )
    assert (
        await store.bind_conversation(
            channel="schedule",
            conversation_key="billing/eu/2026-01-01",
            principal_id=run.principal_id,
            owner_kind="system",
        )
    ) == (session, False)
    other = await authority.for_scheduled_run(schedule_id="billing", run_id="eu-2026-01-01")
    parent = await authority.for_conversation(facts("p", "alice"))
    child = await authority.for_child_agent(
        parent, parent_turn_id=await turn_in(store, parent), agent="r"
    )
    for owner, intruder in ((run, other), (child, other), (run, parent)):
        forged = admission(intruder, owner.session_id)
        with pytest.raises(NotFoundOrUnauthorized):
            await store.turns.admit(forged, owner=_HOLDER, ttl_s=600.0)
        assert await store.turns.find(intruder.principal_id, forged.request_id) is None
    refused = await denials(store, operator)
    assert refused.count((f"session:{session}", "unauthorized")) == 4
    assert (f"session:{child.session_id}", "unauthorized") in refused
    await turn_in(store, run)  # its own principal is admitted as before
    # A group chat: another speaker of the same conversation shares its session.
    bob = await authority.for_conversation(facts("p", "bob"))
    assert bob.session_id == parent.session_id
    await turn_in(store, bob)
