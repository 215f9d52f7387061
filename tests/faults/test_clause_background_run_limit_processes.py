"""Two real Host processes on one database keep one session's limit of live background runs.

"At most ``max_background`` (default 8) live runs per session": each Host
process has its own registry of runs, so only the store, which counts the
session's ``running`` records as it inserts one, can hold the limit between
them. Host A's turn starts 8 background runs in conversation c1; Host B's
turn in the same conversation (the same session) then asks for 8 more, and
every one is refused before anything is spawned.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hostkit.builtins.process import probe_bubblewrap
from hostkit.store import RuntimeStore
from tests.parts import missing
from tests.support import child_process

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WAIT_S = 60.0
RUNS = 8  # each turn's background runs: the default max_background

CHILD = textwrap.dedent(
    """
    import json, sys
    import anyio
    from pathlib import Path
    from hostkit.host import Host, parse_config
    from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest

    root, name, principal, duration = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]

    async def until(path):
        with anyio.fail_after(60):
            while not await anyio.Path(path).exists():
                await anyio.sleep(0.02)

    async def main():
        config = parse_config(
            {
                "host": {
                    "database": str(root / "hostkit.db"),
                    "workspace": str(root / "ws"),
                    "artifacts": str(root / "artifacts"),
                },
                "providers": {"test": {"kind": "scripted"}},
                "agents": {
                    "assistant": {"provider": "test", "memory": False, "builtins": ["terminal.run"]}
                },
            },
            base_dir=root,
        )
        call = ("terminal_run", {"argv": ["sleep", duration], "background": True})
        model = ScriptedModel([CallTools(*[call] * %(runs)d), Reply("started")])
        facts = ConversationFacts(channel="test", conversation_key="c1", principal_key=principal)
        async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
            (root / f"{name}.ready").write_text("1")
            await until(root / f"{name}.go")
            result = await host.turns.run(
                TurnRequest(input="start them", principal=facts, request_id=f"req-{name}")
            )
            effects = [[e.status, e.summary] for e in result.effects]
            part = root / f"{name}.part"
            part.write_text(json.dumps({"session_id": result.session_id, "effects": effects}))
            part.rename(root / f"{name}.json")
            await until(root / "stop")

    anyio.run(main)
    """
) % {"runs": RUNS}


async def until(path: Path) -> None:
    """Wait for a file another process writes (polled: no event crosses processes)."""
    with anyio.fail_after(WAIT_S):
        while True:
            if await anyio.Path(path).exists():
                return
            await anyio.sleep(0.05)


async def result_of(root: Path, name: str) -> dict[str, Any]:
    await until(root / f"{name}.json")
    loaded: dict[str, Any] = json.loads(await anyio.Path(root / f"{name}.json").read_text())
    return loaded


def live_runs(duration: str) -> int:
    """Processes whose argv carries this test's unique sleep duration (bwrap and sleep of
    one run share it: counted by the sleep itself)."""
    count = 0
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "sleep" and duration in cmdline:
            count += 1
    return count


async def test_two_host_processes_never_pass_one_sessions_limit(tmp_path: Path) -> None:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap, "bwrap")
    if not probe.ok:
        missing("sandbox", probe.reason)
    await anyio.Path(tmp_path / "ws").mkdir()
    duration = f"3600.{secrets.randbelow(10**9):09d}"  # no other process's argv has it

    def host(name: str) -> list[str]:
        return [sys.executable, "-c", CHILD, str(tmp_path), name, "alice", duration]

    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    async with child_process(host("a"), **quiet) as a, child_process(host("b"), **quiet) as b:
        await until(tmp_path / "a.ready")
        await until(tmp_path / "b.ready")
        await anyio.Path(tmp_path / "a.go").write_text("1")
        first = await result_of(tmp_path, "a")
        await anyio.Path(tmp_path / "b.go").write_text("1")
        second = await result_of(tmp_path, "b")
        alive = await anyio.to_thread.run_sync(live_runs, duration)
        async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
            running = await store.terminal_runs.running()
        await anyio.Path(tmp_path / "stop").write_text("1")
        with anyio.fail_after(WAIT_S):
            await a.wait()
            await b.wait()

    assert first["session_id"] == second["session_id"]
    assert [status for status, _ in first["effects"]] == ["succeeded"] * RUNS
    refusal = f"at most {RUNS} background runs per session"
    assert [status for status, _ in second["effects"]] == ["denied"] * RUNS
    assert all(refusal in summary for _, summary in second["effects"]), second["effects"]
    assert [r.session_id for r in running] == [first["session_id"]] * RUNS
    assert alive == RUNS
    assert (a.returncode, b.returncode) == (0, 0)
