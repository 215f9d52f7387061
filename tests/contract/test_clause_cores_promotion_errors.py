"""Clause: bad input to the revision commands is a typed, bounded error that moves nothing.

An unknown core id is the one external answer ``NotFoundOrUnauthorized("core")``;
a revision that does not resolve (unknown, ambiguous, oversized, not a
string) and a bad limit are ``InvalidValue`` with a bounded one-line
message; promoting the live revision again is refused the same way. None of
them records an event or touches the ref.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.store import RuntimeStore
from tests.cores_support import core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

MANIFEST = {"model": "test", "instructions": "v1"}


@pytest.mark.parametrize("core_id", ["nope", "Notes", "../notes", "x" * 500])
async def test_an_unknown_core_is_not_found(
    tmp_path: Path, store: RuntimeStore, core_id: str
) -> None:
    path, _ = make_core(tmp_path, "notes", manifest=MANIFEST)
    registry = core_registry(tmp_path, store, {"notes": path})
    for call in (
        registry.status(core_id),
        registry.log(core_id),
        registry.diff(core_id),
        registry.history(core_id),
        registry.promote(core_id, actor="ops"),
        registry.rollback(core_id, actor="ops", reason="r"),
    ):
        with pytest.raises(NotFoundOrUnauthorized) as missing:
            await call
        assert str(missing.value) == "core not found"


@pytest.mark.parametrize(
    "revision", ["nope", "0" * 40, "deadbeef", "refs/heads/none", "x" * 10_000, "", "HEAD\nHEAD"]
)
async def test_a_revision_that_does_not_resolve_is_invalid(
    tmp_path: Path, store: RuntimeStore, revision: str
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    registry = core_registry(tmp_path, store, {"notes": path})
    with pytest.raises(InvalidValue) as bad:
        await registry.promote("notes", revision, actor="ops")
    assert len(str(bad.value)) <= 300
    assert "\n" not in str(bad.value)
    with pytest.raises(InvalidValue):
        await registry.diff("notes", target=revision)
    assert live_of(path) == first
    # Only the move that made the first revision live (make_core) is recorded.
    assert [event.action for event in await registry.history("notes")] == ["promote"]


async def test_limits_and_a_promotion_of_the_live_revision_are_refused(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    registry = core_registry(tmp_path, store, {"notes": path})
    for limit in (0, -1, 10_001, True):
        with pytest.raises(InvalidValue, match="limit"):
            await registry.log("notes", limit=limit)
        with pytest.raises(InvalidValue, match="limit"):
            await registry.history("notes", limit=limit)
    with pytest.raises(InvalidValue, match="already the live revision"):
        await registry.promote("notes", first[:8], actor="ops")
    # Only the move that made the first revision live (make_core) is recorded.
    assert [event.action for event in await registry.history("notes")] == ["promote"]
