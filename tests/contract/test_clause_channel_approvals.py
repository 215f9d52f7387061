"""Clause: channel approvals — an ``ask`` in a channel conversation is answered by a reply.

"An ``ask`` in a channel conversation sends an approval prompt through
delivery (with a short code), and the user's reply (``approve <code>`` /
``deny <code>``, or a Slack button action) arrives as an inbound command that
answers the pending approval — with the same authority rules as every other
answer."

A real Host on SQLite with a scripted model and an effect with an observable
side effect (one line per run); inbounds go through the Host's own inbox and
worker. The command's outcome is read from the Host's own command runner,
wrapped to record what it returned.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from hostkit.effects import ApprovalLedger, ToolContext, tool
from hostkit.host import Host
from hostkit.host._inbound import InboundCommands, reply_route
from hostkit.store import Admitted, ApprovalAnswer, LeaseOwner, TurnAdmission
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import (
    ClaimedInbound,
    ConversationFacts,
    InboundResult,
    ModelRequest,
    approval_code,
    new_id,
)
from tests.contract.test_clause_inbound_route import (
    SLACK,
    accept,
    channel_host,
    inbound,
    outbox,
    turn_of,
)
from tests.contract.test_effects_approval_flow import ASK, Stamps, stamp_call
from tests.contract.test_store_turns import dead_like

pytestmark = pytest.mark.anyio

ALICE = {"conversation": "T1:C1:U1", "principal": "U1"}
BOB = {"conversation": "T1:C1:U2", "principal": "U2"}  # same Slack channel, another person
ROUTE = {"channel": SLACK, "conversation": "T1:C1:U1", "reply": {"channel": "C1"}}


def one_part(text: str, turn_id: str | None) -> dict[str, Any]:
    """The payload of a one-part answer of turn ``turn_id``."""
    return {"text": text, "turn_id": turn_id, "part": 1, "parts": 1}


def script(request: ModelRequest) -> Any:
    """Stamp when asked to; after the stamp's result (or any other message), answer."""
    last = request.messages[-1]
    if last.role == "tool":
        return Reply(f"done: {last.content}")
    if last.role == "user" and last.content == "stamp it":
        return stamp_call()
    return Reply("nothing to stamp")


class Commands:
    """The Host's command runner, recording each result it returned."""

    def __init__(self, host: Host) -> None:
        self._runner = InboundCommands(host.approvals, host.authority, host.store)
        self.results: list[InboundResult] = []

    async def run(self, claimed: ClaimedInbound) -> InboundResult:
        result = await self._runner.run(claimed)
        self.results.append(result)
        return result


async def paused(host: Host) -> tuple[str, str]:
    """Alice asks for a stamp in her Slack conversation; (approval id, paused turn id)."""
    inbound_id = await accept(host, inbound("stamp it", **ALICE))
    assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
    turn_id = await turn_of(host, inbound_id)
    state = await host.store.read(
        lambda c: c.execute(
            "SELECT status, approval_id FROM approvals WHERE turn_id = ?", [turn_id]
        ).fetchall()
    )
    ((status, approval_id),) = state
    assert status == "pending"
    return approval_id, turn_id


async def reply(
    host: Host, text: str, commands: Commands, *, kind: str = "command", **who: str
) -> tuple[str, InboundResult | None]:
    """A reply arrives on the channel and is handled; (inbound id, the command's result)."""
    before = len(commands.results)
    inbound_id = await accept(host, inbound(text, kind=kind, **(who or ALICE)))
    assert await host.inbox_worker(idle_poll_s=0.05, run_command=commands.run).drain() == 1
    results = commands.results[before:]
    return inbound_id, (results[0] if results else None)


async def status_of(host: Host, approval_id: str) -> str:
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT status FROM approvals WHERE approval_id = ?", [approval_id]
        ).fetchall()
    )
    return str(rows[0][0])


