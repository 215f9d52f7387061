"""Regressions: no turn left running, no poisoned history, no replay via Host channels."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import HostkitError, StoreError, TurnRejected
from hostkit.host import Host
from hostkit.store import Admitted, LeaseOwner, TurnAdmission
from hostkit.store._turns import SqlTurnStore
from hostkit.testing import CallTools, Fail, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, new_id
from tests.hosts import config, open_host, request, turn_rows
from tests.support import facts

pytestmark = pytest.mark.anyio


async def test_an_unexpected_adapter_exception_fails_the_turn_naming_it_without_leaking(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Fail(RuntimeError("raw adapter bug with secret=abc"))])
    async with open_host(tmp_path, model) as host:
        result = await host.turns.run(request())
        assert result.outcome == "failed"
        # The provider's failure, by name and type; its message bounded and redacted.
        assert result.error == (
            "provider failed: scripted: RuntimeError: raw adapter bug with secret=[redacted]"
        )
        assert [status for _, status in await turn_rows(host)] == ["failed"]


async def test_a_cancelled_tool_call_does_not_poison_the_next_turn(tmp_path: Path) -> None:
    entered = anyio.Event()

    @tool("slow.call")
    async def slow_call(ctx: ToolContext) -> str:
        """Never finishes."""
        entered.set()
        await anyio.sleep_forever()
        return ""

    model = ScriptedModel([CallTools(("slow_call", {})), Reply("next answer")])
    async with open_host(tmp_path, model, tools=[slow_call]) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request("first"))
            await entered.wait()
            operator = await host.operator("ops", reason="cancel the slow tool")
            rows = await turn_rows(host)
            await host.turns.cancel(rows[0][0], operator)
        await host.turns.run(request("second"))
    messages = model.requests[1].messages
    calls = [c.call_id for m in messages if m.role == "assistant" for c in m.tool_calls]
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    assert calls
    assert set(calls) <= answered, "every historical tool call has a result"


async def test_cancelling_the_caller_while_turn_started_commits_still_ends_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, release = anyio.Event(), anyio.Event()
    original = SqlTurnStore.admit

    async def slow_admit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        inside.set()
        with anyio.fail_after(10):
            await release.wait()
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SqlTurnStore, "admit", slow_admit)
    async with open_host(tmp_path, ScriptedModel([Reply("x")])) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request())
            await inside.wait()
            tg.cancel_scope.cancel()
            release.set()
        assert [status for _, status in await turn_rows(host)] == ["cancelled"]


async def test_a_durable_cancel_request_is_observed_at_the_next_step(tmp_path: Path) -> None:
    entered, proceed = anyio.Event(), anyio.Event()

    @tool("wait.here")
    async def wait_here(ctx: ToolContext) -> str:
        """Waits for the test."""
        entered.set()
        await proceed.wait()
        return "done waiting"

    model = ScriptedModel([CallTools(("wait_here", {})), Reply("never")])
    async with open_host(tmp_path, model, tools=[wait_here]) as host:
        results = []

        async def run() -> None:
            results.append(await host.turns.run(request()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered.wait()
            turn_id = (await turn_rows(host))[0][0]
            # Another Host process records the request durably (it cannot reach our task).
            operator = await host.operator("ops", reason="cancel from elsewhere")
            await host.store.turns.request_cancel(operator, turn_id)
            proceed.set()
        assert results[0].outcome == "cancelled"
        assert len(model.requests) == 1


async def test_recovery_keeps_a_live_renewing_owner_and_ends_a_dead_one_at_once(
    tmp_path: Path,
) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("x")])) as host:
        live = await anyio.to_thread.run_sync(LeaseOwner.current, "other-instance")
        dead = LeaseOwner(live.host, live.pid, live.started - 100, "gone")
        turn_ids = []
        for conversation, owner in (("live", live), ("dead", dead)):
            scope = await host.authority.for_conversation(facts(conversation, "alice", "test"))
            admitted = await host.store.turns.admit(
                TurnAdmission(
                    turn_id=new_id("turn"),
                    request_id=new_id("req"),
                    principal_id=scope.principal_id,
                    core_id="assistant",
                    core_revision="cfg-test",
                    generation=1,
                    session=scope.session_id or "",
                ),
                owner=owner,
                ttl_s=600,
            )
            assert isinstance(admitted, Admitted)
            turn_ids.append(admitted.lease.turn_id)
        # Neither lease has expired: only the provably dead owner loses its turn, at once.
        assert await host.turns.recover() == [(turn_ids[1], "lost")]
        assert await host.turns.recover() == []
        assert dict(await turn_rows(host)) == {
            turn_ids[0]: "running",
            turn_ids[1]: "lost",
        }


async def test_a_host_opened_again_in_this_process_frees_a_closed_ones_session_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Host that closed while its database was down could not end its turn; a Host
    opened again in the same process (a notebook re-running its setup cell) sees that
    holder dead, though its pid is this process's, and serves the session at once."""
    entered = anyio.Event()

    @tool("hold")
    async def hold(ctx: ToolContext) -> str:
        """Holds the turn until the Host closes."""
        entered.set()
        await anyio.sleep_forever()
        return "never"

    async def database_down(fn: object) -> object:
        raise StoreError("write failed: the database is down", retryable=True)

    async def run(host: Host) -> None:
        with contextlib.suppress(HostkitError):
            await host.turns.run(request())

    model = ScriptedModel([CallTools(("hold", {}))])
    async with (
        open_host(tmp_path, model, tools=[hold]) as first,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(run, first)
        await entered.wait()
        monkeypatch.setattr(first.store, "write", database_down)
        tg.cancel_scope.cancel()
    monkeypatch.undo()

    async with open_host(tmp_path, ScriptedModel([Reply("again")])) as second:
        # Its opening recovery ended the closed Host's turn: nothing is left running.
        assert [status for _, status in await turn_rows(second)] == ["indeterminate"]
        with anyio.fail_after(10):
            result = await second.turns.run(request("again"))
        assert result.outcome == "completed"


@pytest.mark.parametrize("channel", ["schedule", "operator", "agent"])
async def test_host_channels_cannot_replay_another_principals_turn(
    tmp_path: Path, channel: str
) -> None:
    model = ScriptedModel([Reply("system secret")])
    async with open_host(tmp_path, model) as host:
        run = await host.authority.for_scheduled_run(schedule_id="nightly", run_id="1")
        await host.turns.run(
            TurnRequest(input="go", principal=run, request_id="req-system", core_id="assistant")
        )
        forged = ConversationFacts(channel=channel, conversation_key="x", principal_key="nightly")
        with pytest.raises(TurnRejected, match="reserved"):
            await host.turns.run(TurnRequest(input="go", principal=forged, request_id="req-system"))


async def test_colliding_tools_are_rejected_before_the_turn_starts(tmp_path: Path) -> None:
    @tool("x.y_z")
    async def first(ctx: ToolContext) -> str:
        """One."""
        return ""

    @tool("x_y.z")
    async def second(ctx: ToolContext) -> str:
        """Two."""
        return ""

    model = ScriptedModel([Reply("never")])
    caps = capabilities(model, tools=[first, first, second])
    async with Host.open(config(tmp_path), capabilities=caps) as host:
        with pytest.raises(TurnRejected, match="collide"):
            await host.turns.run(request())
        assert await turn_rows(host) == []


async def test_the_same_tool_offered_twice_is_deduplicated(tmp_path: Path) -> None:
    @tool("only.once")
    async def once(ctx: ToolContext) -> str:
        """Once."""
        return "ok"

    async def decide(request: ModelRequest) -> Reply:
        return Reply(",".join(d.name for d in request.tools))

    model = ScriptedModel([decide])
    async with open_host(tmp_path, model, tools=[once, once]) as host:
        result = await host.turns.run(request())
    assert result.text == "only_once"
