"""A running turn keeps its session lease; a short turn pays nothing for that.

The heartbeat (and the keep-alive around the terminal write) starts only when
a turn outlives a third of its lease; it never outlives the turn, and the
turn's own errors and cancellation come out as themselves.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns._holder import _beside
from tests.hosts import config, request

pytestmark = pytest.mark.anyio


class Background:
    """A background loop that records when it started and when it ended."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    async def run(self) -> None:
        self.started += 1
        try:
            await anyio.sleep_forever()
        finally:
            self.ended += 1


async def test_a_body_that_ends_first_never_starts_the_background() -> None:
    background = Background()

    async def body() -> str:
        await anyio.sleep(0.01)
        return "done"

    assert await _beside(background.run, body, after=5.0) == "done"
    await anyio.sleep(0.05)
    assert (background.started, background.ended) == (0, 0)


async def test_a_started_background_has_ended_when_the_body_returns() -> None:
    background = Background()

    async def body() -> str:
        await anyio.sleep(0.2)
        assert background.started == 1
        return "done"

    assert await _beside(background.run, body, after=0.01) == "done"
    assert (background.started, background.ended) == (1, 1)


async def test_the_bodys_error_comes_out_as_itself_and_stops_the_background() -> None:
    background = Background()

    async def body() -> None:
        await anyio.sleep(0.1)
        raise ValueError("the body failed")

    with pytest.raises(ValueError, match="the body failed"):
        await _beside(background.run, body, after=0.01)
    assert (background.started, background.ended) == (1, 1)


async def test_cancelling_the_caller_stops_the_background_too() -> None:
    background = Background()

    async def body() -> None:
        await anyio.sleep_forever()

    with anyio.move_on_after(0.2) as scope:
        await _beside(background.run, body, after=0.01)
    assert scope.cancelled_caught
    assert (background.started, background.ended) == (1, 1)


class Crash(BaseException):
    """What no ``except Exception`` in the heartbeat would catch."""


async def test_a_background_that_crashed_is_not_swallowed() -> None:
    async def crash() -> None:
        raise Crash

    async def body() -> str:
        await anyio.sleep(0.1)
        return "done"

    with pytest.raises(Crash):
        await _beside(crash, body, after=0.01)


def counted_renewals(host: Host) -> list[str]:
    """The turn id of every session-lease renewal the Host writes from now on."""
    renewals: list[str] = []
    renew = host.store.turns.renew

    async def counted(lease: object) -> bool:
        renewals.append(getattr(lease, "turn_id", ""))
        return await renew(lease)  # type: ignore[arg-type]

    host.store.turns.renew = counted  # type: ignore[method-assign]
    return renewals


async def test_a_turn_longer_than_its_lease_renews_it_and_leaves_no_task_behind(
    tmp_path: Path,
) -> None:
    """ttl 0.6 s, a tool of 1.5 s: about seven renewals, the turn completes as itself."""

    @tool("slow.step")
    async def slow_step(ctx: ToolContext) -> str:
        """Outlives the session lease's ttl two times over."""
        await anyio.sleep(1.5)
        return "slow"

    cfg = config(tmp_path)
    cfg = cfg.model_copy(update={"host": cfg.host.model_copy(update={"session_lease_ttl_s": 0.6})})
    model = ScriptedModel([CallTools(("slow_step", {})), Reply("finished")], repeat_last=True)
    async with Host.open(cfg, capabilities=capabilities(model, tools=[slow_step])) as host:
        renewals = counted_renewals(host)
        before = len(asyncio.all_tasks())
        result = await host.turns.run(request("slow please"))
        assert result.outcome == "completed"
        assert result.text == "finished"
        assert len(renewals) >= 4
        assert set(renewals) == {result.turn_id}
        assert len(asyncio.all_tasks()) == before


async def test_a_turn_shorter_than_a_third_of_its_lease_starts_no_renewal(tmp_path: Path) -> None:
    """ttl 60 s: the first renewal would be due after 20 s (the keep-alive around the
    terminal write after 10 s), which no turn of a scripted reply reaches, however loaded
    the machine."""
    cfg = config(tmp_path)
    cfg = cfg.model_copy(update={"host": cfg.host.model_copy(update={"session_lease_ttl_s": 60.0})})
    model = ScriptedModel([Reply("quick")], repeat_last=True)
    async with Host.open(cfg, capabilities=capabilities(model)) as host:
        renewals = counted_renewals(host)
        short = await host.turns.run(request("again"))
        assert short.outcome == "completed"
        assert short.text == "quick"
        assert renewals == []