async def answered_elsewhere(host: Host, approval_id: str) -> ApprovalAnswer:
    """Alice's approve-once recorded as another process records it, with no continuation."""
    alice = await host.authority.for_conversation(
        ConversationFacts(SLACK, ALICE["conversation"], ALICE["principal"])
    )
    answered = await ApprovalLedger(host.store).answer(
        alice, approval_id, decision="approve_once", fingerprint=None
    )
    assert answered.accepted
    return answered


def host_for(tmp_path: Path, stamps: Stamps) -> Any:
    return channel_host(
        tmp_path, ScriptedModel([script], repeat_last=True), tools=[stamps.tool], policy=ASK
    )


async def test_an_ask_in_a_routed_conversation_writes_an_approval_prompt_with_its_code(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        approval_id, turn_id = await paused(host)
        prompts = [(r, p) for r, p in await outbox(host, turn_id) if "approval" in p]
        ((route, payload),) = prompts
        code = approval_code(approval_id)
        assert route == ROUTE
        assert payload["approval"]["approval_id"] == approval_id
        assert payload["approval"]["code"] == code
        assert payload["approval"]["tool"] == "files.stamp"
        assert f"approve {code}" in payload["text"]
        assert f"deny {code}" in payload["text"]
        assert stamps.lines() == []


async def test_approve_by_the_same_principal_runs_once_and_answers_on_the_same_route(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        # The word in any case, the code as shown: the transport normalises, the Host agrees.
        inbound_id, result = await reply(host, f"Approve {approval_code(approval_id)}", commands)
        assert result is not None
        assert (result.kind, result.outcome) == ("command", "completed")
        assert stamps.lines() == ["one"]
        assert await status_of(host, approval_id) == "executed"
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert (record.result_kind, record.turn_id) == ("command", result.turn_id)
        # The continuation's answer is delivered where the paused turn's was asked.
        done = one_part("done: stamped one", result.turn_id)
        assert await outbox(host, result.turn_id or "") == [(ROUTE, done)]


async def test_the_default_worker_answers_commands_and_the_answer_is_routed(
    tmp_path: Path,
) -> None:
    """No wrapper: the Host's own worker wiring takes a command to the approval."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        approval_id, _ = await paused(host)
        inbound_id = await accept(
            host, inbound(f"approve {approval_code(approval_id)}", kind="command", **ALICE)
        )
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert record.result_kind == "command"
        assert record.turn_id is not None
        assert stamps.lines() == ["one"]
        assert [route for route, _ in await outbox(host, record.turn_id)] == [ROUTE]


async def test_deny_by_the_same_principal_denies_and_the_model_is_told(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        _, result = await reply(host, f"deny {approval_code(approval_id)}", commands)
        assert result is not None
        assert result.outcome == "completed"
        assert stamps.lines() == []
        assert await status_of(host, approval_id) == "denied"
        ((route, payload),) = await outbox(host, result.turn_id or "")
        assert route == ROUTE
        assert payload["text"].startswith("done:")
        assert "stamped" not in payload["text"]


async def test_another_principal_a_wrong_code_and_an_answered_code_answer_nothing(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        code = approval_code(approval_id)
        wrong = "AAAAAA" if code != "AAAAAA" else "BBBBBB"
        _, by_bob = await reply(host, f"approve {code}", commands, **BOB)
        _, by_wrong_code = await reply(host, f"approve {wrong}", commands)
        # Someone else's approval and an unknown code: one result, nothing told apart.
        assert by_bob is not None
        assert by_bob == by_wrong_code
        assert (by_bob.outcome, by_bob.turn_id) == ("not_found", None)
        assert await status_of(host, approval_id) == "pending"
        assert stamps.lines() == []
        # Alice answers; a different answer to the same code afterwards changes nothing.
        _, approved = await reply(host, f"approve {code}", commands)
        assert approved is not None
        assert approved.outcome == "completed"
        _, late_deny = await reply(host, f"deny {code}", commands)
        assert late_deny is not None
        assert (late_deny.outcome, late_deny.turn_id) == ("refused", None)
        assert "already" in late_deny.detail
        # Bob still cannot tell the answered approval exists.
        _, bob_again = await reply(host, f"approve {code}", commands, **BOB)
        assert bob_again == by_bob
        assert await status_of(host, approval_id) == "executed"
        assert stamps.lines() == ["one"]


async def replies(host: Host, inbound_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(route, payload) of the outbox intents replying to command inbound ``inbound_id``."""
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT route, payload, turn_id FROM outbox WHERE inbound_id = ? ORDER BY id",
            [inbound_id],
        ).fetchall()
    )
    assert all(turn_id is None for _, _, turn_id in rows)
    return [(json.loads(route), json.loads(payload)) for route, payload, _ in rows]


