"""TurnExecution cancellation: explicit (owner-checked, idempotent) and ambient."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import NotFoundOrUnauthorized, RequestConflict, TurnRejected
from hostkit.host import Host
from hostkit.store._turns import SqlTurnStore
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import ModelRequest, TurnResult
from tests.hosts import event_kinds, open_host, request, turn_rows
from tests.support import facts

pytestmark = pytest.mark.anyio


class Blocked:
    """A provider step that blocks until cancelled."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        self.entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def started_turn_id(host: Host) -> str:
    rows = await turn_rows(host)
    return rows[-1][0]


async def test_explicit_cancel_is_owner_checked_idempotent_and_releases_admission(
    tmp_path: Path,
) -> None:
    blocked = Blocked()
    model = ScriptedModel([blocked, Reply("after cancel")])
    async with open_host(tmp_path, model) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request(conversation="mine")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await blocked.entered.wait()
            turn_id = await started_turn_id(host)
            stranger = await host.authority.for_conversation(facts("other", "mallory", "test"))
            with pytest.raises(NotFoundOrUnauthorized) as wrong_owner:
                await host.turns.cancel(turn_id, stranger)
            with pytest.raises(NotFoundOrUnauthorized) as missing:
                await host.turns.cancel("turn_missing", stranger)
            assert str(wrong_owner.value) == str(missing.value)
            owner = await host.authority.for_conversation(facts("mine", "alice", "test"))
            cancelled = await host.turns.cancel(turn_id, owner)
            assert (cancelled.disposition, cancelled.outcome) == ("cancelled", "cancelled")
        assert results[0].outcome == "cancelled"
        again = await host.turns.cancel(turn_id, owner)
        assert (again.disposition, again.outcome) == ("already_terminal", "cancelled")
        assert (await event_kinds(host, turn_id)).count("turn.cancelled") == 1
        # Admission was released: the next turn of the same session runs.
        follow = await host.turns.run(request(conversation="mine"))
        assert follow.outcome == "completed"


async def test_cancel_of_a_finished_turn_reports_its_outcome(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        result = await host.turns.run(request(conversation="c"))
        owner = await host.authority.for_conversation(facts("c", "alice", "test"))
        answer = await host.turns.cancel(result.turn_id, owner)
    assert (answer.disposition, answer.outcome) == ("already_terminal", "completed")


async def test_operator_may_cancel_any_owned_turn(tmp_path: Path) -> None:
    blocked = Blocked()
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request())
            await blocked.entered.wait()
            operator = await host.operator("ops", reason="stuck turn")
            answer = await host.turns.cancel(await started_turn_id(host), operator)
        assert answer.disposition == "cancelled"


async def test_ambient_cancellation_records_cancelled_then_reraises(tmp_path: Path) -> None:
    blocked = Blocked()
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:
        reraised = False
        async with anyio.create_task_group() as tg:

            async def caller() -> None:
                nonlocal reraised
                try:
                    await host.turns.run(request())
                except anyio.get_cancelled_exc_class():
                    reraised = True
                    raise

            tg.start_soon(caller)
            await blocked.entered.wait()
            tg.cancel_scope.cancel()
        assert reraised
        rows = await turn_rows(host)
        assert [status for _, status in rows] == ["cancelled"]
        assert host.turns.active_turns == 0
        assert host.turns.admitted_sessions == 0


async def test_ambient_cancellation_during_an_effect_is_indeterminate(tmp_path: Path) -> None:
    entered = anyio.Event()

    @tool("slow.work")
    async def slow_work(ctx: ToolContext) -> str:
        """Works for a long time."""
        entered.set()
        await anyio.sleep_forever()
        return "never"

    model = ScriptedModel([CallTools(("slow_work", {})), Reply("never")])
    async with open_host(tmp_path, model, tools=[slow_work]) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request())
            await entered.wait()
            tg.cancel_scope.cancel()
        rows = await turn_rows(host)
    assert [status for _, status in rows] == ["indeterminate"]


