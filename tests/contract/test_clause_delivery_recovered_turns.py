"""Delivery clause: a routed turn that recovery ends still tells its conversation, once.

The route a turn captured is stored on its turn row at admission (``turns.route``), so
recovery — of a holder that died, of an expired lease, a takeover at admission, or an
``abandon`` — writes the delivery intents ``finish`` would have, in the transaction of the
terminal record: a turn recovered ``lost`` sends one notice that the message got no answer;
a turn recovered ``needs_user`` sends its approval prompt (with the code); a ``cancelled``
turn and an unrouted turn send nothing. Recovery run twice, or by two stores (processes)
at once, never writes a second intent. ``TurnStore.route_of`` reads the stored route (the
approvals path carries it into a continuation turn). The real-process crash is in
tests/faults/test_clause_delivery_recovered_turns.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue
from hostkit.freeze import thaw
from hostkit.store import Admitted, LeaseOwner, NewApproval, RuntimeStore, TurnAdmission
from hostkit.store._turn_rows import INDETERMINATE_NOTICE, LOST_NOTICE
from hostkit.types import DeliveryIntent, PrincipalScope, approval_code, new_id
from tests.contract.test_store_turns import dead_like
from tests.support import facts

pytestmark = pytest.mark.anyio

ROUTE: Mapping[str, Any] = {
    "channel": "telegram.main",
    "conversation": "42:7",
    "reply": {"chat_id": 42},
}


@pytest.fixture
async def dead() -> LeaseOwner:
    """A holder on this machine whose process is provably gone."""
    return dead_like(await anyio.to_thread.run_sync(LeaseOwner.current, "recovered-suite"))


def admission(
    scope: PrincipalScope, route: Mapping[str, Any] | None, *, session: str | None = None
) -> TurnAdmission:
    return TurnAdmission(
        turn_id=new_id("turn"),
        request_id=new_id("req"),
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="rev1",
        generation=1,
        session=session or scope.session_id or "",
        trace_id=new_id("trace"),
        route=route,
    )


async def admit_as(
    runtime: RuntimeStore,
    resolver: AuthorityResolver,
    owner: LeaseOwner,
    name: str,
    route: Mapping[str, Any] | None = ROUTE,
) -> tuple[PrincipalScope, Admitted]:
    scope = await resolver.for_conversation(facts(f"c-{name}", name, "telegram.main"))
    admitted = await runtime.turns.admit(admission(scope, route), owner=owner, ttl_s=600.0)
    assert isinstance(admitted, Admitted), admitted
    return scope, admitted


async def ask_approval(runtime: RuntimeStore, scope: PrincipalScope, turn_id: str) -> str:
    """The approval the turn is waiting on when its holder dies (durable when asked)."""
    approval_id = new_id("apr")
    await runtime.approvals.insert(
        NewApproval(
            approval_id=approval_id,
            session_id=scope.session_id or "",
            turn_id=turn_id,
            principal_id=scope.principal_id,
            core_id="assistant",
            core_revision="rev1",
            effect="files.stamp",
            call_id=new_id("call"),
            arguments={"label": "invoice 7"},
            view={"effect": "files.stamp", "arguments": {"label": "invoice 7"}},
            policy_fingerprint="fp1",
            rule_key="files.stamp",
            secret_names=(),
        )
    )
    return approval_id


async def deliveries_recorded(runtime: RuntimeStore, turn_id: str) -> list[str]:
    """The intent ids the turn's terminal result names (as persisted with it)."""
    rows = await runtime.read(
        lambda c: c.execute("SELECT result FROM turns WHERE turn_id = ?", [turn_id]).fetchall()
    )
    return list(json.loads(rows[0][0])["deliveries"])


def of_turn(intents: tuple[DeliveryIntent, ...], turn_id: str) -> list[DeliveryIntent]:
    return [intent for intent in intents if intent.turn_id == turn_id]


# -- the route is captured at admission ---------------------------------------------------


