"""Clause: of two concurrent moves of a core's live revision, exactly one wins.

The store records the live revision with a compare-and-swap from the revision
that was live when the promotion started (``CoreStore.move_live``). Two
promotions of different revisions that both passed their gates race for it:
one moves it, the other is refused ("the live revision changed during
promotion") and recorded, and the ref mirrors the winner. A competing move
recorded by another process (its own store connection) during the gates
refuses the promotion the same way.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.cores import LoadedCore
from hostkit.errors import PromotionRefused
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_registry, live_of, make_core, set_live

pytestmark = pytest.mark.anyio

MANIFEST = {"id": "notes", "model": "test", "instructions": "v1"}
RACE_LOST = "the live revision changed during promotion"


async def test_two_concurrent_promotions_one_wins(tmp_path: Path, store: RuntimeStore) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    left = commit(path, {"notes.md": "left\n"}, "left")
    right = commit(path, {"notes.md": "right\n"}, "right")
    arrived = 0
    both = anyio.Event()

    async def validate(loaded: LoadedCore) -> None:
        # Both promotions have read the same live revision before either moves it.
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        with anyio.fail_after(10):
            await both.wait()

    registry = core_registry(tmp_path, store, {"notes": path}, validate=validate)
    outcomes: dict[str, object] = {}

    async def promote(revision: str) -> None:
        try:
            outcomes[revision] = await registry.promote("notes", revision, actor=revision[:7])
        except PromotionRefused as exc:
            outcomes[revision] = exc

    async with anyio.create_task_group() as group:
        group.start_soon(promote, left)
        group.start_soon(promote, right)

    refused = [rev for rev, outcome in outcomes.items() if isinstance(outcome, PromotionRefused)]
    won = [rev for rev in outcomes if rev not in refused]
    assert len(won) == 1
    assert len(refused) == 1
    lost = outcomes[refused[0]]
    assert isinstance(lost, PromotionRefused)
    assert lost.gates[-1].gate == "live_ref"
    assert lost.gates[-1].detail == RACE_LOST
    assert live_of(path) == won[0]
    events = await registry.history("notes")
    assert sorted((e.action, e.revision, e.previous) for e in events) == sorted(
        [("promote", won[0], first), ("refused", refused[0], first), ("promote", first, None)]
    )


async def test_a_move_by_another_process_during_the_gates_refuses(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    other = commit(path, {"notes.md": "other\n"}, "another promoter's revision")
    candidate = commit(path, {"notes.md": "mine\n"}, "mine")
    moved: list[str] = []

    async def validate(loaded: LoadedCore) -> None:
        # Another process's promotion: recorded through its own store connection.
        await anyio.to_thread.run_sync(set_live, path, other)

    async def on_moved(core_id: str, revision: str) -> None:
        moved.append(revision)

    registry = core_registry(tmp_path, store, {"notes": path}, validate=validate, on_moved=on_moved)
    with pytest.raises(PromotionRefused, match="the live revision changed") as refused:
        await registry.promote("notes", candidate, actor="ops")
    assert [gate.passed for gate in refused.value.gates][:-1] == [True, True, True, True]
    assert live_of(path) == other
    assert moved == []
    event, theirs, _made_live = await registry.history("notes")
    assert (event.action, event.revision, event.previous) == ("refused", candidate, first)
    assert (theirs.action, theirs.revision, theirs.previous) == ("promote", other, first)
    assert (await registry.status("notes")).live == other
