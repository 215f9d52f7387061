"""Property: whatever fails or is cancelled, every started turn has exactly one terminal state."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import get_args

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostkit.effects import ToolContext, tool
from hostkit.errors import HostkitError, ProviderError, StoreError
from hostkit.store import RuntimeStore
from hostkit.store._turns import SqlTurnStore
from hostkit.testing import CallTools, Fail, Reply, ScriptedModel
from hostkit.types import ModelRequest, TurnOutcome
from tests.hosts import open_host, request

STEPS = st.sampled_from(
    ["reply", "tool_ok", "tool_fail", "provider_fail", "explicit_cancel", "ambient_cancel"]
)
PLANS = st.lists(
    st.tuples(st.lists(STEPS, min_size=1, max_size=4), st.booleans()), min_size=1, max_size=5
)
counter = itertools.count()


@tool("prop.ok")
async def ok_tool(ctx: ToolContext) -> str:
    """Succeeds."""
    return "ok"


@tool("prop.fail")
async def failing_tool(ctx: ToolContext) -> str:
    """Raises."""
    raise RuntimeError("tool failure")


async def scenario(root: Path, plans: list[tuple[list[str], bool]]) -> None:
    plan: list[str] = []
    signal: dict[str, anyio.Event] = {"progress": anyio.Event()}
    mode: dict[str, str | None] = {"blocked": None}

    async def decide(request: ModelRequest) -> Reply | CallTools | Fail:
        kind = plan.pop(0) if plan else "reply"
        if kind == "tool_ok":
            return CallTools(("prop_ok", {}))
        if kind == "tool_fail":
            return CallTools(("prop_fail", {}))
        if kind == "provider_fail":
            return Fail(ProviderError("injected", provider="test"))
        if kind.endswith("cancel"):
            mode["blocked"] = kind
            signal["progress"].set()
            await anyio.sleep_forever()
        return Reply("done")

    model = ScriptedModel([decide], repeat_last=True)
    original = SqlTurnStore.finish
    fail_terminal = {"on": False}

    async def maybe_broken(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if fail_terminal["on"]:
            raise StoreError("injected terminal failure")
        return await original(self, *args, **kwargs)

    SqlTurnStore.finish = maybe_broken  # type: ignore[method-assign]
    try:
        async with open_host(root, model, tools=[ok_tool, failing_tool], max_steps=4) as host:
            for index, (steps, break_terminal) in enumerate(plans):
                plan[:] = steps
                fail_terminal["on"] = break_terminal
                signal["progress"] = anyio.Event()
                mode["blocked"] = None
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:

                        async def run(i: int = index) -> None:
                            try:
                                await host.turns.run(request(f"turn {i}", conversation=f"c{i % 2}"))
                            except HostkitError:
                                pass
                            finally:
                                signal["progress"].set()

                        tg.start_soon(run)
                        await signal["progress"].wait()
                        if mode["blocked"] == "ambient_cancel":
                            tg.cancel_scope.cancel()
                        elif mode["blocked"] == "explicit_cancel":
                            rows = await host.store.read(
                                lambda c: c.execute(
                                    "SELECT turn_id FROM turns ORDER BY id DESC LIMIT 1"
                                ).fetchone()
                            )
                            scope = await host.operator("ops", reason="property test")
                            await host.turns.cancel(rows[0], scope)
                fail_terminal["on"] = False
            started = await host.store.read(
                lambda c: c.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
            )
        # After close (which ends this instance's orphans), check the invariant on disk.
        async with await RuntimeStore.open(root / "hostkit.db") as reopened:
            rows = await reopened.read(
                lambda c: c.execute(
                    "SELECT t.turn_id, t.status, "
                    "(SELECT COUNT(*) FROM turn_events e WHERE e.turn_id = t.turn_id "
                    " AND e.kind LIKE 'turn.%' AND e.kind != 'turn.started') "
                    "FROM turns t"
                ).fetchall()
            )
        assert len(rows) == started == len(plans)
        for turn_id, status, terminal_events in rows:
            assert status in get_args(TurnOutcome), (turn_id, status)
            assert terminal_events == 1, (turn_id, status, terminal_events)
    finally:
        SqlTurnStore.finish = original  # type: ignore[method-assign]


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plans=PLANS)
def test_every_started_turn_has_exactly_one_terminal_state(
    tmp_path: Path, plans: list[tuple[list[str], bool]]
) -> None:
    root = tmp_path / f"example{next(counter)}"
    root.mkdir()
    anyio.run(scenario, root, plans)
