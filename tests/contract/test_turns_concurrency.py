"""TurnExecution: same-session turns serialize, other sessions run concurrently, no global lock."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.errors import TurnInProgress
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import FreshSession, ModelRequest, ResumeSession
from tests.hosts import open_host, request, turn_rows

pytestmark = pytest.mark.anyio


class Gate:
    """A provider step that reports entry and waits until released (no sleeps)."""

    def __init__(self) -> None:
        self.inside = 0
        self.max_inside = 0
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        self.entered.set()
        await self.release.wait()
        self.inside -= 1
        return Reply("released")


async def test_same_session_turns_serialize(tmp_path: Path) -> None:
    gate = Gate()
    model = ScriptedModel([gate], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        results = []

        async def run(i: int) -> None:
            results.append(await host.turns.run(request(f"m{i}", conversation="same")))

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(run, i)
            await gate.entered.wait()
            # While the first turn is inside the provider, nobody else of this session is.
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            assert gate.inside == 1
            gate.release.set()
        assert gate.max_inside == 1
        assert {r.session_id for r in results} == {results[0].session_id}
        assert [r.outcome for r in results] == ["completed"] * 3
        assert host.turns.admitted_sessions == 0, "idle lock entries are removed"


async def test_different_sessions_run_concurrently(tmp_path: Path) -> None:
    both_inside = anyio.Event()
    inside = 0

    async def barrier(request: ModelRequest) -> Reply:
        nonlocal inside
        inside += 1
        if inside == 2:
            both_inside.set()
        # Deadlocks (and times out) if a process-wide lock serialized the two sessions.
        with anyio.fail_after(10):
            await both_inside.wait()
        return Reply("together")

    model = ScriptedModel([barrier], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        results = []

        async def run(conversation: str) -> None:
            results.append(await host.turns.run(request(conversation=conversation)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a")
            tg.start_soon(run, "b")
    assert sorted(r.outcome for r in results) == ["completed", "completed"]
    assert results[0].session_id != results[1].session_id


async def test_same_request_id_never_creates_a_second_turn(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("first answer")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request("q", request_id="req-same"))
        again = await host.turns.run(request("q", request_id="req-same"))
        assert again == first
        assert len(model.requests) == 1
        assert len(await turn_rows(host)) == 1


async def test_repeat_while_running_gets_a_typed_still_running_answer(tmp_path: Path) -> None:
    gate = Gate()
    async with open_host(tmp_path, ScriptedModel([gate])) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request(request_id="req-busy"))
            await gate.entered.wait()
            with pytest.raises(TurnInProgress) as caught:
                await host.turns.run(request(request_id="req-busy"))
            assert caught.value.retryable
            gate.release.set()
        assert len(await turn_rows(host)) == 1


async def test_same_request_id_from_another_principal_is_a_different_turn(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("x")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        mine = await host.turns.run(request(request_id="shared-key", principal="alice"))
        theirs = await host.turns.run(
            request(request_id="shared-key", principal="bob", conversation="c2")
        )
    assert mine.turn_id != theirs.turn_id


async def test_fresh_session_switches_future_requests_and_resume_switches_back(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("x")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request())
        fresh = await host.turns.run(request(session=FreshSession()))
        assert fresh.session_id != first.session_id
        follow = await host.turns.run(request())
        assert follow.session_id == fresh.session_id
        back = await host.turns.run(request(session=ResumeSession(first.session_id)))
        assert back.session_id == first.session_id
        assert (await host.turns.run(request())).session_id == first.session_id


async def test_history_of_earlier_turns_reaches_the_next_prepare(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("first"), Reply("second")])
    async with open_host(tmp_path, model) as host:
        await host.turns.run(request("remember the number 42"))
        await host.turns.run(request("what was the number?"))
    contents = [m.content for m in model.requests[1].messages]
    assert "remember the number 42" in contents
    assert "first" in contents
    assert contents[-1] == "what was the number?"


async def test_same_session_waiters_run_in_arrival_order_and_wake_at_once(
    tmp_path: Path,
) -> None:
    gate = Gate()
    seen: list[str] = []

    async def record(request: ModelRequest) -> Reply:
        seen.append(request.messages[-1].content)
        return Reply("ok")

    model = ScriptedModel([gate, record], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        async with anyio.create_task_group() as tg:
            tg.start_soon(host.turns.run, request("m0", conversation="same"))
            await gate.entered.wait()
            for i in range(1, 4):
                tg.start_soon(host.turns.run, request(f"m{i}", conversation="same"))
                # Arrived: it found the session busy and queued (on PostgreSQL two first
                # admissions in flight at once may commit in either order).
                while host.turns.admission_waiters < i:
                    await anyio.lowlevel.checkpoint()
            started = anyio.current_time()
            gate.release.set()
        # Each waiter was woken by the previous turn's release, not by a periodic recheck
        # (the first of which would come only after seconds).
        assert anyio.current_time() - started < 4.0
    assert seen == ["m1", "m2", "m3"]
    assert host.turns.admitted_sessions == 0