async def test_a_command_that_ran_no_turn_is_answered_on_its_senders_route(
    tmp_path: Path,
) -> None:
    """A code that matched nothing and a refused answer are said to whoever typed them, in
    their own conversation; an answer that ran a continuation is answered by that turn."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        approval_id, _ = await paused(host)
        code = approval_code(approval_id)
        wrong = "AAAAAA" if code != "AAAAAA" else "BBBBBB"
        by_bob = await accept(host, inbound(f"approve {code}", kind="command", **BOB))
        by_wrong = await accept(host, inbound(f"approve {wrong}", kind="command", **ALICE))
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 2
        ((bob_route, bob_said),) = await replies(host, by_bob)
        ((alice_route, alice_said),) = await replies(host, by_wrong)
        # The same words for someone else's code and an unknown one: nothing told apart.
        assert bob_said == alice_said
        assert bob_said["text"].startswith("No pending approval of yours has this code")
        assert alice_route == ROUTE
        assert bob_route["conversation"] == BOB["conversation"]
        assert await status_of(host, approval_id) == "pending"

        approve = await accept(host, inbound(f"approve {code}", kind="command", **ALICE))
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        late_deny = await accept(host, inbound(f"deny {code}", kind="command", **ALICE))
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        assert await replies(host, approve) == []  # its continuation's answer is the reply
        ((route, said),) = await replies(host, late_deny)
        assert route == ROUTE
        # In a chat's words: the code the sender typed, no internal ids.
        assert said["text"] == f"Approval {code}: it was answered already; nothing more runs."
        assert stamps.lines() == ["one"]


async def test_a_command_handled_again_is_replied_to_once(tmp_path: Path) -> None:
    """A crash after the reply was written, before the inbound was recorded: the command
    runs again and its reply is not written a second time."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        await paused(host)
        commands = InboundCommands(
            host.approvals,
            host.authority,
            host.store,
            route=lambda envelope: reply_route(host.config.channels, envelope),
        )
        inbound_id = await accept(host, inbound("approve ZZZZZZ", kind="command", **ALICE))
        (claimed,) = await host.inbox.claim_batch(1)
        first = await commands.run(claimed)
        assert await host.inbox.release(claimed) == 1
        (again,) = await host.inbox.claim_batch(1)
        assert await commands.run(again) == first
        assert first.outcome == "not_found"
        assert len(await replies(host, inbound_id)) == 1


