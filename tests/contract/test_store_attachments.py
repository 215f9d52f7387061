"""The store's attachments group: what a turn took is kept, what no turn took is reclaimed.

An attachment added for a turn that was then refused (the provider does not
take its type, the session was busy, the request was a repeat), never sent,
or lost to a crash before admission, is referenced by nothing: ``reclaim``
deletes it once it has waited longer than the grace period, in bounded
batches. One an admitted turn carries is kept while its session references
it, whoever else stored the same bytes; an erase deletes the bytes only once
no other session references them and no upload of them waits for its turn.
Written against ``RuntimeStore``: the ``runtime`` fixture
yields each adapter of the store matrix (SQLite and PostgreSQL).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import re
import sqlite3
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidTurnRequest, InvalidValue, StoreError
from hostkit.store import (
    MAX_RECLAIM,
    Admitted,
    LeaseOwner,
    RowStore,
    RuntimeStore,
    SessionBusy,
    TurnAdmission,
)
from hostkit.types import (
    Attachment,
    AttachmentPart,
    ModelMessage,
    PrincipalScope,
    TurnResult,
    new_id,
)
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


async def finished(
    runtime: RuntimeStore, scope: PrincipalScope, live: LeaseOwner, *items: Attachment
) -> str:
    """A turn of ``scope`` carrying ``items``, admitted and finished: its message names them."""
    admitted = await runtime.turns.admit(carrying(scope, *items), owner=live, ttl_s=600)
    assert isinstance(admitted, Admitted)
    await finish(runtime, admitted)
    return admitted.lease.turn_id


async def finish(runtime: RuntimeStore, admitted: Admitted, event_seq: int = 0) -> None:
    lease = admitted.lease
    result = TurnResult(
        request_id="req",
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        core_id="assistant",
        core_revision="cfg-test",
        outcome="completed",
        text="a chart",
        durable_result_ref=lease.turn_id,
        generation=1,
    )
    await runtime.turns.finish(lease, result, event_seq=event_seq or admitted.next_event_seq)


async def test_bytes_added_again_for_another_conversation_outlive_an_erase_of_the_first(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The first conversation's turn took the bytes; the person uploads them again for a
    second one whose turn is not admitted yet: erasing the first keeps them for it."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    second = await conversation(resolver, "c2", "alice")
    item = await added(runtime, first, png(1))
    await finished(runtime, first, live, item)
    await added(runtime, second, png(1))
    assert await _erase(runtime, ops, first) == 0
    assert isinstance(
        await runtime.turns.admit(carrying(second, item), owner=live, ttl_s=600), Admitted
    )
    assert await present(runtime, second, item)


_STEPS = ("add", "erase", "admit")


@pytest.mark.parametrize(
    "order", list(itertools.permutations(_STEPS)), ids=lambda order: "-".join(order)
)
async def test_every_order_of_add_erase_and_admit_keeps_the_bytes_the_turn_needs(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner, order: tuple[str, ...]
) -> None:
    """Each step is its own write transaction, as from three processes. The second
    conversation's turn is admitted with its bytes, and keeps them, unless it came after
    the erase had deleted them and before the person added them again: then it is refused
    with nothing written, and the add that follows stores them afresh."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    second = await conversation(resolver, "c2", "alice")
    item = await added(runtime, first, png(1))
    await finished(runtime, first, live, item)
    turn = carrying(second, item, request_id="req-b")
    outcome: list[bool] = []
    for step in order:
        if step == "add":
            await added(runtime, second, png(1))
        elif step == "erase":
            await _erase(runtime, ops, first)
        else:
            try:
                admitted = await runtime.turns.admit(turn, owner=live, ttl_s=600)
            except InvalidTurnRequest:
                outcome.append(False)
            else:
                assert isinstance(admitted, Admitted)
                outcome.append(True)
    gone_before_add = order.index("erase") < order.index("admit") < order.index("add")
    assert outcome == [not gone_before_add]
    assert (await runtime.turns.find(second.principal_id, "req-b") is not None) == outcome[0]
    assert await present(runtime, second, item)


async def test_an_erase_racing_an_upload_and_its_turn_never_takes_the_turns_bytes(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A client adds the bytes then sends its turn while an operator erases the other
    conversation that carried them: whichever commits first, the turn is admitted."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase conversations")
    admitted: list[object] = []

    async def client(scope: PrincipalScope, data: bytes) -> None:
        item = await added(runtime, scope, data)
        admitted.append(await runtime.turns.admit(carrying(scope, item), owner=live, ttl_s=600))

    for n in range(6):
        first = await conversation(resolver, f"a{n}", f"user{n}")
        second = await conversation(resolver, f"b{n}", f"user{n}")
        item = await added(runtime, first, png(n))
        await finished(runtime, first, live, item)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(client, second, png(n))
                group.start_soon(_erase, runtime, ops, first)
        assert await present(runtime, second, item)
    assert [type(outcome) for outcome in admitted] == [Admitted] * 6


