"""Clause: a cancelled turn's durable result says who stopped it (``TurnResult.cancelled_by``).

Only ``user`` (an explicit cancel) is a person deciding the turn should not
finish; ``caller`` (the running task was cancelled) and ``host`` (the Host
shut down) are the Host's doing. An inbox maps only ``user`` to a cancelled
message (rule 7), so the distinction must be durable, not just live.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.authority import conversation_principal
from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, TurnResult
from tests.hosts import open_host, request, turn_rows
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


async def recorded(host: Host, turn_request: TurnRequest) -> TurnResult:
    """The durable result of ``turn_request``'s turn, as the store reads it back."""
    principal = turn_request.principal
    assert isinstance(principal, ConversationFacts)
    state = await host.store.turns.find(conversation_principal(principal), turn_request.request_id)
    assert state is not None
    assert state.result is not None
    return state.result


async def test_explicit_cancel_is_recorded_as_the_users(tmp_path: Path) -> None:
    blocked = Blocked()
    turn_request = request(conversation="mine")
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(turn_request))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await blocked.entered.wait()
            ((turn_id, _),) = await turn_rows(host)
            owner = await host.authority.for_conversation(facts("mine", "alice", "test"))
            await host.turns.cancel(turn_id, owner)
        stored = await recorded(host, turn_request)
    assert (results[0].outcome, results[0].cancelled_by) == ("cancelled", "user")
    assert (stored.outcome, stored.cancelled_by) == ("cancelled", "user")


async def test_cancelling_the_caller_is_recorded_as_the_callers(tmp_path: Path) -> None:
    blocked = Blocked()
    turn_request = request()
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, turn_request)
            await blocked.entered.wait()
            tg.cancel_scope.cancel()
        stored = await recorded(host, turn_request)
    assert (stored.outcome, stored.error, stored.cancelled_by) == (
        "cancelled",
        "the caller was cancelled",
        "caller",
    )


async def test_host_shutdown_is_recorded_as_the_hosts(tmp_path: Path) -> None:
    blocked = Blocked()
    turn_request = request()
    results: list[TurnResult] = []
    async with open_host(tmp_path, ScriptedModel([blocked])) as host:

        async def run() -> None:
            results.append(await host.turns.run(turn_request))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await blocked.entered.wait()
            await host.aclose()
    assert (results[0].outcome, results[0].cancelled_by) == ("cancelled", "host")
    async with open_host(tmp_path, ScriptedModel([Reply("unused")])) as reopened:
        stored = await recorded(reopened, turn_request)
    assert (stored.outcome, stored.cancelled_by) == ("cancelled", "host")


async def test_a_turn_nobody_cancelled_names_no_canceller(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("done")])) as host:
        result = await host.turns.run(request())
    assert (result.outcome, result.cancelled_by) == ("completed", None)
    assert "cancelled_by" not in result.to_json()
    # A result recorded before the field existed reads back without a canceller.
    older = {key: value for key, value in result.to_json().items() if key != "cancelled_by"}
    assert TurnResult.from_json(older).cancelled_by is None
    cancelled = TurnResult.from_json({**result.to_json(), "outcome": "cancelled"})
    assert TurnResult.from_json({**cancelled.to_json(), "cancelled_by": "user"}).cancelled_by == (
        "user"
    )
