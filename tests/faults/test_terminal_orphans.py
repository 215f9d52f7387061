"""kill -9 of a real Host with a background terminal run: the next Host marks it orphaned.

A Host subprocess starts ``terminal.run`` in the background (bubblewrap, the
default sandbox) and is SIGKILLed once the run's record holds its pid. A new
Host on the same database reports the run ``orphaned`` through
``terminal.status`` and through the store, with the reason, and no process of
the run survives (found by a unique argv marker, with a deadline).
"""

from __future__ import annotations

import json
import secrets
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.process import probe_bubblewrap
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.contract.test_builtin_terminal import terminal_config, tool_output
from tests.hosts import request
from tests.parts import missing
from tests.security.test_escape import marked
from tests.support import sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WAIT_S = 30.0

CHILD = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from hostkit.host import Host, parse_config
    from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest

    root, marker, duration = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    BUILTINS = ["terminal.run", "terminal.status", "terminal.stop"]

    async def main():
        (root / "ws").mkdir(exist_ok=True)
        config = parse_config(
            {
                "host": {
                    "database": str(root / "hostkit.db"),
                    "workspace": str(root / "ws"),
                    "artifacts": str(root / "artifacts"),
                },
                "providers": {"test": {"kind": "scripted"}},
                "agents": {
                    "assistant": {"provider": "test", "memory": False, "builtins": BUILTINS}
                },
            },
            base_dir=root,
        )
        call = CallTools(("terminal_run", {"argv": ["sleep", duration], "background": True}))
        model = ScriptedModel([call, Reply("started")])
        facts = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")
        async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
            result = await host.turns.run(
                TurnRequest(input="start it", principal=facts, request_id="req-bg")
            )
            assert result.effects[0].status == "succeeded", result.effects
            with anyio.fail_after(30):
                while True:
                    rows = await host.store.read(
                        lambda c: c.execute(
                            "SELECT run_id FROM terminal_runs WHERE pid IS NOT NULL"
                        ).fetchall()
                    )
                    if rows:
                        break
                    await anyio.sleep(0.02)
            part = anyio.Path(f"{marker}.part")  # whole or absent for the poller
            await part.write_text(rows[0][0])
            await part.rename(marker)
            await anyio.sleep_forever()

    anyio.run(main)
    """
)


async def test_sigkill_of_the_host_leaves_its_background_run_orphaned_and_nothing_running(
    tmp_path: Path,
) -> None:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap, "bwrap")
    if not probe.ok:
        missing("sandbox", probe.reason)
    # A duration no other process on the machine has in its argv: the survivor marker.
    duration = f"3600.{secrets.randbelow(10**9):09d}"
    marker = anyio.Path(tmp_path / "started")
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(marker), duration]
    await sigkill_when(argv, marker.exists, what="the background run was recorded")
    run_id = await marker.read_text()

    config = terminal_config(tmp_path)
    model = ScriptedModel([CallTools(("terminal_status", {"run_id": run_id})), Reply("ok")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        operator = await host.operator("ops", reason="inspect orphaned terminal runs")
        (record,) = await host.store.terminal_runs.list(operator)
        result = await host.turns.run(request("status?"))
        survivors = await _wait_gone(duration)

    assert record.run_id == run_id
    assert record.state == "orphaned"
    assert record.reason is not None
    assert "that owned the run is gone" in record.reason
    assert record.ended_at is not None
    assert [e.status for e in result.effects] == ["indeterminate"]
    status = tool_output(model)
    assert (status["run_id"], status["status"]) == (run_id, "orphaned")
    assert json.dumps(status)
    assert survivors == []


async def _wait_gone(duration: str) -> list[int]:
    """Pids still running ``sleep <duration>`` once the deadline passed (none expected)."""
    left: list[int] = []
    with anyio.move_on_after(WAIT_S):
        while True:
            left = [proc.pid for proc in await anyio.to_thread.run_sync(marked, duration)]
            if not left:
                return []
            await anyio.sleep(0.05)
    return left