async def test_two_uploads_of_the_same_bytes_are_two_marks(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The person uploads one file for two conversations; the second conversation's turn
    takes it and that conversation is erased before the first one's turn comes: the
    first upload still holds the bytes, and its turn is admitted with them."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    b = await conversation(resolver, "b", "alice")
    c = await conversation(resolver, "c", "alice")
    item = await added(runtime, b, png(1))
    await added(runtime, c, png(1))
    await finished(runtime, c, live, item)
    assert await _erase(runtime, ops, c) == 0
    assert isinstance(await runtime.turns.admit(carrying(b, item), owner=live, ttl_s=600), Admitted)
    assert await present(runtime, b, item)
    # B's session references them now: a reclaim past the grace period leaves them.
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=0) == 0
    assert await present(runtime, b, item)


async def test_an_erase_deletes_bytes_its_own_turns_each_uploaded_again(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The command line adds a file again for every turn that attaches it (and for each
    ``--attach`` of it): each admitted turn takes its own upload, so erasing the only
    session that carried the bytes deletes them, not a day later."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase the conversation")
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    await finished(runtime, alice, live, item)
    await added(runtime, alice, png(1))
    await finished(runtime, alice, live, item)
    for _ in range(2):
        await added(runtime, alice, png(1))
    await finished(runtime, alice, live, item, item)
    assert await _erase(runtime, ops, alice) == 1
    assert not await present(runtime, alice, item)


