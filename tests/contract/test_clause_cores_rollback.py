"""Clause: rollback moves the Host-owned ref back, and records it.

"rollback moves the ref back": without ``to`` to the revision live before
the current one, with ``to`` to any revision that was live before; a
revision that never was live, or nothing to go back to, is an
``InvalidValue`` and moves nothing. Every rollback is recorded and calls the
Host's ``on_moved`` hook like a promotion.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import ConfigError, InvalidValue, PromotionRefused
from hostkit.store import MAX_CORE_HISTORY, RuntimeStore
from hostkit.types import CoreEvent, GateOutcome
from tests.cores_support import commit, core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

MANIFEST = {"id": "notes", "model": "test", "instructions": "v1"}


async def test_rollback_returns_to_the_previous_live_revision_and_records(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    moved: list[str] = []

    async def on_moved(core_id: str, revision: str) -> None:
        moved.append(revision)

    registry = core_registry(tmp_path, store, {"notes": path}, on_moved=on_moved)
    await registry.promote("notes", actor="ops")
    with pytest.raises(InvalidValue, match="no earlier live revision"):
        await registry.rollback("notes", actor="ops", reason="nothing before")
    second = commit(path, {"notes.md": "v2\n"}, "v2")
    await registry.promote("notes", actor="ops")

    event = await registry.rollback("notes", actor="ops", reason="v2 answers wrong")
    assert event.action == "rollback"
    assert event.revision == first
    assert event.previous == second
    assert event.reason == "v2 answers wrong"
    assert [(gate.gate, gate.passed) for gate in event.gates] == [("manifest", True)]
    assert live_of(path) == first
    assert moved == [first, second, first]
    history = await registry.history("notes")
    assert [e.action for e in history] == ["rollback", "promote", "promote"]
    assert history[0].event_id > history[1].event_id

    # Forward again with ``to``: any revision that was live before.
    again = await registry.rollback("notes", actor="ops", reason="fixed upstream", to=second[:12])
    assert again.revision == second
    assert live_of(path) == second


async def test_rollback_refuses_a_revision_that_was_never_live(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    registry = core_registry(tmp_path, store, {"notes": path})
    with pytest.raises(InvalidValue, match="no live revision"):
        await registry.rollback("notes", actor="ops", reason="r")
    await registry.promote("notes", actor="ops")
    never = commit(path, {"notes.md": "never promoted\n"}, "draft")
    with pytest.raises(InvalidValue, match="never live"):
        await registry.rollback("notes", actor="ops", reason="r", to=never)
    with pytest.raises(InvalidValue, match="already the live revision"):
        await registry.rollback("notes", actor="ops", reason="r", to=first)
    with pytest.raises(InvalidValue, match="reason"):
        await registry.rollback("notes", actor="ops", reason=" ")
    assert live_of(path) == first
    assert [e.action for e in await registry.history("notes")] == ["promote"]


async def test_rollback_works_after_more_refused_promotions_than_history_pages_hold(
    tmp_path: Path, store: RuntimeStore
) -> None:
    """A CI job retrying a broken HEAD records a refusal each time; rollback (to the one
    before, or ``to`` any revision once live) must still find the moves behind them."""
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    registry = core_registry(tmp_path, store, {"notes": path})
    await registry.promote("notes", actor="ops")
    second = commit(path, {"notes.md": "v2\n"}, "v2")
    await registry.promote("notes", actor="ops")
    broken = commit(path, {"tests/test_x.py": "def test_x():\n    assert False\n"}, "broken")
    refusal = CoreEvent(
        "notes", "refused", broken, second, (GateOutcome("tests", False),), "ci", 1.0
    )
    for _ in range(MAX_CORE_HISTORY):
        await store.cores.record_event(refusal)

    back = await registry.rollback("notes", actor="ops", reason="v2 answers wrong")
    assert (back.revision, back.previous) == (first, second)
    forward = await registry.rollback("notes", actor="ops", reason="fixed", to=second)
    assert (forward.revision, forward.previous) == (second, first)
    assert live_of(path) == second
    with pytest.raises(InvalidValue, match="never live"):
        await registry.rollback("notes", actor="ops", reason="r", to=broken)


async def test_a_rollback_target_that_no_longer_loads_is_refused(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    registry = core_registry(tmp_path, store, {"notes": path})
    await registry.promote("notes", actor="ops")
    second = commit(path, {"notes.md": "v2\n"}, "v2")
    await registry.promote("notes", actor="ops")
    broken = {"validate": False}

    async def validate(loaded: object) -> None:
        if broken["validate"]:
            raise ConfigError("provider 'test' was removed from hostkit.toml", key="model")

    registry = core_registry(tmp_path, store, {"notes": path}, validate=validate)
    broken["validate"] = True
    with pytest.raises(PromotionRefused, match="provider 'test' was removed"):
        await registry.rollback("notes", actor="ops", reason="r")
    assert live_of(path) == second
    refused = (await registry.history("notes"))[0]
    assert refused.action == "refused"
    assert refused.revision == first
