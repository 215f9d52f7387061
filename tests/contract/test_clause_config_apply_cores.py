"""Clause: a core's live revision moved by someone else (another process's promotion,
recorded in the shared store) is a change ``reload()`` and the watcher pick up; a commit
that only moves HEAD is not, and neither is the Git ref moved alone (it only mirrors the
store); a live revision that does not load (a bad ``agent.yaml``, a ``model`` naming no
provider) is rejected whole while generation N keeps serving the old commit.

Real Git repositories (dulwich) and the real store: the move is recorded in the database
from another connection (its own event loop), as another process would, never through
this Host.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.host import ConfigWatcher, Host, HostConfig, ReloadOutcome
from tests.cores_support import (
    commit,
    core_host_config,
    live_of,
    make_core,
    manifest_text,
    set_live,
)
from tests.cores_support import move_ref as git_update_ref
from tests.hosts import request

pytestmark = pytest.mark.anyio


def manifest(instructions: str, *, model: str = "test", **extra: object) -> str:
    return manifest_text(
        {"id": "notes", "model": model, "instructions": instructions, "memory": False, **extra}
    )


def config_for(tmp_path: Path, core: Path) -> HostConfig:
    return core_host_config(
        tmp_path,
        {"notes": core},
        providers={"test": {"kind": "scripted", "script": [{"reply": "ok"}] * 4}},
    )


def move_ref(path: Path, old: str, new: str) -> None:
    """Another process's promotion: the move recorded in the shared store, the ref mirrored."""
    assert live_of(path) == old
    set_live(path, new)


async def test_a_move_recorded_elsewhere_is_picked_up_but_a_new_head_or_ref_is_not(
    tmp_path: Path,
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    async with Host.open(config_for(tmp_path, path)) as host:
        before = await host.turns.run(request(core_id="notes"))
        second = commit(path, {"agent.yaml": manifest("second revision")}, "second")
        head_only = await host.reload()
        git_update_ref(path, second)  # the ref alone: not a promotion
        ref_only = await host.reload()
        git_update_ref(path, first)
        move_ref(path, first, second)
        moved = await host.reload()
        after = await host.turns.run(request(core_id="notes", conversation="c2"))
        instructions = host.config.agents["notes"].instructions
        again = await host.reload()
    assert (before.generation, before.core_revision) == (1, first)
    assert head_only == ReloadOutcome(generation=1, applied=False)
    assert ref_only == ReloadOutcome(generation=1, applied=False)
    assert moved.applied
    assert moved.changes == (f"core 'notes' moved {first[:12]} -> {second[:12]}",)
    assert (after.generation, after.core_revision) == (2, second)
    assert instructions == "second revision"
    assert again == ReloadOutcome(generation=2, applied=False)


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (manifest("x", capabilites={}), "agent.yaml line"),
        (manifest("x", model="nowhere"), "model"),
    ],
    ids=["unknown agent.yaml field", "model names no provider"],
)
async def test_a_live_revision_that_does_not_load_is_rejected_whole(
    tmp_path: Path, broken: str, named: str
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    async with Host.open(config_for(tmp_path, path)) as host:
        bad = commit(path, {"agent.yaml": broken}, "broken")
        move_ref(path, first, bad)
        outcome = await host.reload()
        served = await host.turns.run(request(core_id="notes"))
    assert outcome.rejected
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert "notes" in outcome.reason
    assert named in outcome.reason
    assert (served.generation, served.core_revision) == (1, first)


async def test_the_watcher_picks_up_a_move_recorded_by_another_process(tmp_path: Path) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    second = commit(path, {"agent.yaml": manifest("second revision")}, "second")
    send, outcomes = anyio.create_memory_object_stream[ReloadOutcome](4)
    async with Host.open(config_for(tmp_path, path)) as host, send, outcomes:
        watcher = ConfigWatcher(host, interval_s=0.1, on_outcome=send.send_nowait)
        async with anyio.create_task_group() as group:
            await group.start(watcher.run)
            await anyio.to_thread.run_sync(move_ref, path, first, second)
            with anyio.fail_after(10):
                outcome = await outcomes.receive()
            await watcher.stop()
        after = await host.turns.run(request(core_id="notes"))
    assert (outcome.applied, outcome.generation) == (True, 2)
    assert after.core_revision == second
