"""Bad tool behaviour and bad arguments end as typed results; the turn goes on.

An authored tool that raises ``SystemExit``, ``KeyboardInterrupt``,
``GeneratorExit`` or any other ``BaseException`` is a ``failed`` call in a
real Host turn, and the next model step sees it. So is a ``CancelledError``
the tool raises itself (alone or in a group, its message redacted); real
cancellation (a turn's cancel, a cancel scope) still propagates. Integers
wider than 64 bits and non-finite floats never reach a tool (``invalid``),
and lone surrogates in a tool's output (a file name decoded with
``surrogateescape``) are made safe before any view, so a later UTF-8 encode
(provider request, SQLite row) never fails.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalRequest,
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    PreparedEffectCatalog,
    ToolContext,
    ToolOutcome,
    Toolset,
    tool,
)
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import (
    EffectRequest,
    EffectResult,
    ModelRequest,
    TurnExecutionContext,
    TurnResult,
)
from tests.contract.test_context_basic import context_for
from tests.hosts import open_host, request, turn_rows
from tests.support import facts, table_rows

pytestmark = pytest.mark.anyio


class Ghost(BaseException):
    """A BaseException subclass a careless library might raise."""


def raising_tool(exc: BaseException) -> AuthoredTool:
    @tool("probe.raise")
    async def raise_it(ctx: ToolContext) -> str:
        """Raises."""
        raise exc

    return raise_it


def tool_messages(req: ModelRequest) -> list[str]:
    return [m.content for m in req.messages if m.role == "tool"]


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (GeneratorExit(), "GeneratorExit"),
        (Ghost("haunted"), "Ghost: haunted"),
    ],
    ids=["SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"],
)
async def test_a_tool_raising_a_base_exception_fails_the_call_and_the_turn_goes_on(
    tmp_path: Path, exc: BaseException, name: str
) -> None:
    seen: list[str] = []

    def after_failure(req: ModelRequest) -> Reply:
        seen.extend(tool_messages(req))
        return Reply("the tool failed, carrying on")

    model = ScriptedModel([CallTools(("probe_raise", {})), after_failure, Reply("second turn")])
    async with open_host(tmp_path, model, tools=[raising_tool(exc)]) as host:
        result = await host.turns.run(request("call it"))
        assert result.outcome == "completed", result.error
        assert [(e.effect, e.status) for e in result.effects] == [("probe.raise", "failed")]
        assert result.text == "the tool failed, carrying on"
        # The Host is still whole: the next turn runs.
        again = await host.turns.run(request("again"))
    assert seen == [f"[failed] {name}"]
    assert again.outcome == "completed"


async def runtime_for(
    authority: AuthorityResolver, tools: Sequence[AuthoredTool]
) -> tuple[EffectRuntime, PreparedEffectCatalog, TurnExecutionContext]:
    scope = await authority.for_conversation(facts("failures"))
    base = context_for(scope)
    context = TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": tuple(t.name for t in tools)},
    )

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(tuple((t, "test") for t in tools), EffectPolicy(), Path("/tmp"))

    runtime = EffectRuntime(toolsets=Tools())
    return runtime, await runtime.prepare_catalog(context), context


async def call(
    runtime: EffectRuntime,
    catalog: PreparedEffectCatalog,
    context: TurnExecutionContext,
    name: str,
    arguments: Mapping[str, Any],
) -> EffectResult:
    ref = catalog.resolve(name.replace(".", "_"))
    assert ref is not None
    return await runtime.execute(EffectRequest("c1", ref, arguments), context)


async def test_real_cancellation_still_propagates_through_the_pipeline(
    authority: AuthorityResolver,
) -> None:
    started = anyio.Event()

    @tool("probe.wait")
    async def wait(ctx: ToolContext) -> str:
        """Waits for ever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    runtime, catalog, context = await runtime_for(authority, [wait])
    finished: list[EffectResult] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            finished.append(await call(runtime, catalog, context, "probe.wait", {}))

        tg.start_soon(run)
        with anyio.fail_after(5):
            await started.wait()
        tg.cancel_scope.cancel()
    # Cancelled, not turned into a result: nothing came back from execute().
    assert finished == []
    assert tg.cancel_scope.cancelled_caught


