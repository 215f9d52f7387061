"""EffectRuntime (first slice): catalog seam, the pipeline's checks, statuses, bounded views."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.effects import (
    AuthoredTool,
    EffectCollision,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    Toolset,
    tool,
)
from hostkit.errors import InvalidValue
from hostkit.types import EffectRequest, ResolvedEffectRef, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

calls: list[str] = []


@tool("files.count")
async def count(ctx: ToolContext, path: str, limit: int = 10) -> str:
    """Count things."""
    calls.append(path)
    return f"{path}:{limit}"


@tool("slow.sleep", timeout_s=0.05)
async def sleepy(ctx: ToolContext) -> str:
    """Takes too long."""
    await anyio.sleep(10)
    return "late"


@tool("loud.print")
async def loud(ctx: ToolContext) -> str:
    """Returns a huge output."""
    return "x" * 50_000


@tool("bad.raise")
async def bad(ctx: ToolContext) -> str:
    """Fails."""
    raise RuntimeError("token=abc123 " + "y" * 2000)


class Tools:
    def __init__(self, tools: list[AuthoredTool], policy: EffectPolicy | None = None) -> None:
        self.tools = tools
        self.policy = policy or EffectPolicy()

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        return Toolset(tuple((t, "test") for t in self.tools), self.policy, Path("/tmp"))


async def prepared(authority, tools, *, snapshot=None, policy=None):  # type: ignore[no-untyped-def]
    scope = await authority.for_conversation(facts("c"))
    base = context_for(scope)
    names = snapshot if snapshot is not None else tuple(t.name for t in tools)
    context = TurnExecutionContext(
        **{
            field: getattr(base, field)
            for field in base.__dataclass_fields__
            if field != "capability_snapshot"
        },
        capability_snapshot={"effects": names},
    )
    runtime = EffectRuntime(toolsets=Tools(tools, policy))
    catalog = await runtime.prepare_catalog(context)
    return runtime, catalog, context


async def test_catalog_exposes_definitions_and_opaque_references(authority) -> None:  # type: ignore[no-untyped-def]
    runtime, catalog, context = await prepared(authority, [count])
    (definition,) = catalog.definitions
    assert definition.name == "files_count"
    assert definition.parameters["required"] == ("path",)
    assert definition.parameters["properties"]["limit"]["default"] == 10
    ref = catalog.resolve("files_count")
    assert isinstance(ref, ResolvedEffectRef)
    assert ref.effect == "files.count"
    assert catalog.resolve("files.count") is None
    result = await runtime.execute(EffectRequest("c1", ref, {"path": "a"}), context)
    assert (result.status, result.started, result.views.model) == ("succeeded", True, "a:10")


async def test_effects_outside_the_capability_snapshot_are_not_in_the_catalog(authority) -> None:  # type: ignore[no-untyped-def]
    _, catalog, _ = await prepared(authority, [count, loud], snapshot=("files.count",))
    assert [d.name for d in catalog.definitions] == ["files_count"]


async def test_invalid_arguments_never_reach_the_tool(authority) -> None:  # type: ignore[no-untyped-def]
    calls.clear()
    runtime, catalog, context = await prepared(authority, [count])
    ref = catalog.resolve("files_count")
    assert ref is not None
    for arguments in ({}, {"path": 3}, {"path": "a", "extra": 1}, {"path": "a", "limit": "x"}):
        result = await runtime.execute(EffectRequest("c", ref, arguments), context)
        assert (result.status, result.started) == ("invalid", False)
    assert calls == []


async def test_policy_denial_happens_before_invocation(authority) -> None:  # type: ignore[no-untyped-def]
    calls.clear()
    policy = EffectPolicy(allow=("*",), deny=("files.*",))
    runtime, catalog, context = await prepared(authority, [count], policy=policy)
    ref = catalog.resolve("files_count")
    assert ref is not None
    result = await runtime.execute(EffectRequest("c", ref, {"path": "a"}), context)
    assert (result.status, result.started) == ("denied", False)
    assert calls == []


async def test_foreign_or_closed_references_are_not_found(authority) -> None:  # type: ignore[no-untyped-def]
    runtime, catalog, context = await prepared(authority, [count])
    forged = ResolvedEffectRef("cat_other", "eff_x", "files.count")
    assert (await runtime.execute(EffectRequest("c", forged, {}), context)).status == "not_found"
    ref = catalog.resolve("files_count")
    assert ref is not None
    await runtime.close_catalog(catalog)
    result = await runtime.execute(EffectRequest("c", ref, {"path": "a"}), context)
    assert (result.status, result.started) == ("not_found", False)


async def test_a_catalog_refuses_another_turns_context(authority) -> None:  # type: ignore[no-untyped-def]
    runtime, catalog, _ = await prepared(authority, [count])
    other = context_for(await authority.for_conversation(facts("other")), "turn_other")
    ref = catalog.resolve("files_count")
    assert ref is not None
    result = await runtime.execute(EffectRequest("c", ref, {"path": "a"}), other)
    assert result.status == "denied"


async def test_deadline_failure_and_bounded_views(authority) -> None:  # type: ignore[no-untyped-def]
    runtime, catalog, context = await prepared(authority, [sleepy, loud, bad])

    async def run(name: str):  # type: ignore[no-untyped-def]
        ref = catalog.resolve(name)
        assert ref is not None
        return await runtime.execute(EffectRequest("c", ref, {}), context)

    timed_out = await run("slow_sleep")
    assert (timed_out.status, timed_out.started) == ("timed_out", True)
    big = await run("loud_print")
    assert big.status == "succeeded"
    assert len(big.views.model) < 8_200
    assert "truncated" in big.views.model
    assert big.views.event["output_chars"] == 50_000
    failed = await run("bad_raise")
    assert failed.status == "failed"
    assert failed.error is not None
    assert len(failed.error) <= 300
    assert "abc123" not in failed.error
    assert "abc123" not in str(dict(failed.views.operator))


def test_authored_tools_are_validated_at_definition() -> None:
    with pytest.raises(InvalidValue, match="async"):

        @tool("sync.tool")
        def not_async(ctx: ToolContext) -> str:  # type: ignore[misc]
            return ""

    with pytest.raises(InvalidValue, match="dotted"):

        @tool("Bad Name")
        async def badly_named(ctx: ToolContext) -> str:
            return ""

    with pytest.raises(InvalidValue, match="kwargs"):

        @tool("var.kw")
        async def var_kw(ctx: ToolContext, **rest: str) -> str:
            return ""


async def test_provider_name_collisions_fail_with_both_provenances(authority) -> None:  # type: ignore[no-untyped-def]
    @tool("a.b_c")
    async def one(ctx: ToolContext) -> str:
        """One."""
        return ""

    @tool("a_b.c")
    async def two(ctx: ToolContext) -> str:
        """Two."""
        return ""

    with pytest.raises(EffectCollision, match=r"'a\.b_c' from test and 'a_b\.c' from test") as err:
        await prepared(authority, [one, two])
    assert (err.value.first, err.value.second) == (("a.b_c", "test"), ("a_b.c", "test"))


async def test_a_view_rendering_failure_turns_every_view_into_one_fixed_failure(
    authority, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from hostkit.effects import _views

    runtime, catalog, context = await prepared(authority, [count])
    ref = catalog.resolve("files_count")
    assert ref is not None

    def broken(value):  # type: ignore[no-untyped-def]
        raise RuntimeError("redactor bug")

    monkeypatch.setattr(_views, "bounded_data", broken)
    result = await runtime.execute(EffectRequest("c", ref, {"path": "secret-path"}), context)
    assert result.status == "failed"
    assert result.error == _views.REDACTION_FAILED
    views = result.views
    assert views.operator == views.event == views.durable == views.debug
    assert "secret-path" not in views.model
    assert "secret-path" not in str(dict(views.operator))