async def test_a_command_in_the_payload_of_a_message_is_not_a_command(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        inbound_id, result = await reply(
            host, f"approve {approval_code(approval_id)}", commands, kind="message"
        )
        assert result is None  # never reached the command runner
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert record.result_kind == "turn"
        # A model turn ran on the text; the approval was not answered by it.
        assert await status_of(host, approval_id) not in ("approved", "executed", "denied")
        assert stamps.lines() == []


async def test_a_retried_command_runs_nothing_twice(tmp_path: Path) -> None:
    """The first attempt answered and ran the continuation, then its worker died before
    recording the inbound's end; the command comes back and only reports that turn."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        inbound_id = await accept(
            host, inbound(f"approve {approval_code(approval_id)}", kind="command", **ALICE)
        )
        (claimed,) = await host.inbox.claim_batch(1)
        first = await commands.run(claimed)
        assert stamps.lines() == ["one"]
        # The crash: the claim is never completed; it comes back (here: released at once).
        assert await host.inbox.release(claimed) == 1
        assert await host.inbox_worker(idle_poll_s=0.05, run_command=commands.run).drain() == 1
        second = commands.results[-1]
        assert (second.turn_id, second.outcome) == (first.turn_id, "completed")
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert (record.result_kind, record.turn_id) == ("command", first.turn_id)
        assert stamps.lines() == ["one"]
        assert len(await outbox(host, first.turn_id or "")) == 1
        # The user sends the same reply again (a new platform event): still nothing runs.
        _, again = await reply(host, f"approve {approval_code(approval_id)}", commands)
        assert again is not None
        assert (again.turn_id, stamps.lines()) == (first.turn_id, ["one"])


async def test_a_command_after_an_answer_whose_continuation_never_ran_runs_it_once(
    tmp_path: Path,
) -> None:
    """The answer was recorded but its continuation never started (the answering process
    died between the two): the retried command runs the continuation, once."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        await answered_elsewhere(host, approval_id)
        assert stamps.lines() == []
        _, result = await reply(host, f"approve {approval_code(approval_id)}", commands)
        assert result is not None
        assert result.outcome == "completed"
        assert stamps.lines() == ["one"]
        done = one_part("done: stamped one", result.turn_id)
        assert await outbox(host, result.turn_id or "") == [(ROUTE, done)]
        _, again = await reply(host, f"approve {approval_code(approval_id)}", commands)
        assert again is not None
        assert (again.turn_id, stamps.lines()) == (result.turn_id, ["one"])


async def test_a_new_command_for_a_continuation_a_dead_host_claimed_is_answered_not_deferred(
    tmp_path: Path,
) -> None:
    """Another Host answered, started the continuation and claimed the call, then died.
    A new reply (attempt 1 of a new inbound) ends that continuation by the lease rule
    first: the call may have run, so the approval is ``indeterminate`` and the reply is
    refused with that reason, instead of waiting hours on a turn nobody runs."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        commands = Commands(host)
        approval_id, _ = await paused(host)
        answered = await answered_elsewhere(host, approval_id)
        approval = answered.approval
        dead = dead_like(await anyio.to_thread.run_sync(LeaseOwner.current, "host-that-died"))
        continuation = await host.store.turns.admit(
            TurnAdmission(
                turn_id=new_id("turn"),
                request_id=f"continue:{approval_id}",
                principal_id=approval.principal_id,
                core_id=approval.core_id,
                core_revision="cfg-test",
                generation=1,
                session=approval.session_id,
                trace_id=new_id("trace"),
            ),
            owner=dead,
            ttl_s=600,
        )
        assert isinstance(continuation, Admitted)
        claim = await host.store.approvals.claim(
            approval_id, session_id=approval.session_id, turn_id=continuation.lease.turn_id
        )
        assert claim is not None
        _, result = await reply(host, f"approve {approval_code(approval_id)}", commands)
        assert result is not None, "deferred: the dead continuation was not ended"
        assert result.outcome == "refused"
        assert "may have run" in result.detail
        assert await status_of(host, approval_id) == "indeterminate"
        assert stamps.lines() == []


async def test_an_answer_from_outside_the_channel_is_still_delivered_to_the_conversation(
    tmp_path: Path,
) -> None:
    """An operator answers from the CLI or a notebook: the continuation's answer goes to
    the route the paused turn captured, not nowhere."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        approval_id, _ = await paused(host)
        operator = await host.operator("ops", reason="ticket 12: approve the stamp")
        result = await host.approvals.answer(approval_id, "approve_once", by=operator)
        assert result.outcome == "completed"
        assert stamps.lines() == ["one"]
        done = one_part("done: stamped one", result.turn_id)
        assert await outbox(host, result.turn_id) == [(ROUTE, done)]


async def test_two_same_answers_racing_run_one_continuation_and_report_it_to_both(
    tmp_path: Path,
) -> None:
    """The second answer loses the conditional write while the first one's continuation
    has not claimed the call yet, and that continuation ends before the second looks
    for it: the second reports the first's turn; no second continuation turn runs."""
    stamps = Stamps(tmp_path / "stamps.txt")
    async with host_for(tmp_path, stamps) as host:
        approval_id, _ = await paused(host)
        alice = await host.authority.for_conversation(
            ConversationFacts(SLACK, ALICE["conversation"], ALICE["principal"])
        )
        ledger = host.approvals._ledger
        recorded = ledger.answer
        second_read, first_recorded, first_done = anyio.Event(), anyio.Event(), anyio.Event()

        async def answer(scope: Any, answered: str, **options: Any) -> ApprovalAnswer:
            # Told apart by task, not by arrival: on a slower store the second answer may
            # reach the write first, and waiting on itself would never end.
            if anyio.get_current_task().name == "first":
                await second_read.wait()  # both read the row as pending
                outcome = await recorded(scope, answered, **options)
                first_recorded.set()
                return outcome
            second_read.set()
            await first_recorded.wait()  # it writes after the first, and loses
            outcome = await recorded(scope, answered, **options)
            await first_done.wait()  # the first's continuation ends meanwhile
            return outcome

        ledger.answer = answer  # type: ignore[method-assign]
        results: dict[str, Any] = {}

        async def answering(name: str) -> None:
            results[name] = await host.approvals.answer(
                approval_id, "approve_once", by=alice, wait_s=0
            )
            if name == "first":
                first_done.set()

        # A deadline for all of it: an ordering this test did not foresee fails, not hangs.
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(answering, "first", name="first")
                group.start_soon(answering, "second", name="second")
        # Both answers wrote: the second lost the conditional write to the first.
        assert second_read.is_set()
        assert first_recorded.is_set()
        first, second = results["first"], results["second"]
        assert first.outcome == second.outcome == "completed"
        assert first.turn_id == second.turn_id
        assert stamps.lines() == ["one"]
        request_ids = await host.store.read(
            lambda c: [r[0] for r in c.execute("SELECT request_id FROM turns ORDER BY id")]
        )
        assert [r for r in request_ids if r.startswith("continue:")] == [f"continue:{approval_id}"]


async def test_a_command_deferred_on_a_running_continuation_waits_from_its_start(
    tmp_path: Path,
) -> None:
    """``approve CODE`` while the continuation another answer started still runs is given
    back for later. Its wait counted from the command's own receipt: one that had waited
    behind an earlier message (received 20 minutes ago) was due again only in 5 minutes,
    holding the conversation's next message that long after the continuation ended."""
    gate = anyio.Event()

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str, api_key: str = "") -> str:
        """Stamp, once the test lets the call finish."""
        await gate.wait()
        return f"stamped {label}"

    model = ScriptedModel([script], repeat_last=True)
    async with channel_host(tmp_path, model, tools=[stamp], policy=ASK) as host:
        approval_id, _ = await paused(host)
        alice = await host.authority.for_conversation(
            ConversationFacts(SLACK, ALICE["conversation"], ALICE["principal"])
        )
        # A deadline for all of it: a worker that did not wind down would hang the run.
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(
                    functools.partial(host.approvals.answer, approval_id, "approve_once", by=alice)
                )
                with anyio.fail_after(10):
                    # The store's state, written by the answering task: polled.
                    while (await host.approvals.get(alice, approval_id)).status != "executed":  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                command = inbound(f"approve {approval_code(approval_id)}", kind="command", **ALICE)
                old = dataclasses.replace(command, received_at=time.time() - 1_200)
                inbound_id = await accept(host, old)
                worker = host.inbox_worker(idle_poll_s=0.05, concurrency=2)
                group.start_soon(worker.run)
                with anyio.fail_after(10):
                    # Given back: ready again, due some time from now (the attempt not spent).
                    while not _deferred(record := await host.inbox.record(inbound_id)):  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                assert record.due_at is not None
                # Due after a quarter of the continuation's own run (and at the latest when its
                # holder's lease runs out), not the 300 s the receipt gave.
                assert record.due_at - time.time() < 10
                gate.set()
                worker.stop()


def _deferred(record: Any) -> bool:
    return bool(record.state == "ready" and record.due_at and record.due_at > time.time())
