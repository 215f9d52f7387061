"""The store's attachments group: what a turn took is kept, what no turn took is reclaimed.

An attachment added for a turn that was then refused (the provider does not
take its type, the session was busy, the request was a repeat), never sent,
or lost to a crash before admission, is referenced by nothing: ``reclaim``
deletes it once it has waited longer than the grace period, in bounded
batches. One an admitted turn carries is kept for good, whoever else stored
the same bytes. Written against ``RuntimeStore``: the ``runtime`` fixture
yields each adapter of the store matrix (SQLite and PostgreSQL).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidTurnRequest, InvalidValue
from hostkit.store import (
    MAX_RECLAIM,
    Admitted,
    LeaseOwner,
    RowStore,
    RuntimeStore,
    SessionBusy,
    TurnAdmission,
)
from hostkit.types import Attachment, AttachmentPart, ModelMessage, PrincipalScope, new_id
from tests.support import facts

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
HOUR = 3_600.0
LONG_AGO = "2000-01-01T00:00:00.000Z"


@pytest.fixture
async def live() -> LeaseOwner:
    return await anyio.to_thread.run_sync(LeaseOwner.current, "live-instance")


def png(n: int) -> bytes:
    """A distinct small PNG per ``n``."""
    return PNG + n.to_bytes(4, "big")


def attachment(data: bytes) -> Attachment:
    ref = "sha256:" + hashlib.sha256(data).hexdigest()
    return Attachment("chart.png", "image/png", len(data), ref)


async def added(runtime: RuntimeStore, scope: PrincipalScope, data: bytes) -> Attachment:
    stored = await runtime.attachments.add(
        principal_id=scope.principal_id, data=data, media_type="image/png"
    )
    assert stored.ref == attachment(data).ref
    return attachment(data)


async def age(runtime: RuntimeStore) -> None:
    """Every attachment no turn took was added long ago (past any grace period)."""
    assert isinstance(runtime, RowStore)
    await runtime.write(
        lambda c: c.execute("UPDATE attachments_pending SET added_at = ?", [LONG_AGO])
    )


async def present(runtime: RuntimeStore, scope: PrincipalScope, item: Attachment) -> bool:
    loaded = await runtime.attachments.load(principal_id=scope.principal_id, refs=[item.ref])
    return item.ref in loaded


def carrying(
    scope: PrincipalScope, *items: Attachment, deferred: bool = False, request_id: str = ""
) -> TurnAdmission:
    return TurnAdmission(
        turn_id=new_id("turn"),
        request_id=request_id or new_id("req"),
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="cfg-test",
        generation=1,
        session=scope.session_id or "",
        trace_id=new_id("trace"),
        input=ModelMessage(
            "user", "what is this?", attachments=tuple(AttachmentPart(a) for a in items)
        ),
        input_deferred=deferred,
    )


async def conversation(resolver: AuthorityResolver, name: str, who: str) -> PrincipalScope:
    return await resolver.for_conversation(facts(name, who, "test"))


async def test_an_attachment_no_turn_took_is_reclaimed_after_its_grace_period(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    """The bytes of a refused or never-sent turn: kept through the grace period (an upload
    racing its own turn), deleted after it."""
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 0
    assert await present(runtime, alice, item)
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 1
    assert not await present(runtime, alice, item)
    described = await runtime.attachments.describe(principal_id=alice.principal_id, refs=[item.ref])
    assert described == {}
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 0


@pytest.mark.parametrize("deferred", [False, True], ids=["input-persisted", "input-deferred"])
async def test_an_admitted_turns_attachments_are_never_reclaimed(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner, deferred: bool
) -> None:
    """Kept from the admission on, also when the input is written only after the core's
    input slot (the transcript names it later)."""
    alice = await conversation(resolver, "c1", "alice")
    taken = await added(runtime, alice, png(1))
    left = await added(runtime, alice, png(2))
    admitted = await runtime.turns.admit(
        carrying(alice, taken, deferred=deferred), owner=live, ttl_s=600
    )
    assert isinstance(admitted, Admitted)
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 1
    assert await present(runtime, alice, taken)
    assert not await present(runtime, alice, left)
    # Added again later (a client re-uploading a file it sent before): still kept.
    await added(runtime, alice, png(1))
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 0
    assert await present(runtime, alice, taken)


async def test_a_turn_refused_as_its_session_is_busy_leaves_its_attachments_pending(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A busy session's answer commits (the binding stays): the refused turn's attachments
    must stay pending, not be taken by a turn that never was."""
    alice = await conversation(resolver, "c1", "alice")
    running = await runtime.turns.admit(carrying(alice), owner=live, ttl_s=600)
    assert isinstance(running, Admitted)
    refused = await added(runtime, alice, png(1))
    busy = await runtime.turns.admit(carrying(alice, refused), owner=live, ttl_s=600)
    assert isinstance(busy, SessionBusy)
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 1
    assert not await present(runtime, alice, refused)


