"""StateRuntime: authored state with compare-and-set, two scopes, refused once the turn ended.

Clauses: "StateRuntime on the transactional store: per-core/session state with
compare-and-set; authored get() and set() are not silently transactional
together" and "foreground completion rejects late slot/tool writes". The
tools here belong to a Python agent (its name is its core id): tools of
every agent get the same ``ctx`` SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.cores import CORE_SCOPE, StateRuntime
from hostkit.effects import AuthorState, ToolContext, tool
from hostkit.errors import LeaseLost, StateConflict
from hostkit.store import SessionLease
from hostkit.testing import CallTools, Reply, ScriptedModel
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio


async def test_versions_and_compare_and_set(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @tool("state.exercise")
    async def exercise(ctx: ToolContext) -> str:
        assert ctx.state is not None
        seen["absent"] = await ctx.state.get("k")
        seen["v1"] = await ctx.state.set("k", {"a": 1}, expected=None)
        for name, expected in (("create_again", None), ("stale", 5)):
            try:
                await ctx.state.set("k", name, expected=expected)
            except StateConflict as exc:
                seen[name] = (exc.expected, exc.actual)
        seen["after_conflicts"] = await ctx.state.get("k")
        seen["v2"] = await ctx.state.set("k", [1, 2], expected=1)
        seen["v3"] = await ctx.state.set("k", "anything")
        entry = await ctx.state.entry("k")
        assert entry is not None
        seen["entry"] = (entry.value, entry.version)
        return "done"

    model = ScriptedModel([CallTools(("state_exercise", {})), Reply("ok")])
    async with open_host(tmp_path, model, tools=[exercise]) as host:
        result = await host.turns.run(request())
        stored = await host.store.cores.state_get("assistant", result.session_id, "k")
    assert result.outcome == "completed"
    assert result.effects[0].status == "succeeded"
    assert seen["absent"] is None
    assert (seen["v1"], seen["v2"], seen["v3"]) == (1, 2, 3)
    # None = create-only; an int must be the current version; neither wrote anything.
    assert seen["create_again"] == (None, 1)
    assert seen["stale"] == (5, 1)
    assert seen["after_conflicts"] == {"a": 1}
    assert seen["entry"] == ("anything", 3)
    assert stored is not None
    assert (stored.value, stored.version) == ("anything", 3)


async def test_session_scope_is_per_session_and_core_scope_is_shared(tmp_path: Path) -> None:
    reads: list[tuple[Any, Any]] = []

    @tool("state.mark")
    async def mark(ctx: ToolContext, label: str) -> str:
        assert ctx.state is not None
        assert ctx.core_state is not None
        reads.append((await ctx.state.get("who"), await ctx.core_state.get("who")))
        await ctx.state.set("who", label)
        await ctx.core_state.set("who", label)
        return label

    model = ScriptedModel(
        [
            CallTools(("state_mark", {"label": "first"})),
            Reply("ok"),
            CallTools(("state_mark", {"label": "second"})),
            Reply("ok"),
        ]
    )
    async with open_host(tmp_path, model, tools=[mark]) as host:
        first = await host.turns.run(request(conversation="one"))
        second = await host.turns.run(request(conversation="two"))
        cores = host.store.cores
        first_keys = await cores.state_keys("assistant", first.session_id)
        core_keys = await cores.state_keys("assistant", CORE_SCOPE)
    assert first.session_id != second.session_id
    # The second session starts with no session state, but sees the core-wide value.
    assert reads == [(None, None), (None, "first")]
    assert [(e.key, e.value) for e in first_keys] == [("who", "first")]
    assert [(e.key, e.value, e.version) for e in core_keys] == [("who", "second", 2)]


async def test_a_write_after_the_turn_ended_is_refused(tmp_path: Path) -> None:
    kept: dict[str, Any] = {}

    @tool("state.keep")
    async def keep(ctx: ToolContext) -> str:
        # What a detached task started by the tool would hold on to.
        kept["state"], kept["session"] = ctx.core_state, ctx.session_id
        kept["lease"] = await host.store.turns.session_lease(ctx.session_id)
        assert ctx.core_state is not None
        await ctx.core_state.set("n", 1)
        return "kept"

    model = ScriptedModel([CallTools(("state_keep", {})), Reply("ok")])
    async with open_host(tmp_path, model, tools=[keep]) as host:
        result = await host.turns.run(request())
        assert result.outcome == "completed"
        handle: AuthorState = kept["state"]
        with pytest.raises(LeaseLost):
            await handle.set("n", 2)
        # The durable fence: a handle opened with the ended turn's real lease (as a
        # writer in another process would hold it) is refused by the store itself.
        lease: SessionLease = kept["lease"]
        assert lease.turn_id == result.turn_id
        stale = StateRuntime(host.store).open(
            core_id="assistant", session_id=kept["session"], lease=lease
        )
        with pytest.raises(LeaseLost):
            await stale.core.set("n", 3)
        entry = await host.store.cores.state_get("assistant", CORE_SCOPE, "n")
        # Reading stays possible; nothing late was written.
        assert await handle.get("n") == 1
    assert entry is not None
    assert (entry.value, entry.version) == (1, 1)
