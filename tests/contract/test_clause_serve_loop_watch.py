"""Serve clause: blocking code on ``hostkit serve``'s event loop is noticed and said.

An async tool that calls ``time.sleep`` (a synchronous client by mistake)
freezes every webhook, health check and turn, and its ``timeout_s`` cannot
fire. The loop watch logs one warning per stall, naming the running task and
the tool's code, and one line when the loop runs again; a loop that keeps
running logs nothing.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest
from blockbuster import BlockBuster

from hostkit.cli._loop_watch import watching_the_loop
from hostkit.effects import tool
from hostkit.testing import CallTools, Reply, ScriptedModel
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio


async def test_a_tool_blocking_the_loop_is_logged_once_naming_it_and_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blockbuster: BlockBuster
) -> None:
    # The blocking call is the tool's (the point of the test), not hostkit's.
    blockbuster.functions["time.sleep"].deactivate()

    @tool("slow.lookup", timeout_s=0.2)
    async def slow_lookup() -> str:
        """Calls blocking code on the loop, as a sync client would."""
        time.sleep(1.5)  # noqa: ASYNC251 (the mistake this test makes on purpose)
        return "found"

    model = ScriptedModel([CallTools(("slow_lookup", {})), Reply("done")])
    caplog.set_level(logging.INFO, logger="hostkit.serve")
    async with open_host(tmp_path, model, tools=[slow_lookup]) as host:
        with watching_the_loop(stall_s=0.5, heartbeat_s=0.1):
            result = await host.turns.run(request("look it up"))
            await anyio.sleep(0.5)
    assert result.outcome == "completed"
    said = [r for r in caplog.records if r.name == "hostkit.serve"]
    blocked = [r for r in said if "event loop blocked" in r.getMessage()]
    assert len(blocked) == 1, [r.getMessage() for r in said]
    (warning,) = blocked
    assert warning.levelno == logging.WARNING
    text = warning.getMessage()
    assert "slow_lookup (test_clause_serve_loop_watch.py:" in text, text
    assert "anyio.to_thread.run_sync" in text
    assert len(text) < 600
    again = [r.getMessage() for r in said if "runs again" in r.getMessage()]
    assert len(again) == 1, again


async def test_a_loop_that_keeps_running_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hostkit.serve")
    with watching_the_loop(stall_s=0.3, heartbeat_s=0.05):
        for _ in range(20):
            await anyio.sleep(0.05)
    assert [r for r in caplog.records if r.name == "hostkit.serve"] == []
