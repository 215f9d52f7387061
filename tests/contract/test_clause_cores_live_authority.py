"""Clause: the Host owns the live revision: the store records it, the Git ref only mirrors it.

Only a gated promotion or a rollback changes what runs (``CoreStore.move_live``, a
compare-and-swap in one transaction with its history row). Whatever the core's
repository says (``git update-ref`` to a commit never promoted, a symlinked ref
file or a symbolic ref following a branch), the promoted revision runs; the Host
warns and points the ref back, replacing the symlink or symbolic ref instead of
writing through it (the branch is left alone).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from dulwich.repo import Repo

from hostkit.errors import InvalidValue, PromotionRefused, StaleClaim
from hostkit.host import DEFAULT_CORE_REF, Host
from hostkit.store import MAX_CORE_HISTORY, RuntimeStore
from hostkit.types import CoreEvent, GateOutcome
from tests.contract._store_adapters import ADAPTERS
from tests.cores_support import (
    commit,
    core_host_config,
    core_registry,
    live_of,
    make_core,
    manifest_text,
    move_ref,
)
from tests.hosts import request

pytestmark = pytest.mark.anyio

EVIL = {
    "mcp": {"evil": {"command": ["/bin/sh", "-c", "exit 0"]}},
    "capabilities": {"mcp.connect:evil": "allow"},
}
FAILING = {"tests/test_x.py": "def test_x():\n    assert False\n"}


def manifest(instructions: str, **extra: object) -> str:
    return manifest_text(
        {"id": "notes", "model": "test", "memory": False, "instructions": instructions, **extra}
    )


def move(core_id: str, revision: str, previous: str | None) -> CoreEvent:
    return CoreEvent(
        core_id=core_id,
        action="promote",
        revision=revision,
        previous=previous,
        gates=(GateOutcome("tests", True),),
        actor="ops",
        at=1.0,
    )


async def test_move_live_is_a_compare_and_swap_with_its_history_row(store: RuntimeStore) -> None:
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    assert await store.cores.live_revision("notes") is None
    first = await store.cores.move_live(move("notes", a, None))
    assert first.event_id > 0
    assert await store.cores.live_revision("notes") == a
    with pytest.raises(StaleClaim, match="core live revision"):
        await store.cores.move_live(move("notes", c, None))  # not the live one
    with pytest.raises(StaleClaim):
        await store.cores.move_live(move("notes", c, b))
    await store.cores.move_live(move("notes", b, a))
    refused = CoreEvent("notes", "refused", c, b, (GateOutcome("tests", False),), "ops", 2.0)
    await store.cores.record_event(refused)
    with pytest.raises(InvalidValue, match="move_live"):
        await store.cores.record_event(move("notes", c, b))  # a move must be compared
    with pytest.raises(InvalidValue):
        await store.cores.move_live(refused)
    assert await store.cores.live_revision("notes") == b  # a refused row is not a move
    assert await store.cores.live_revision("other") is None
    history = await store.cores.history("notes")
    assert [(e.action, e.revision) for e in history] == [
        ("refused", c),
        ("promote", b),
        ("promote", a),
    ]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_moves_are_read_past_any_number_of_refused_promotions(
    store: RuntimeStore, adapter: str
) -> None:
    """A CI job retrying a broken commit records a refusal each time: what was live, and
    what may be rolled back to, are still read from the moves, however many refusals
    came after them."""
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    await store.cores.move_live(move("notes", a, None))
    await store.cores.move_live(move("notes", b, a))
    refused = CoreEvent("notes", "refused", c, b, (GateOutcome("tests", False),), "ops", 2.0)
    for _ in range(MAX_CORE_HISTORY + 1):
        await store.cores.record_event(refused)
    assert {e.action for e in await store.cores.history("notes", limit=MAX_CORE_HISTORY)} == {
        "refused"
    }
    moves = await store.cores.history("notes", moves_only=True)
    assert [(e.revision, e.previous) for e in moves] == [(b, a), (a, None)]
    assert [e.revision for e in await store.cores.history(moves_only=True, limit=1)] == [b]
    assert await store.cores.was_live("notes", a)
    assert await store.cores.was_live("notes", b)
    assert not await store.cores.was_live("notes", c)  # refused, never live
    assert not await store.cores.was_live("other", a)
    for bad in ("a" * 12, "A" * 40, "g" * 40, 40):
        with pytest.raises(InvalidValue, match="full commit id"):
            await store.cores.was_live("notes", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="moves_only"):
        await store.cores.history("notes", moves_only="yes")  # type: ignore[arg-type]


async def test_an_ungated_commit_named_by_the_ref_never_runs_and_the_ref_is_healed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("v1"))
    config = core_host_config(tmp_path, {"notes": path})
    bad = commit(path, {"agent.yaml": manifest("v2", **EVIL), **FAILING}, "ungated")
    async with Host.open(config) as host:
        with pytest.raises(PromotionRefused):
            await host.cores.promote("notes", actor="ops")
    move_ref(path, bad)  # git update-ref refs/hostkit/live <bad>
    with caplog.at_level(logging.WARNING, logger="hostkit.cores"):
        async with Host.open(config) as host:
            result = await host.turns.run(request(core_id="notes"))
            status = await host.cores.status("notes")
            agent = host.config.agents["notes"]
            warnings = host.warnings
    assert result.core_revision == first
    assert status.live == first
    assert agent.instructions == "v1"
    assert agent.mcp == {}
    (warning,) = [line for line in warnings if "moved outside hostkit" in line]
    assert f"the promoted revision {first[:12]} runs" in warning
    assert any("moved outside hostkit" in record.getMessage() for record in caplog.records)
    assert live_of(path) == first  # healed


@pytest.mark.parametrize("kind", ["symlink", "symbolic"])
async def test_a_ref_that_follows_a_branch_is_replaced_not_written_through(
    tmp_path: Path, kind: str
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("v1"))
    config = core_host_config(tmp_path, {"notes": path})
    ref_file = path / ".git" / "refs" / "hostkit" / "live"
    ref_file.unlink()
    if kind == "symlink":
        os.symlink("../heads/master", ref_file)
    else:
        ref_file.write_text("ref: refs/heads/master\n")
    head = commit(path, {"agent.yaml": manifest("straight from a commit", **EVIL)}, "v3")
    assert live_of(path) == head  # the ref now follows the branch
    async with Host.open(config) as host:
        result = await host.turns.run(request(core_id="notes"))
    assert result.core_revision == first
    assert not ref_file.is_symlink()
    assert ref_file.read_text().strip() == first
    with Repo(str(path)) as repo:
        assert repo.refs[b"refs/heads/master"].decode() == head  # the branch is untouched


async def test_status_log_and_rollback_read_the_store_not_the_ref(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("v1"))
    registry = core_registry(tmp_path, store, {"notes": path})
    second = commit(path, {"notes.md": "v2\n"}, "v2")
    await registry.promote("notes", actor="ops")
    third = commit(path, {"notes.md": "v3\n"}, "v3")
    move_ref(path, third)  # outside hostkit
    assert (await registry.status("notes")).live == second
    assert [info.sha for info in await registry.log("notes") if info.live] == [second]
    assert (await registry.diff("notes")).base == second
    event = await registry.rollback("notes", actor="ops", reason="v2 is wrong")
    assert (event.revision, event.previous) == (first, second)
    assert live_of(path) == first  # mirrored again
    assert live_of(path, DEFAULT_CORE_REF) == (await registry.status("notes")).live
