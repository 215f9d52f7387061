"""Clause: a promotion is recorded whole or not at all, across processes and crashes.

Real processes on one database: two promoting processes racing ``move_live`` from
the same live revision record exactly one move; a promoting process SIGKILLed
before its move is recorded changes nothing, and one killed after (before the ref
was mirrored, or before its Host applied it) leaves a recorded move that the next
open runs, with the ref healed to it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from hostkit.host import Host
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_host_config, live_of, make_core, manifest_text
from tests.hosts import request
from tests.support import child_process

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

RACER = """
import sys, time, anyio
from pathlib import Path
from hostkit.errors import StaleClaim
from hostkit.store import RuntimeStore
from hostkit.types import CoreEvent, GateOutcome

async def main(db, go, revision, previous):
    async with await RuntimeStore.open(db) as store:
        print("ready", flush=True)
        while not Path(go).exists():
            time.sleep(0.005)
        event = CoreEvent("notes", "promote", revision, previous, (GateOutcome("tests", True),),
                          "racer", time.time())
        try:
            await store.cores.move_live(event)
        except StaleClaim:
            print("lost", flush=True)
        else:
            print("won", flush=True)

anyio.run(main, *sys.argv[1:])
"""

# Promotes through the registry; the hook named by argv[2] announces itself, then hangs
# until the parent SIGKILLs the process.
PROMOTER = """
import sys, anyio
import hostkit.cores._registry as registry_module
from hostkit.host import Host

stage = sys.argv[2]

async def hang(name):
    print(name, flush=True)
    await anyio.sleep(3600)

real_mirror = registry_module.mirror_live

async def mirror(location, revision):
    if stage == "before_mirror":
        await hang(stage)
    return await real_mirror(location, revision)

registry_module.mirror_live = mirror

async def main():
    async with Host.open(sys.argv[1]) as host:
        if stage == "in_gates":
            real_validate = host._validate_core
            async def validate(core):
                await real_validate(core)
                await hang(stage)
            host._validate_core = validate
        if stage == "before_apply":
            async def moved(core_id, revision):
                await hang(stage)
            host._core_moved = moved
        await host.cores.promote("notes", actor="ops", reason="next")

anyio.run(main)
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


async def read_line(process: Process) -> str:
    """The next line the process printed (its prints are short and flushed one by one)."""
    assert process.stdout is not None
    data = b""
    while not data.endswith(b"\n"):
        data += await process.stdout.receive(1)
    return data.decode().strip()


def write_config(tmp_path: Path, path: Path) -> Path:
    toml = tmp_path / "hostkit.toml"
    toml.write_text(
        f'[host]\ndatabase = "{tmp_path / "hostkit.db"}"\nworkspace = "workspace"\n'
        '[providers.test]\nkind = "scripted"\n'
        f'[cores.notes]\npath = "{path}"\n'
    )
    return toml


async def test_two_processes_racing_move_live_record_exactly_one(tmp_path: Path) -> None:
    path, first = make_core(tmp_path, "notes", manifest={"model": "test"})
    left = commit(path, {"notes.md": "left\n"}, "left")
    right = commit(path, {"notes.md": "right\n"}, "right")
    go = tmp_path / "go"
    db = str(tmp_path / "hostkit.db")
    outputs: list[str] = []
    racers = [
        await anyio.open_process(
            [sys.executable, "-c", RACER, db, str(go), revision, first], env=env()
        )
        for revision in (left, right)
    ]
    with anyio.fail_after(60):
        for racer in racers:  # both have the store open before either moves
            assert await read_line(racer) == "ready"
        go.touch()
        for racer in racers:
            outputs.append(await read_line(racer))
            await racer.wait()
            await racer.aclose()
    assert sorted(outputs) == ["lost", "won"]
    winner = (left, right)[outputs.index("won")]
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        assert await store.cores.live_revision("notes") == winner
        moves = [e for e in await store.cores.history("notes") if e.action == "promote"]
    assert [(e.revision, e.previous) for e in moves] == [(winner, first), (first, None)]


@pytest.mark.parametrize("stage", ["in_gates", "before_mirror", "before_apply"])
async def test_a_promoter_killed_at_any_point_leaves_store_and_ref_consistent(
    tmp_path: Path, stage: str
) -> None:
    path, first = make_core(tmp_path, "notes", manifest={"model": "test"})
    second = commit(path, {"agent.yaml": manifest_text({"id": "notes", "model": "test"})}, "v2")
    toml = write_config(tmp_path, path)
    async with child_process(
        [sys.executable, "-c", PROMOTER, str(toml), stage], env=env()
    ) as child:
        with anyio.fail_after(60):
            assert await read_line(child) == stage
        child.send_signal(signal.SIGKILL)
        await child.wait()
    expected = first if stage == "in_gates" else second
    async with Host.open(core_host_config(tmp_path, {"notes": path})) as host:
        result = await host.turns.run(request(core_id="notes"))
        history = await host.cores.history("notes")
        status = await host.cores.status("notes")
    assert result.core_revision == expected
    assert status.live == expected
    assert live_of(path) == expected  # mirrored, or healed by this open
    moves = [(e.action, e.revision) for e in history]
    if stage == "in_gates":
        assert moves == [("promote", first)]
    else:
        assert moves == [("promote", second), ("promote", first)]