class Point(BaseModel):
    x: float
    n: int


def numbers_tool(ran: list[Any]) -> AuthoredTool:
    @tool("probe.numbers")
    async def numbers(
        ctx: ToolContext,
        n: int = 0,
        x: float = 0.0,
        items: list[int] | None = None,
        point: Point | None = None,
        flag: bool = False,
    ) -> str:
        """Takes numbers."""
        ran.append((n, x, items, point, flag))
        return "ok"

    return numbers


@pytest.mark.parametrize(
    ("arguments", "where"),
    [
        ({"n": 2**63}, "n"),
        ({"n": -(2**63) - 1}, "n"),
        ({"n": 10**400}, "n"),
        ({"x": math.inf}, "x"),
        ({"x": -math.inf}, "x"),
        ({"x": math.nan}, "x"),
        ({"items": [1, 2, 2**64]}, "items.2"),
        ({"point": {"x": 1.0, "n": 2**70}}, "point.n"),
        ({"point": {"x": math.nan, "n": 1}}, "point.x"),
    ],
)
async def test_out_of_range_numbers_are_invalid_before_the_tool_runs(
    authority: AuthorityResolver, arguments: dict[str, Any], where: str
) -> None:
    ran: list[Any] = []
    runtime, catalog, context = await runtime_for(authority, [numbers_tool(ran)])
    result = await call(runtime, catalog, context, "probe.numbers", arguments)
    assert (result.status, result.started, ran) == ("invalid", False, [])
    assert result.error is not None
    assert where in result.error
    assert "64-bit" in result.error or "finite" in result.error


async def test_numbers_at_the_edges_of_the_range_reach_the_tool(
    authority: AuthorityResolver,
) -> None:
    ran: list[Any] = []
    runtime, catalog, context = await runtime_for(authority, [numbers_tool(ran)])
    edges = {"n": 2**63 - 1, "x": 1.7976931348623157e308, "items": [-(2**63)], "flag": True}
    result = await call(runtime, catalog, context, "probe.numbers", edges)
    assert result.status == "succeeded"
    assert ran[0][0] == 2**63 - 1


SURROGATE_NAME = "report-\udcff\udc80.txt"


@tool("probe.listing")
async def listing(ctx: ToolContext, fail: bool = False) -> Any:
    """Lists a directory whose file names are not UTF-8."""
    name = SURROGATE_NAME
    if fail:
        return ToolOutcome("failed", {name: [name]}, f"cannot open {name} \ud800")
    return {"entries": [name], name: {"size": 3}}


@pytest.mark.parametrize("fail", [False, True])
async def test_lone_surrogates_in_tool_output_are_made_safe_for_every_later_encode(
    tmp_path: Path, fail: bool
) -> None:
    model = ScriptedModel(
        [CallTools(("probe_listing", {"fail": fail})), Reply("listed"), Reply("next turn")]
    )
    async with open_host(tmp_path, model, tools=[listing]) as host:
        result = await host.turns.run(request("list it"))
        assert result.outcome == "completed", result.error
        # The session stays usable: the next turn replays the tool message.
        again = await host.turns.run(request("and again"))
        assert again.outcome == "completed", again.error
        rows = await host.store.read(lambda c: c.execute("SELECT content FROM messages").fetchall())
    (message,) = {m for r in model.requests for m in tool_messages(r)}
    message.encode("utf-8")  # a provider request would encode it exactly so
    # Each smuggled byte shows as its \xNN escape (JSON-encoded once more inside a structure).
    assert "report-\\xff\\x80.txt" in message.replace("\\\\", "\\")
    assert fail == ("\ufffd" in message)
    assert all(isinstance(row[0], str) for row in rows)


# --- a CancelledError a tool raises itself is not cancellation -----------------------