async def test_the_same_bytes_are_reclaimed_only_for_the_principal_no_turn_took_them_for(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """Rows are per principal: Bob's unused copy goes, Alice's copy her turn carries stays."""
    alice = await conversation(resolver, "c1", "alice")
    bob = await conversation(resolver, "c2", "bob")
    mine = await added(runtime, alice, PNG)
    theirs = await added(runtime, bob, PNG)
    assert mine.ref == theirs.ref
    assert isinstance(
        await runtime.turns.admit(carrying(alice, mine), owner=live, ttl_s=600), Admitted
    )
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 1
    assert await present(runtime, alice, mine)
    assert not await present(runtime, bob, theirs)


async def test_adding_the_same_bytes_again_restarts_the_grace_period(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    await age(runtime)
    await added(runtime, alice, png(1))
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 0
    assert await present(runtime, alice, item)


async def test_a_turn_whose_attachment_was_reclaimed_is_refused_and_writes_nothing(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """Reclaimed between the turn's check and its admission: refused as a ref never added,
    and the request id stays free."""
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 1
    turn = carrying(alice, item, request_id="req-1")
    with pytest.raises(InvalidTurnRequest, match="was not found for this principal"):
        await runtime.turns.admit(turn, owner=live, ttl_s=600)
    assert await runtime.turns.find(alice.principal_id, "req-1") is None
    assert await runtime.turns.session_lease(alice.session_id or "") is None
    await added(runtime, alice, png(1))
    assert isinstance(await runtime.turns.admit(turn, owner=live, ttl_s=600), Admitted)


async def test_a_transcript_message_naming_an_attachment_keeps_it(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    """A message appended to an owned session names the attachment: it is referenced."""
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    await runtime.append_message(
        alice,
        alice.session_id or "",
        role="user",
        content=ModelMessage("user", "see", attachments=(AttachmentPart(item),)).to_json(),
    )
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 0
    assert await present(runtime, alice, item)


async def test_a_reclaim_pass_is_bounded_and_oldest_first(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    alice = await conversation(resolver, "c1", "alice")
    items = [await added(runtime, alice, png(n)) for n in range(5)]
    await age(runtime)
    assert [await runtime.attachments.reclaim(grace_s=0, limit=2) for _ in range(4)] == [
        2,
        2,
        1,
        0,
    ]
    assert not any([await present(runtime, alice, item) for item in items])
    bad: dict[str, Any]
    for bad in ({"limit": 0}, {"limit": MAX_RECLAIM + 1}, {"grace_s": -1.0}, {"grace_s": "1"}):
        with pytest.raises(InvalidValue):
            await runtime.attachments.reclaim(**bad)


async def test_a_turn_admitted_while_the_sweep_runs_keeps_its_bytes(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """Admissions race reclaim passes over the same aged attachments: each turn is either
    admitted with its bytes or refused with nothing written; no admitted turn loses them."""
    scopes = [await conversation(resolver, f"c{n}", f"user{n}") for n in range(12)]
    items = [await added(runtime, scope, png(n)) for n, scope in enumerate(scopes)]
    await age(runtime)
    outcomes: dict[int, bool] = {}
    reclaimed: list[int] = []

    async def turn(n: int) -> None:
        try:
            admitted = await runtime.turns.admit(
                dataclasses.replace(carrying(scopes[n], items[n]), request_id=f"req-{n}"),
                owner=live,
                ttl_s=600,
            )
        except InvalidTurnRequest:
            outcomes[n] = False
        else:
            assert isinstance(admitted, Admitted)
            outcomes[n] = True

    async def sweep() -> None:
        for _ in range(12):
            reclaimed.append(await runtime.attachments.reclaim(grace_s=0, limit=1))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(sweep)
            for n in range(len(scopes)):
                group.start_soon(turn, n)
    assert sorted(outcomes) == list(range(len(scopes)))
    for n, scope in enumerate(scopes):
        found = await runtime.turns.find(scope.principal_id, f"req-{n}")
        assert (found is not None) == outcomes[n]
        assert await present(runtime, scope, items[n]) == outcomes[n]
    assert sum(reclaimed) == sum(1 for admitted in outcomes.values() if not admitted)
    # Whatever the sweep did not reach is reclaimed now; the admitted turns' bytes stay.
    await runtime.attachments.reclaim(grace_s=0, limit=MAX_RECLAIM)
    for n, scope in enumerate(scopes):
        assert await present(runtime, scope, items[n]) == outcomes[n]


# -- erasing a session: bytes another session may still need are kept --------------------


async def _erase(runtime: RuntimeStore, ops: PrincipalScope, scope: PrincipalScope) -> int:
    erased = await runtime.erase_session(ops, scope.session_id or "", "alice asked")
    return erased.attachments


async def test_an_erase_keeps_bytes_a_message_without_a_turn_names(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    """``append_message`` writes transcript rows with no turn: they name the bytes too."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    second = await conversation(resolver, "c2", "alice")
    item = await added(runtime, first, png(1))
    content = ModelMessage("user", "see", attachments=(AttachmentPart(item),)).to_json()
    for scope in (first, second):
        await runtime.append_message(scope, scope.session_id or "", role="user", content=content)
    assert await _erase(runtime, ops, first) == 0
    assert await present(runtime, second, item)
    assert await _erase(runtime, ops, second) == 1
    assert not await present(runtime, second, item)


async def test_an_erase_keeps_bytes_while_the_person_has_a_turn_running(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A turn admitted with its input deferred (written after the core's input slot) holds
    the bytes with no pending row and no message yet: they stay while it runs."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    second = await conversation(resolver, "c2", "alice")
    item = await added(runtime, first, png(1))
    content = ModelMessage("user", "see", attachments=(AttachmentPart(item),)).to_json()
    await runtime.append_message(first, first.session_id or "", role="user", content=content)
    admitted = await runtime.turns.admit(
        carrying(second, item, deferred=True), owner=live, ttl_s=600
    )
    assert isinstance(admitted, Admitted)
    assert await _erase(runtime, ops, first) == 0
    assert await present(runtime, second, item)