async def test_host_close_cancels_running_turns_and_records_them(tmp_path: Path) -> None:
    blocked = Blocked()
    results: list[TurnResult] = []
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:

        async def run() -> None:
            results.append(await host.turns.run(request()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await blocked.entered.wait()
            await host.aclose()
    assert results[0].outcome == "cancelled"
    assert results[0].error == "the Host shut down"


async def test_a_turn_admitted_as_the_host_shuts_down_is_stopped_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second turn's admission is on its way when the Host begins to close, and
    # commits once the first turn freed the session. It used to run on, unwaited for,
    # into the closed store.
    blocked = Blocked()
    on_its_way, go = anyio.Event(), anyio.Event()
    original = SqlTurnStore.admit
    calls = 0

    async def admit(self: SqlTurnStore, *args: Any, **options: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            on_its_way.set()
            await go.wait()
        return await original(self, *args, **options)

    monkeypatch.setattr(SqlTurnStore, "admit", admit)
    outcomes: dict[str, str] = {}
    with anyio.fail_after(30):
        async with open_host(tmp_path, ScriptedModel([blocked], repeat_last=True)) as host:

            async def run(text: str) -> None:
                result = await host.turns.run(request(text))
                outcomes[text] = f"{result.outcome}: {result.error}"

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "first")
                await blocked.entered.wait()
                tg.start_soon(run, "second")
                await on_its_way.wait()
                tg.start_soon(host.aclose)
                while host.turns.active_turns:  # noqa: ASYNC110 (the first ends, recorded)
                    await anyio.sleep(0.01)
                go.set()
    assert outcomes == {
        "first": "cancelled: the Host shut down",
        "second": "cancelled: the Host shut down",
    }


async def test_host_close_rejects_turns_still_waiting_for_admission(tmp_path: Path) -> None:
    blocked = Blocked()
    outcomes: list[str] = []
    async with open_host(tmp_path, ScriptedModel([blocked], repeat_last=True)) as host:

        async def run(text: str) -> None:
            try:
                outcomes.append((await host.turns.run(request(text))).outcome)
            except TurnRejected as exc:
                outcomes.append(f"rejected: {exc.reason}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first")
            await blocked.entered.wait()
            tg.start_soon(run, "second")
            while host.turns.admission_holders < 2:
                await anyio.lowlevel.checkpoint()
            await host.aclose()
    # The second is refused while it waits; or, when its admission was already on its
    # way and committed as the first turn freed the session, it is stopped at once and
    # recorded (cancelled), never left to fail against the closed store (which raised
    # TurnInfrastructureError out of the task group).
    assert sorted(outcomes) in (
        ["cancelled", "rejected: the Host is shutting down"],
        ["cancelled", "cancelled"],
    )


async def test_a_request_already_run_answers_with_its_record_while_the_host_closes(
    tmp_path: Path,
) -> None:
    """Closing refuses new turns, not the record of one that ran: a retry (or a notebook's
    Stop reading how its turn ended) gets that record until the store has closed."""
    async with open_host(tmp_path, ScriptedModel(["done"], repeat_last=True)) as host:
        first = request("first")
        done = await host.turns.run(first)
        await host.turns.shutdown()
        again = await host.turns.run(first)
        assert (again.turn_id, again.outcome, again.text) == (done.turn_id, "completed", "done")
        with pytest.raises(TurnRejected, match="shutting down"):
            await host.turns.run(request("second"))
        # The key names one request, closing or not.
        with pytest.raises(RequestConflict):
            await host.turns.run(dataclasses.replace(first, input="something else"))
        assert await turn_rows(host) == [(done.turn_id, "completed")]
    with pytest.raises(TurnRejected, match="shutting down"):
        await host.turns.run(first)


async def _cancelled_as_admitted(
    host: Host, how: str, committed: anyio.Event, go: anyio.Event
) -> int:
    """Run a turn, cancel its caller natively (``how``) once its admission committed.

    Returns the caller task's ``cancelling()`` once it caught what it expects
    (``CancelledError`` for a cancel, else ``TimeoutError``): the cancellation
    was delivered as asyncio's own accounting expects.
    """
    tasks: list[asyncio.Task[Any]] = []
    timeouts: list[asyncio.Timeout] = []
    expected: type[BaseException] = asyncio.CancelledError if how == "cancel" else TimeoutError

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        await host.turns.run(request(request_id="req_cut"))

    async def caller() -> int:
        try:
            if how == "wait_for":
                # Its deadline is long past once the admission committed (see below).
                await asyncio.wait_for(run(), 0.2)
            elif how == "timeout":
                async with asyncio.timeout(None) as deadline:
                    timeouts.append(deadline)
                    await run()
            else:
                await run()
        except expected:
            current = asyncio.current_task()
            assert current is not None
            return current.cancelling() - (how == "cancel")
        raise AssertionError("the caller was not cancelled")

    outer = asyncio.get_running_loop().create_task(caller())
    await committed.wait()
    if how == "timeout":
        timeouts[0].reschedule(asyncio.get_running_loop().time())
    elif how == "cancel":
        tasks[0].cancel()
    # The admission goes on only once the caller's cancellation was delivered to it.
    while not tasks[0].cancelling():  # noqa: ASYNC110 (the cancellation is in flight)
        await asyncio.sleep(0.001)
    go.set()
    return await outer


@pytest.mark.parametrize("how", ["cancel", "timeout", "wait_for"])
async def test_a_caller_cancelled_natively_while_admitted_ends_its_turn_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # asyncio's own cancellation (Task.cancel, asyncio.timeout, wait_for, Ctrl-C under
    # asyncio.run) passes anyio's shield: the admitted turn used to stay running, its
    # session leased, until another admission noticed the lapse and ended it lost.
    committed, go = anyio.Event(), anyio.Event()
    original = SqlTurnStore.admit

    async def admit(self: SqlTurnStore, *args: Any, **options: Any) -> Any:
        outcome = await original(self, *args, **options)
        if not committed.is_set():
            committed.set()  # turn.started is durable: the turn exists, running
            await go.wait()
        return outcome

    monkeypatch.setattr(SqlTurnStore, "admit", admit)
    with anyio.fail_after(30):
        async with open_host(tmp_path, ScriptedModel([Reply("next")], repeat_last=True)) as host:
            assert await _cancelled_as_admitted(host, how, committed, go) == 0
            assert host.turns.active_turns == 0
            assert host.turns.admitted_sessions == 0
            # The retry reads the record (not TurnInProgress); the session is free at once.
            again = await host.turns.run(request(request_id="req_cut"))
            following = await host.turns.run(request("next one"))
            rows = await turn_rows(host)
    assert (again.outcome, again.error, again.cancelled_by) == (
        "cancelled",
        "the caller was cancelled",
        "caller",
    )
    assert following.outcome == "completed"
    assert [status for _, status in rows] == ["cancelled", "completed"]


async def test_a_providers_own_cancelled_error_fails_the_turn(tmp_path: Path) -> None:
    # Nobody cancelled the caller: an SDK's leaked CancelledError is the provider's
    # failure, recorded so, and never raised into a task that is not being cancelled.
    async def leaky(request: ModelRequest) -> Reply:
        raise asyncio.CancelledError()

    async with open_host(tmp_path, ScriptedModel([leaky])) as host:
        result = await host.turns.run(request())
        current = asyncio.current_task()
        assert current is not None
        assert current.cancelling() == 0
        rows = await turn_rows(host)
    assert (result.outcome, result.error, result.cancelled_by) == (
        "failed",
        "internal error (CancelledError)",
        None,
    )
    assert [status for _, status in rows] == ["failed"]


async def test_a_providers_own_cancelled_error_after_a_cancel_ends_as_that_cancel(
    tmp_path: Path,
) -> None:
    # The turn was cancelled on request and the provider raised a CancelledError of its
    # own instead of anyio's: the turn ends as the cancel asked, the caller goes on.
    entered = anyio.Event()

    async def converts(request: ModelRequest) -> Reply:
        entered.set()
        try:
            await anyio.sleep_forever()
        except BaseException:
            raise asyncio.CancelledError("the SDK's own") from None
        raise AssertionError("unreachable")

    async with open_host(tmp_path, ScriptedModel([converts])) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered.wait()
            owner = await host.authority.for_conversation(facts("c1", "alice", "test"))
            await host.turns.cancel(await started_turn_id(host), owner)
    assert (results[0].outcome, results[0].cancelled_by) == ("cancelled", "user")
