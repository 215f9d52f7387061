"""An effect stops before another Host can take over a session its Host cannot renew.

A partition drops this Host's packets to the database and nobody else's: its
renewals fail, its lease lapses, and another Host takes the session over a ttl
after it notices the lapse. This Host cannot tell that from an outage for
everyone (where riding it out is right: ``test_clause_postgres_outage_takeover``),
so a model step goes on, but an effect still running a third of a ttl past the
lapse is cut: it would otherwise act in the world beside the next holder's turn.
Over the real SQLite store, with the holder's renewals failing as a partition
fails them.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import StoreError
from hostkit.host import Host
from hostkit.store import SessionLease
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest, TurnResult
from tests.hosts import config, request

pytestmark = pytest.mark.anyio

TTL = 3.0
WORK_S = 30.0  # far past the lease: without the cut the effect would run to the end


async def test_an_effect_is_cut_before_a_takeover_when_renewals_keep_failing(
    tmp_path: Path,
) -> None:
    started = anyio.Event()
    ended: dict[str, float] = {}

    @tool("long.work")
    async def long_work(ctx: ToolContext) -> str:
        """Acts for longer than the session lease."""
        started.set()
        try:
            await anyio.sleep(WORK_S)
        finally:
            ended["effect"] = time.monotonic()
        return "worked"

    def answer_b(model_request: ModelRequest) -> Reply:
        ended.setdefault("b", time.monotonic())  # B's turn runs: the session is B's now
        return Reply("from B")

    cfg = config(tmp_path)
    cfg = cfg.model_copy(update={"host": cfg.host.model_copy(update={"session_lease_ttl_s": TTL})})
    model = ScriptedModel([CallTools(("long_work", {})), Reply("done")])
    async with (
        Host.open(cfg, capabilities=capabilities(model, tools=[long_work])) as host,
        Host.open(cfg, capabilities=capabilities(ScriptedModel([answer_b]))) as other,
    ):

        async def partitioned(lease: SessionLease) -> bool:
            raise StoreError("the database server did not answer (a partition)")

        results: dict[str, TurnResult] = {}

        async def run_a() -> None:
            results["a"] = await host.turns.run(request("work please"))

        async def run_b() -> None:
            # Another Host asks for a turn in the same conversation meanwhile.
            results["b"] = await other.turns.run(request("me next"))

        with anyio.fail_after(WORK_S / 2):
            async with anyio.create_task_group() as group:
                group.start_soon(run_a)
                await started.wait()
                host.store.turns.renew = partitioned  # type: ignore[method-assign]
                cut_from = time.monotonic()
                group.start_soon(run_b)
    # Cut within two thirds of a ttl past the lapse (a ttl at most from its last renewal).
    assert ended["effect"] - cut_from < 2 * TTL
    assert ended["effect"] < ended["b"]
    assert results["a"].outcome == "indeterminate", results["a"]
    assert results["a"].effects[0].status == "indeterminate"
    assert results["b"].outcome == "completed", results["b"].error
    assert results["b"].text == "from B"
