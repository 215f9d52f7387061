"""Turns clause: a turn cut off by the Host or its caller before its work began is voided.

Nothing was sent to the model and no effect ran: the terminal record stays
(``cancelled``, ``voided``), its conversation is sent no "send it again"
notice, and its request id is free, so a retry of the same request (the
inbound's next attempt, on this Host or another) runs it. A turn cut off
inside its model call keeps today's rule (``LOST_NOTICE``; the record answers
a retry): tests/contract/test_clause_delivery_cut_turns.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.freeze import thaw
from hostkit.store import LOST_NOTICE, Admitted, LeaseOwner, RuntimeStore, TurnAdmission
from hostkit.testing import Reply
from hostkit.types import (
    ConversationFacts,
    ModelMessage,
    ModelRequest,
    TurnResult,
    new_id,
)
from tests.contract.test_clause_delivery_cut_turns import blocked_host, routed
from tests.hosts import turn_rows

pytestmark = pytest.mark.anyio


class Answers:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: ModelRequest) -> Reply:
        self.calls += 1
        return Reply("the answer")


async def test_a_turn_cut_off_before_its_model_call_is_voided_and_its_retry_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Answers()
    async with blocked_host(tmp_path, model) as host:  # type: ignore[arg-type]
        entered = anyio.Event()
        held = [True]
        context = host.turns._context
        prepare = context.prepare

        async def held_prepare(request: Any) -> Any:
            if held[0]:
                entered.set()
                await anyio.sleep_forever()
            return await prepare(request)

        monkeypatch.setattr(context, "prepare", held_prepare)
        request = routed("c1")
        async with anyio.create_task_group() as group:
            group.start_soon(host.turns.run, request)
            await entered.wait()
            group.cancel_scope.cancel()  # what the inbox worker does at the end of its grace
        assert model.calls == 0
        assert await host.store.delivery.intents() == ()  # no "please send it again"
        [(voided_id, status)] = await turn_rows(host)
        assert status == "cancelled"
        held[0] = False
        result = await host.turns.run(request)  # the same request id runs, once
        assert (result.outcome, result.text, model.calls) == ("completed", "the answer", 1)
        assert [s for _, s in await turn_rows(host)] == ["cancelled", "completed"]
        assert result.turn_id != voided_id
        assert [thaw(i.payload) for i in await host.store.delivery.intents()] == [
            {"text": "the answer"}
        ]
        again = await host.turns.run(request)  # and stays idempotent afterwards
        assert (again.turn_id, model.calls) == (result.turn_id, 1)
        # The voided turn's input left the transcript: the message is there once.
        roles = await host.store.read(
            lambda c: c.execute(
                "SELECT role, turn_id FROM messages WHERE session_id = ? ORDER BY seq",
                [result.session_id],
            ).fetchall()
        )
        assert [tuple(r) for r in roles] == [
            ("user", result.turn_id),
            ("assistant", result.turn_id),
        ]
        # Its record stays, as audit: cancelled, voided, the request it was admitted for.
        voided = await host.store.read(
            lambda c: c.execute(
                "SELECT request_id, result FROM turns WHERE turn_id = ?", [voided_id]
            ).fetchone()
        )
        assert voided[0] == f"void:{voided_id}"
        assert json.loads(voided[1])["request_id"] == request.request_id


async def test_a_turn_that_recorded_work_is_never_voided(
    runtime: RuntimeStore, resolver: AuthorityResolver
) -> None:
    """The store checks the claim: a result marked voided for a turn that recorded more
    than its admission (here its model's answer) ends as cut off, with the notice, and
    keeps its request id."""
    scope = await resolver.for_conversation(
        ConversationFacts(channel="slack-acme", conversation_key="c9", principal_key="U1")
    )
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "voided-suite")
    admission = TurnAdmission(
        turn_id=new_id("turn"),
        request_id=new_id("req"),
        principal_id=scope.principal_id,
        core_id="assistant",
        core_revision="rev",
        generation=1,
        session=scope.session_id or "",
        trace_id=new_id("trace"),
        route={"channel": "slack-acme", "conversation": "c9", "reply": {"channel": "C1"}},
        input=ModelMessage(role="user", content="hello"),
    )
    admitted = await runtime.turns.admit(admission, owner=owner, ttl_s=60)
    assert isinstance(admitted, Admitted)
    lease = admitted.lease
    await runtime.turns.append_message(
        lease,
        event_seq=admitted.next_event_seq,
        message=ModelMessage(role="assistant", content="half an answer"),
        event="provider.completed",
    )
    claimed = TurnResult(
        request_id=admission.request_id,
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        core_id="assistant",
        core_revision="rev",
        outcome="cancelled",
        text="",
        cancelled_by="host",
        voided=True,
    )
    ended = await runtime.turns.finish(
        lease, claimed, event_seq=admitted.next_event_seq + 1, route=admission.route
    )
    assert not ended.voided
    intents = await runtime.delivery.intents()
    assert [thaw(i.payload) for i in intents] == [{"text": LOST_NOTICE}]
    assert await runtime.turns.find(scope.principal_id, admission.request_id) is not None