async def test_the_captured_route_is_stored_with_the_admitted_turn(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    _, routed = await admit_as(runtime, resolver, dead, "alice")
    _, plain = await admit_as(runtime, resolver, dead, "bob", route=None)
    assert await runtime.turns.route_of(routed.lease.turn_id) == ROUTE
    assert await runtime.turns.route_of(plain.lease.turn_id) is None
    assert await runtime.turns.route_of("turn_unknown") is None
    # Frozen: a caller cannot change what a continuation will carry.
    stored = await runtime.turns.route_of(routed.lease.turn_id)
    assert stored is not None
    with pytest.raises(TypeError):
        stored["channel"] = "other"  # type: ignore[index]


async def test_a_route_is_bounded_like_the_request_and_bad_input_is_refused(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    scope = await resolver.for_conversation(facts("c-carol", "carol", "telegram.main"))
    with pytest.raises(InvalidValue):
        admission(scope, ["telegram.main"])  # type: ignore[arg-type]
    with pytest.raises(InvalidValue):
        await runtime.turns.route_of("")
    huge = {"channel": "telegram.main", "reply": {"chat_id": 1, "note": "x" * 10_000}}
    admitted = await runtime.turns.admit(admission(scope, huge), owner=dead, ttl_s=600.0)
    assert isinstance(admitted, Admitted)
    stored = await runtime.turns.route_of(admitted.lease.turn_id)
    assert stored is not None
    assert stored["channel"] == "telegram.main"
    assert len(stored["reply"]["note"]) <= 512
    assert await runtime.turns.recover() != ()
    (notice,) = await runtime.delivery.intents()
    assert notice.route == stored


# -- recovery tells the routed conversation -----------------------------------------------


async def test_a_routed_turn_recovered_lost_sends_one_notice_on_its_route(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    _, admitted = await admit_as(runtime, resolver, dead, "alice")
    turn_id = admitted.lease.turn_id
    recovered = await runtime.turns.recover()
    assert [(r.turn_id, r.outcome) for r in recovered] == [(turn_id, "lost")]
    (notice,) = await runtime.delivery.intents()
    assert (notice.turn_id, notice.session_id) == (turn_id, admitted.lease.session_id)
    assert (notice.route, notice.status, notice.approval) == (ROUTE, "pending", None)
    assert thaw(notice.payload) == {"text": LOST_NOTICE}
    assert "no answer" in LOST_NOTICE
    assert await deliveries_recorded(runtime, turn_id) == [notice.intent_id]
    # Due now: the first claim after recovery sends it.
    later = time.time() + 1.0
    (claim,) = await runtime.delivery.claim(
        owner="suite", limit=5, lease_s=30.0, max_attempts=3, now=later
    )
    assert claim.intent.intent_id == notice.intent_id


@pytest.mark.parametrize(
    ("detail", "notice"),
    [
        ('{"call_id": "c1", "effect": "ledger.pay", "status": "succeeded"}', "check"),
        ('{"call_id": "c1", "effect": "ledger.pay", "status": "timed_out"}', "check"),
        ('{"call_id": "c1", "effect": "ledger.pay", "status": "denied"}', "resend"),
        ("not json {", "check"),
    ],
)
async def test_a_recovered_turn_one_of_whose_calls_acted_asks_to_check_not_resend(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner, detail: str, notice: str
) -> None:
    """Its call ran before the Host died: "send it again" would run it twice. A recorded
    call that was refused did nothing; an event that cannot be read counts as one that
    acted."""
    _, admitted = await admit_as(runtime, resolver, dead, "alice")
    turn_id = admitted.lease.turn_id
    await runtime.write(
        lambda c: c.execute(
            "INSERT INTO turn_events (turn_id, seq, kind, at, detail) "
            "VALUES (?, 10, 'effect.completed', '2026-12-06T00:00:00.000Z', ?)",
            [turn_id, detail],
        )
    )
    recovered = await runtime.turns.recover()
    assert [(r.turn_id, r.outcome) for r in recovered] == [(turn_id, "lost")]
    (told,) = await runtime.delivery.intents()
    expected = INDETERMINATE_NOTICE if notice == "check" else LOST_NOTICE
    assert thaw(told.payload) == {"text": expected}


async def test_a_routed_turn_recovered_needs_user_sends_its_approval_prompt(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    scope, admitted = await admit_as(runtime, resolver, dead, "alice")
    turn_id = admitted.lease.turn_id
    approval_id = await ask_approval(runtime, scope, turn_id)
    recovered = await runtime.turns.recover()
    assert [(r.turn_id, r.outcome) for r in recovered] == [(turn_id, "needs_user")]
    (prompt,) = await runtime.delivery.intents()
    assert (prompt.turn_id, prompt.route, prompt.status) == (turn_id, ROUTE, "pending")
    approval = thaw(prompt.approval)
    code = approval_code(approval_id)
    assert approval == {
        "approval_id": approval_id,
        "code": code,
        "tool": "files.stamp",
        "summary": approval["summary"],
    }
    assert "invoice 7" in approval["summary"]
    assert f"approve {code}" in prompt.payload["text"]
    assert f"deny {code}" in prompt.payload["text"]
    assert await deliveries_recorded(runtime, turn_id) == [prompt.intent_id]


async def test_a_cancelled_or_unrouted_recovered_turn_sends_nothing(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    _, plain = await admit_as(runtime, resolver, dead, "bob", route=None)
    bob_asks = await resolver.for_conversation(facts("c-bob-2", "bob", "telegram.main"))
    plain_asking = await runtime.turns.admit(admission(bob_asks, None), owner=dead, ttl_s=600.0)
    assert isinstance(plain_asking, Admitted)
    await ask_approval(runtime, bob_asks, plain_asking.lease.turn_id)
    carol, cancelled = await admit_as(runtime, resolver, dead, "carol")
    await runtime.turns.request_cancel(carol, cancelled.lease.turn_id)
    recovered = await runtime.turns.recover()
    assert {(r.turn_id, r.outcome) for r in recovered} == {
        (plain.lease.turn_id, "lost"),
        (plain_asking.lease.turn_id, "needs_user"),
        (cancelled.lease.turn_id, "cancelled"),
    }
    assert await runtime.delivery.intents() == ()
    assert await deliveries_recorded(runtime, cancelled.lease.turn_id) == []


async def test_a_takeover_at_admission_and_an_abandon_tell_the_conversation_too(
    runtime: RuntimeStore, resolver: AuthorityResolver, dead: LeaseOwner
) -> None:
    scope, orphan = await admit_as(runtime, resolver, dead, "alice")
    live = await anyio.to_thread.run_sync(LeaseOwner.current, "recovered-suite-live")
    # The next message of the same conversation takes the dead holder's session over.
    successor = await runtime.turns.admit(admission(scope, ROUTE), owner=live, ttl_s=600.0)
    assert isinstance(successor, Admitted)
    assert [(r.turn_id, r.outcome) for r in successor.recovered] == [(orphan.lease.turn_id, "lost")]
    # A holder whose own terminal write failed abandons its turn: lost, and said so.
    await runtime.turns.abandon(successor.lease)
    intents = await runtime.delivery.intents()
    for turn_id in (orphan.lease.turn_id, successor.lease.turn_id):
        (notice,) = of_turn(intents, turn_id)
        assert (thaw(notice.payload), notice.route) == ({"text": LOST_NOTICE}, ROUTE)
    assert len(intents) == 2


# -- exactly once -------------------------------------------------------------------------


async def test_recovery_twice_and_by_two_stores_at_once_writes_one_intent_per_turn(
    tmp_path: Path, dead: LeaseOwner
) -> None:
    path = tmp_path / "shared.db"
    async with (
        RuntimeStore.open(path) as first,
        RuntimeStore.open(path) as second,
        AuthorityResolver.bind(first) as resolver,
    ):
        turns: list[str] = []
        for index in range(6):
            scope, admitted = await admit_as(first, resolver, dead, f"user{index}")
            if index % 2:
                await ask_approval(first, scope, admitted.lease.turn_id)
            turns.append(admitted.lease.turn_id)
        found: list[tuple[str, ...]] = []

        async def recover(store: RuntimeStore) -> None:
            found.append(tuple(r.turn_id for r in await store.turns.recover()))

        async with anyio.create_task_group() as group:
            group.start_soon(recover, first)
            group.start_soon(recover, second)
        # Each turn was ended by exactly one of the two.
        assert sorted(turn for batch in found for turn in batch) == sorted(turns)
        assert await first.turns.recover() == ()
        assert await second.turns.recover() == ()
        intents = await second.delivery.intents()
    assert sorted(intent.turn_id for intent in intents) == sorted(turns)
    prompts = [intent for intent in intents if intent.approval is not None]
    assert sorted(p.turn_id for p in prompts) == sorted(turns[1::2])