async def test_a_deferred_input_written_after_an_upload_leaves_that_upload_pending(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A turn admitted with its input deferred took the bytes at admission; the person
    uploads them again for another conversation; the turn then writes its input (naming
    them again). That write takes nothing: erasing the turn's session before the other
    conversation's turn comes keeps the bytes for it."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    second = await conversation(resolver, "c2", "alice")
    item = await added(runtime, first, png(1))
    admitted = await runtime.turns.admit(
        carrying(first, item, deferred=True), owner=live, ttl_s=600
    )
    assert isinstance(admitted, Admitted)
    await added(runtime, second, png(1))
    stored = ModelMessage("user", "what is this?", attachments=(AttachmentPart(item),))
    await runtime.turns.append_message(
        admitted.lease,
        event_seq=admitted.next_event_seq,
        message=stored,
        event="input.persisted",
        detail={"normalized": False},
    )
    await finish(runtime, admitted, admitted.next_event_seq + 1)
    assert await _erase(runtime, ops, first) == 0
    assert isinstance(
        await runtime.turns.admit(carrying(second, item), owner=live, ttl_s=600), Admitted
    )
    assert await present(runtime, second, item)


async def test_bytes_added_again_for_a_turn_that_never_came_are_reclaimed_after_the_erase(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The erase kept them for the second upload's turn; no turn took them: the grace
    period reclaims them as any upload no turn took."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    first = await conversation(resolver, "c1", "alice")
    item = await added(runtime, first, png(1))
    await finished(runtime, first, live, item)
    await added(runtime, first, png(1))
    assert await _erase(runtime, ops, first) == 0
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 0
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 1
    assert not await present(runtime, first, item)


async def test_a_reclaim_keeps_referenced_bytes_and_deletes_the_rest(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """Added again after a finished turn took them, for a turn that never came: the
    pending upload ends, the bytes stay for the session referencing them (until its
    erase deletes them). Bob's copy of the same bytes, referenced by nothing, goes."""
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    alice = await conversation(resolver, "c1", "alice")
    bob = await conversation(resolver, "c2", "bob")
    item = await added(runtime, alice, PNG)
    await finished(runtime, alice, live, item)
    await added(runtime, alice, PNG)
    await added(runtime, bob, PNG)
    await added(runtime, bob, PNG)
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 1
    assert await present(runtime, alice, item)
    assert not await present(runtime, bob, item)
    assert await runtime.attachments.reclaim(grace_s=0) == 0
    assert await _erase(runtime, ops, alice) == 1
    assert not await present(runtime, alice, item)


async def test_a_reclaim_pass_counts_what_it_deleted_so_the_next_pass_runs(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """The oldest due uploads are of bytes a session references: ending them deletes
    nothing, and does not take a pass's batch from the uploads whose bytes go (the
    retention daemon stops at the first pass deleting less than a batch)."""
    assert isinstance(runtime, RowStore)
    alice = await conversation(resolver, "c1", "alice")
    held = [await added(runtime, alice, png(n)) for n in range(3)]
    await finished(runtime, alice, live, *held)
    for n in range(3):
        await added(runtime, alice, png(n))
    unheld = [await added(runtime, alice, png(n)) for n in range(3, 5)]
    await runtime.write(
        lambda c: c.execute(
            "UPDATE attachments_pending SET added_at = CASE WHEN ref IN (?, ?, ?) THEN ? "
            "ELSE '2001-01-01T00:00:00.000Z' END",
            [*(item.ref for item in held), LONG_AGO],
        )
    )
    assert await runtime.attachments.reclaim(grace_s=0, limit=2) == 2
    assert not any([await present(runtime, alice, item) for item in unheld])
    assert all([await present(runtime, alice, item) for item in held])
    assert await runtime.attachments.reclaim(grace_s=0, limit=2) == 0
    pending = await runtime.read(
        lambda c: c.execute("SELECT count(*) FROM attachments_pending").fetchone()
    )
    assert pending[0] == 0


def _reclaim_before_references(conn: Any) -> int:
    """The statements of the reclaim of the version before ``attachment_refs``: every due
    pending upload ends and its bytes go, whatever else holds them."""
    due = conn.execute(
        "SELECT principal_id, ref FROM attachments_pending WHERE added_at < ? "
        "ORDER BY added_at LIMIT ?",
        ["2100-01-01T00:00:00.000Z", 100],
    ).fetchall()
    deleted = 0
    for principal_id, ref in due:
        conn.execute(
            "DELETE FROM attachments_pending WHERE principal_id = ? AND ref = ?",
            [principal_id, ref],
        )
        deleted += conn.execute(
            "DELETE FROM attachments WHERE principal_id = ? AND ref = ?", [principal_id, ref]
        ).rowcount
    return int(deleted)


async def test_a_host_of_an_older_version_cannot_delete_bytes_a_session_references(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """A Host of the version before references still serving after the upgrade (beside
    this one, or sharing its PostgreSQL database) deleted the bytes of every due upload:
    the schema refuses deleting bytes a session references, so its pass fails with
    everything kept, while this version's reclaim and erase, which delete bytes only once
    nothing holds them, go on."""
    assert isinstance(runtime, RowStore)
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    alice = await conversation(resolver, "c1", "alice")
    item = await added(runtime, alice, png(1))
    await finished(runtime, alice, live, item)
    await added(runtime, alice, png(1))  # again, for a turn that never came
    other = await added(runtime, alice, png(2))
    with pytest.raises(StoreError, match="references are kept"):
        await runtime.write(_reclaim_before_references)
    with pytest.raises(StoreError, match="references are kept"):
        await runtime.write(lambda c: c.execute("DELETE FROM attachments"))
    assert await present(runtime, alice, item)
    assert await present(runtime, alice, other)
    pending = await runtime.read(
        lambda c: c.execute("SELECT count(*) FROM attachments_pending").fetchone()
    )
    assert pending[0] == 2
    await age(runtime)
    assert await runtime.attachments.reclaim(grace_s=HOUR) == 1
    assert await present(runtime, alice, item)
    assert not await present(runtime, alice, other)
    assert await _erase(runtime, ops, alice) == 1
    assert not await present(runtime, alice, item)


_SCAN = re.compile(r"^SCAN (messages|m)\b")


@pytest.mark.sqlite_only("the statements the SQLite writer runs and their query plans")
async def test_an_erase_reads_no_other_sessions_messages(
    runtime: RuntimeStore, resolver: AuthorityResolver, live: LeaseOwner
) -> None:
    """Which bytes another session holds is read by key (``attachment_refs``): no
    statement of the erase walks the messages table, however many other sessions have."""
    assert isinstance(runtime, RowStore)
    ops = await resolver.operator_issuer().issue("ops", reason="erase one conversation")
    scopes = [await conversation(resolver, f"c{n}", "alice") for n in range(3)]
    item = await added(runtime, scopes[0], png(1))
    for scope in scopes:
        await finished(runtime, scope, live, item)
    traced: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(traced.append)

    await runtime.write(trace)
    try:
        assert await _erase(runtime, ops, scopes[0]) == 0
    finally:
        await runtime.write(lambda conn: conn.set_trace_callback(None))
    reads = [sql for sql in traced if "messages" in sql]
    assert any("DELETE FROM messages" in sql for sql in reads)

    def plans(conn: sqlite3.Connection) -> list[tuple[str, list[str]]]:
        return [
            (sql, [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")])
            for sql in reads
        ]

    scans = [
        (sql, plan)
        for sql, plan in await runtime.read(plans)
        if any(_SCAN.match(step) for step in plan)
    ]
    assert scans == []