CANCEL_SECRET = "cancel-secret-Qx7-pässwörd"


class Approve:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        return "approve_once"


def bound_config(tmp_path: Path) -> HostConfig:
    agent = {"provider": "test", "memory": False, "policy": {"allow": ["*"]}}
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {**agent, "secrets": ["HK_CANCEL"]}},
        },
        base_dir=tmp_path,
    )


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda s: asyncio.CancelledError(f"boom {s}"), "CancelledError"),
        (lambda s: BaseExceptionGroup("g", [asyncio.CancelledError(s)]), "BaseExceptionGroup"),
        (
            lambda s: BaseExceptionGroup("g", [asyncio.CancelledError(s), ValueError(s)]),
            "BaseExceptionGroup",
        ),
    ],
    ids=["alone", "in_a_group", "in_a_mixed_group"],
)
async def test_a_cancelled_error_a_tool_raises_fails_the_call_redacted_and_the_turn_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[str], BaseException],
    name: str,
) -> None:
    monkeypatch.setenv("HK_CANCEL", CANCEL_SECRET)

    async def fake_cancel(ctx: ToolContext, secrets: list[str]) -> str:
        raise make(ctx.secrets["HK_CANCEL"])

    fake = AuthoredTool("probe.cancel", fake_cancel, description="d", secrets_argument="secrets")
    model = ScriptedModel(
        [CallTools(("probe_cancel", {"secrets": ["HK_CANCEL"]})), Reply("went on"), Reply("next")]
    )
    config = bound_config(tmp_path)
    caps = capabilities(model, tools=[fake])
    async with Host.open(config, capabilities=caps, approver=Approve()) as host:
        result = await host.turns.run(request("call it"))
        again = await host.turns.run(request("again"))
        statuses = [status for _, status in await turn_rows(host)]
    assert (result.outcome, result.text) == ("completed", "went on"), result.error
    assert [(e.effect, e.status) for e in result.effects] == [("probe.cancel", "failed")]
    assert (again.outcome, statuses) == ("completed", ["completed", "completed"])
    (message,) = {m for r in model.requests for m in tool_messages(r)}
    assert message.startswith(f"[failed] {name}")
    rows = await anyio.to_thread.run_sync(lambda: list(table_rows(config.database_path)))
    seen = [message, repr(result), *rows]
    assert not any(CANCEL_SECRET in text or "pässw" in text for text in seen)


async def test_an_explicit_turn_cancel_during_an_effect_still_ends_the_turn(
    tmp_path: Path,
) -> None:
    entered = anyio.Event()

    @tool("probe.block")
    async def block(ctx: ToolContext) -> str:
        """Blocks until cancelled."""
        entered.set()
        await anyio.sleep_forever()
        return "never"

    model = ScriptedModel([CallTools(("probe_block", {})), Reply("must not run")])
    async with open_host(tmp_path, model, tools=[block]) as host:
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request(conversation="mine")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(10):
                await entered.wait()
            turn_id = (await turn_rows(host))[-1][0]
            owner = await host.authority.for_conversation(facts("mine", "alice", "test"))
            answer = await host.turns.cancel(turn_id, owner)
    assert answer.disposition == "cancelled"
    # The effect was running when the turn was cancelled: it may have happened.
    assert results[0].outcome == "indeterminate"
    assert len(model.requests) == 1  # the turn did not go on to another step


async def test_a_cancel_scope_around_an_effect_still_propagates(
    authority: AuthorityResolver,
) -> None:
    scope = anyio.CancelScope()

    @tool("probe.self_cancel")
    async def self_cancel(ctx: ToolContext) -> str:
        """Cancels the scope around the call, then waits."""
        scope.cancel()
        await anyio.sleep_forever()
        return "never"

    runtime, catalog, context = await runtime_for(authority, [self_cancel])
    finished: list[EffectResult] = []
    with scope:
        finished.append(await call(runtime, catalog, context, "probe.self_cancel", {}))
    assert finished == []
    assert scope.cancelled_caught
