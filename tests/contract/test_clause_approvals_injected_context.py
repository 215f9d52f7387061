"""Clause: what the embedder injected for a turn is the turn's for all of it, across approvals.

``TurnRequest.injected_context`` (a guardrail, retrieved documents) is a layer of every
model request of the turn ("contributions"). A turn that pauses on an approval is
continued by whichever process answers it, after any restart: its admission keeps the
injected context whole (a ``context.injected`` event, same transaction) and the
continuation reads it back, so the model calls after the approval get the same layer.
A turn with no injected context writes nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidTurnRequest
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import MAX_INJECTED_CONTEXT_CHARS, MAX_INJECTED_CONTEXT_ITEMS, ModelRequest
from tests.contract.test_effects_approval_flow import Stamps, host_config, stamp_call
from tests.hosts import event_kinds, request

pytestmark = pytest.mark.anyio

GUARDRAIL = "Guardrail: never stamp anything labelled 'launch'."
DOCUMENT = "Retrieved: the stamp ledger is audited every Tuesday."
INJECTED = (GUARDRAIL, DOCUMENT)


def system_text(req: ModelRequest) -> str:
    return "\n".join(m.content for m in req.messages if m.role == "system")


async def test_every_continuation_in_any_host_sends_the_injected_context(
    tmp_path: Path,
) -> None:
    """Paused in one Host, answered from a fresh Host on the same database (the first is
    closed: nothing of the turn is in memory anywhere), the continuation pauses again and
    a third Host answers that: every model request of the turn has the injected layer."""
    config = host_config(tmp_path)
    stamps = Stamps(tmp_path / "stamps.txt")
    seen: list[ModelRequest] = []

    async def run(steps: list[Reply | CallTools], work: Any) -> Any:
        model = ScriptedModel(steps)
        async with Host.open(config, capabilities=capabilities(model, tools=[stamps.tool])) as host:
            operator = await host.operator("ops", reason="answer approvals")
            result = await work(host, operator)
        seen.extend(model.requests)
        return result

    first = await run(
        [stamp_call("one")],
        lambda host, _: host.turns.run(request("stamp it", injected_context=INJECTED)),
    )
    assert first.outcome == "needs_user", first.error
    assert first.pending_approval is not None
    again = await run(
        [stamp_call("two")],
        lambda host, operator: host.approvals.answer(
            first.pending_approval, "approve_once", by=operator
        ),
    )
    assert again.outcome == "needs_user", again.error
    assert again.pending_approval is not None
    last = await run(
        [Reply("done")],
        lambda host, operator: host.approvals.answer(
            again.pending_approval, "approve_once", by=operator
        ),
    )
    assert last.outcome == "completed", last.error
    assert stamps.lines() == ["one", "two"]
    assert len(seen) == 3
    for sent in seen:
        assert GUARDRAIL in system_text(sent)
        assert DOCUMENT in system_text(sent)
    # The same layer, in the same place, with the same budget: the head is unchanged.
    heads = [[m for m in sent.messages if m.role == "system"] for sent in seen]
    assert heads == [heads[0]] * 3


async def test_the_admission_keeps_injected_context_and_nothing_without_it(
    tmp_path: Path,
) -> None:
    """The injected context is recorded by the admission transaction (with turn.started);
    a turn with none records exactly what it did before."""
    model = ScriptedModel([Reply("plain"), Reply("injected")])
    async with Host.open(host_config(tmp_path), capabilities=capabilities(model)) as host:
        plain = await host.turns.run(request("hello"))
        injected = await host.turns.run(request("hello again", injected_context=INJECTED))
        plain_kinds = await event_kinds(host, plain.turn_id)
        injected_kinds = await event_kinds(host, injected.turn_id)
        plain_context = (await host.store.turns.carried_context(plain.turn_id)).injected
        kept = (await host.store.turns.carried_context(injected.turn_id)).injected
        started_at = await host.store.read(
            lambda c: c.execute(
                "SELECT kind, at FROM turn_events WHERE turn_id = ? AND seq <= 3 ORDER BY seq",
                [injected.turn_id],
            ).fetchall()
        )
    assert plain.outcome == injected.outcome == "completed"
    assert plain_kinds == [
        "turn.started",
        "input.persisted",
        "provider.completed",
        "turn.completed",
    ]
    assert plain_context == ()
    assert injected_kinds == [
        "turn.started",
        "input.persisted",
        "context.injected",
        "provider.completed",
        "turn.completed",
    ]
    assert kept == INJECTED
    # One transaction: the admission's events share its timestamp.
    assert [row[0] for row in started_at] == injected_kinds[:3]
    assert len({row[1] for row in started_at}) == 1
    assert GUARDRAIL in system_text(model.requests[1])
    assert GUARDRAIL not in system_text(model.requests[0])


@pytest.mark.parametrize(
    "context",
    [
        ("note",) * (MAX_INJECTED_CONTEXT_ITEMS + 1),
        ("x" * 100_000,) * (MAX_INJECTED_CONTEXT_CHARS // 100_000 + 1),
    ],
    ids=["entries", "chars"],
)
def test_injected_context_is_bounded_as_the_turn_keeps_it(context: tuple[str, ...]) -> None:
    with pytest.raises(InvalidTurnRequest, match="injected_context is at most"):
        request("hello", injected_context=context)


async def test_a_turn_that_leaves_the_snapshot_out_is_continued_without_it(
    tmp_path: Path,
) -> None:
    """``bootstrap=False`` on a later turn of a session that has its AGENTS.md snapshot:
    the continuation of the approval it pauses on leaves the snapshot out too."""
    notes = "Workspace notes: stamps are blue."
    (tmp_path / "AGENTS.md").write_text(notes)
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([Reply("first"), stamp_call(), Reply("done")])
    caps = capabilities(model, tools=[stamps.tool])
    async with Host.open(host_config(tmp_path), capabilities=caps) as host:
        await host.turns.run(request("hello"))  # the session takes its snapshot
        paused = await host.turns.run(request("stamp it", bootstrap=False))
        assert paused.pending_approval is not None
        carried = await host.store.turns.carried_context(paused.turn_id)
        assert (carried.injected, carried.bootstrap) == ((), False)
    async with Host.open(host_config(tmp_path), capabilities=caps) as host:
        operator = await host.operator("ops", reason="answer")
        done = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert (done.outcome, done.text) == ("completed", "done")
    assert [notes in system_text(r) for r in model.requests] == [True, False, False]
    assert stamps.lines() == ["one"]
