"""Clause: ``principal_scope.owner_lookup_denied`` for every owned lookup that answers not-found.

"`principal_scope.owner_lookup_denied` audit rows for every owned lookup that
answers not-found (resume, approvals, inspect), with the real reason."

Each lookup kind is tried with a missing id and with ids the caller may not
see; every refusal is the same external not-found answer (no reason in it),
and every one leaves exactly one Host-only audit row naming the real reason.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import NotFoundOrUnauthorized, TurnRejected
from hostkit.host import Host
from hostkit.inspect import budget_view, context_view
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, PrincipalScope, ResumeSession
from tests.contract.test_effects_approval_flow import Stamps, approval_host, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio

DENIED = "principal_scope.owner_lookup_denied"
REASONS = ("missing", "unauthorized", "other_principal", "other_session")


async def denials(host: Host, operator: PrincipalScope, after: int) -> list[tuple[str, str]]:
    rows = await host.store.read_audit(operator, kind=DENIED, after_id=after, limit=100)
    return [(row.subject or "", row.reason or "") for row in rows]


async def last_audit_id(host: Host, operator: PrincipalScope) -> int:
    rows = await host.store.read_audit(operator, limit=500)
    return rows[-1].audit_id if rows else 0


async def refused_as_not_found(attempt: Awaitable[Any], kind: str) -> None:
    """The external answer: the one not-found error, with no reason in it."""
    with pytest.raises(NotFoundOrUnauthorized) as caught:
        await attempt
    assert str(caught.value) == f"{kind} not found"
    for reason in REASONS[1:]:
        assert reason not in str(caught.value)


class World:
    """Alice's paused call in a room bob shares; carol in a room of her own."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def build(self) -> World:
        host = self.host
        paused = await host.turns.run(request("stamp it", conversation="room", principal="alice"))
        assert paused.pending_approval is not None
        self.approval_id = paused.pending_approval
        self.alice_turn = paused.turn_id
        carol_turn = await host.turns.run(request("hi", conversation="own", principal="carol"))
        self.carol_turn = carol_turn.turn_id
        self.alice = await host.authority.for_conversation(
            ConversationFacts("test", "room", "alice")
        )
        self.bob = await host.authority.for_conversation(ConversationFacts("test", "room", "bob"))
        self.carol = await host.authority.for_conversation(
            ConversationFacts("test", "own", "carol")
        )
        self.operator = await host.operator("ops", reason="read the audit")
        return self


async def world(host: Host) -> World:
    return await World(host).build()


@pytest.fixture
def stamps(tmp_path: Path) -> Stamps:
    return Stamps(tmp_path / "stamps.txt")


def model() -> ScriptedModel:
    return ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)


async def test_owner_lookup_denied_approval_lookups_audit_the_real_reason(
    tmp_path: Path, stamps: Stamps
) -> None:
    async with approval_host(tmp_path, model(), stamps) as host:
        w = await world(host)
        start = await last_audit_id(host, w.operator)
        a = w.approval_id
        cases = [
            (host.approvals.get(w.bob, a), "other_principal"),
            (host.approvals.answer(a, "approve_once", by=w.bob), "other_principal"),
            (host.approvals.resume(a, by=w.bob), "other_principal"),
            (host.approvals.get(w.carol, a), "unauthorized"),
            (host.approvals.answer(a, "deny", by=w.carol), "unauthorized"),
            (host.approvals.resume(a, by=w.carol), "unauthorized"),
            (host.approvals.get(w.alice, "apr_missing"), "missing"),
            (host.approvals.answer("apr_missing", "deny", by=w.alice), "missing"),
            (host.approvals.resume("apr_missing", by=w.alice), "missing"),
        ]
        for attempt, _ in cases:
            await refused_as_not_found(attempt, "approval")
        subjects = [f"approval:{a}"] * 6 + ["approval:apr_missing"] * 3
        assert await denials(host, w.operator, start) == list(
            zip(subjects, [reason for _, reason in cases], strict=True)
        )
    assert stamps.lines() == []


async def test_owner_lookup_denied_session_resume_audits_the_real_reason(
    tmp_path: Path, stamps: Stamps
) -> None:
    async with approval_host(tmp_path, model(), stamps) as host:
        w = await world(host)
        start = await last_audit_id(host, w.operator)
        theirs = w.carol.session_id or ""
        alice_facts = ConversationFacts("test", "room", "alice")
        await refused_as_not_found(
            host.authority.for_conversation(alice_facts, session=theirs), "session"
        )
        await refused_as_not_found(
            host.authority.for_conversation(alice_facts, session="ses_missing"), "session"
        )
        # Through a turn request: rejected before it starts, and audited the same way.
        for target in (theirs, "ses_gone"):
            with pytest.raises(TurnRejected) as rejected:
                await host.turns.run(
                    request("back", conversation="room", session=ResumeSession(target))
                )
            assert "unauthorized" not in str(rejected.value)
        assert await denials(host, w.operator, start) == [
            (f"session:{theirs}", "unauthorized"),
            ("session:ses_missing", "missing"),
            (f"session:{theirs}", "unauthorized"),
            ("session:ses_gone", "missing"),
        ]
        # The binding did not move: alice is still in her own session.
        again = await host.authority.for_conversation(alice_facts)
        assert again.session_id == w.alice.session_id


async def test_owner_lookup_denied_inspect_queries_audit_the_real_reason(
    tmp_path: Path, stamps: Stamps
) -> None:
    async with approval_host(tmp_path, model(), stamps) as host:
        w = await world(host)
        start = await last_audit_id(host, w.operator)
        mine = w.alice.session_id or ""
        theirs = w.carol.session_id or ""
        cases: list[tuple[Awaitable[Any], str, str]] = [
            (context_view(host, w.alice, session_id=theirs), "session", f"session:{theirs}"),
            (context_view(host, w.alice, turn_id=w.carol_turn), "turn", f"turn:{w.carol_turn}"),
            (budget_view(host, w.alice, theirs), "session", f"session:{theirs}"),
            (context_view(host, w.alice, session_id="ses_nope"), "session", "session:ses_nope"),
            (context_view(host, w.alice, turn_id="turn_nope"), "turn", "turn:turn_nope"),
            (budget_view(host, w.alice, "ses_nope"), "session", "session:ses_nope"),
            # The operator sees both turns, but not one under the other's session id.
            (
                context_view(host, w.operator, session_id=mine, turn_id=w.carol_turn),
                "turn",
                f"turn:{w.carol_turn}",
            ),
        ]
        for attempt, kind, _ in cases:
            await refused_as_not_found(attempt, kind)
        reasons = ["unauthorized"] * 3 + ["missing"] * 3 + ["other_session"]
        assert await denials(host, w.operator, start) == list(
            zip([subject for _, _, subject in cases], reasons, strict=True)
        )
