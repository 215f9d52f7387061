"""The effect pipeline: its order, all eight statuses, the five views, and secret binding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRuntime,
    AuthoredTool,
    BuiltinOutcome,
    EffectPolicy,
    EffectRuntime,
    PreparedEffectCatalog,
    ToolContext,
    ToolOutcome,
    Toolset,
    secret_grant,
    tool,
)
from hostkit.errors import InvalidValue, RuntimeFailure, UserError
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-VALUE-42"
ARGUMENT = "visible-argument-9f1"


@dataclass
class Trace:
    """What ran, in order: checks and the tool body append here."""

    steps: list[str] = field(default_factory=list)
    secrets: list[Mapping[str, str]] = field(default_factory=list)


def make_tools(trace: Trace) -> list[AuthoredTool]:
    @tool("probe.ok")
    async def ok(ctx: ToolContext, text: str = "") -> str:
        """Succeeds."""
        trace.steps.append("invoke")
        return f"ok ({len(text)} chars)"

    @tool("probe.raise")
    async def boom(ctx: ToolContext) -> str:
        """Fails."""
        raise RuntimeError("adapter exploded")

    @tool("probe.slow", timeout_s=0.05)
    async def slow(ctx: ToolContext) -> str:
        """Times out."""
        await anyio.sleep(5)
        return "late"

    async def verdict(ctx: ToolContext, status: str) -> ToolOutcome:
        trace.steps.append("invoke")
        return ToolOutcome(status, {"said": status}, f"tool says {status}")  # type: ignore[arg-type]

    async def unprintable(ctx: ToolContext) -> ToolOutcome:
        trace.steps.append("invoke")
        return ToolOutcome("failed", "partial output", _Unprintable())  # type: ignore[arg-type]

    def checked(arguments: Mapping[str, Any]) -> None:
        trace.steps.append("preflight")
        if arguments.get("text") == "refuse":
            raise UserError("preflight refused")

    async def echo(ctx: ToolContext, secrets: list[str], text: str = "") -> str:
        trace.steps.append("invoke")
        trace.secrets.append(dict(ctx.secrets))
        return " ".join([text, *ctx.secrets.values()])

    return [
        ok,
        boom,
        slow,
        AuthoredTool("probe.verdict", verdict, description="Reports a status."),
        AuthoredTool("probe.unprintable", unprintable, description="Reports an odd error."),
        AuthoredTool("probe.checked", ok.fn, description="Preflighted.", preflight=checked),
        AuthoredTool("probe.echo", echo, description="Echoes secrets.", secrets_argument="secrets"),
    ]


class _Unprintable:
    """An error object a careless tool reports, whose text cannot be made."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


class Tools:
    def __init__(self, tools: Sequence[AuthoredTool], policy: EffectPolicy) -> None:
        self.tools, self.policy = tools, policy

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        return Toolset(tuple((t, "test") for t in self.tools), self.policy, Path("/tmp"))


class Approver:
    def __init__(self, trace: Trace, decision: ApprovalDecision) -> None:
        self.trace, self.decision = trace, decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.trace.steps.append("approval")
        self.seen.append(request)
        return self.decision


@dataclass
class Pipeline:
    runtime: EffectRuntime
    catalog: PreparedEffectCatalog
    context: TurnExecutionContext
    trace: Trace
    approver: Approver

    async def run(self, name: str, arguments: Mapping[str, Any] | None = None) -> EffectResult:
        ref = self.catalog.resolve(name.replace(".", "_"))
        assert ref is not None, name
        return await self.runtime.execute(
            EffectRequest(f"call-{len(self.trace.steps)}", ref, arguments or {}), self.context
        )


async def pipeline(
    authority: AuthorityResolver,
    *,
    policy: EffectPolicy | None = None,
    decision: ApprovalDecision = "approve_once",
    snapshot: Sequence[str] | None = None,
    secrets: Sequence[str] = ("HK_TOKEN",),
    environ: Mapping[str, str] | None = None,
) -> Pipeline:
    trace = Trace()
    tools = make_tools(trace)
    scope = await authority.for_conversation(facts("pipeline"))
    base = context_for(scope)
    names = tuple(snapshot) if snapshot is not None else tuple(t.name for t in tools)
    context = TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": names, "secrets": tuple(secret_grant(s) for s in secrets)},
    )
    approver = Approver(trace, decision)
    runtime = EffectRuntime(
        toolsets=Tools(tools, policy or EffectPolicy()),
        approvals=ApprovalRuntime(provider=approver),
        environ=environ if environ is not None else {"HK_TOKEN": SECRET, "HK_SHORT": "abc"},
    )
    catalog = await runtime.prepare_catalog(context)
    return Pipeline(runtime, catalog, context, trace, approver)


async def test_every_status_with_whether_execution_started(authority: AuthorityResolver) -> None:
    p = await pipeline(authority, policy=EffectPolicy(deny=("probe.checked",)), snapshot=None)
    seen: dict[str, tuple[str, bool]] = {}
    for label, name, arguments in [
        ("succeeded", "probe.ok", {"text": "hi"}),
        ("invalid", "probe.ok", {"text": 5, "extra": 1}),
        ("failed", "probe.raise", {}),
        ("timed_out", "probe.slow", {}),
        ("cancelled", "probe.verdict", {"status": "cancelled"}),
        ("indeterminate", "probe.verdict", {"status": "indeterminate"}),
    ]:
        result = await p.run(name, arguments)
        seen[label] = (result.status, result.started)
    denied = await p.run("probe.checked", {"text": "x"})
    seen["denied"] = (denied.status, denied.started)
    p.catalog.closed = True
    gone = await p.runtime.execute(
        EffectRequest("c-x", p.catalog.resolve("probe_ok") or _ref(p), {}), p.context
    )
    seen["not_found"] = (gone.status, gone.started)
    assert seen == {
        "succeeded": ("succeeded", True),
        "invalid": ("invalid", False),
        "failed": ("failed", True),
        "timed_out": ("timed_out", True),
        "cancelled": ("cancelled", True),
        "indeterminate": ("indeterminate", True),
        "denied": ("denied", False),
        "not_found": ("not_found", False),
    }


def _ref(p: Pipeline) -> Any:
    from hostkit.types import ResolvedEffectRef

    return ResolvedEffectRef(p.catalog.catalog_id, "eff_gone", "probe.ok")


async def test_a_tool_verdict_keeps_its_output_for_the_model(authority: AuthorityResolver) -> None:
    p = await pipeline(authority)
    result = await p.run("probe.verdict", {"status": "failed"})
    assert result.status == "failed"
    assert result.views.model.startswith("[failed] tool says failed")
    assert '"said": "failed"' in result.views.model


@pytest.mark.parametrize("status", ["denied", "not_found", "invalid", "ok", "Failed"])
async def test_a_tool_may_report_only_how_its_run_ended(
    authority: AuthorityResolver, status: str
) -> None:
    """``denied`` from a tool that ran would have the record say the Host refused it."""
    with pytest.raises(InvalidValue, match=r"^ToolOutcome\.status must be one of cancelled, "):
        ToolOutcome(status)  # type: ignore[arg-type]
    p = await pipeline(authority)
    result = await p.run("probe.verdict", {"status": status})
    assert (result.status, result.started) == ("failed", True)
    assert str(result.error).startswith("InvalidValue: ToolOutcome.status must be one of")


def test_tool_outcome_statuses_are_checked_and_bounded() -> None:
    for status in ("succeeded", "failed", "timed_out", "cancelled", "indeterminate"):
        assert ToolOutcome(status).status == status  # type: ignore[arg-type]
    # The Host's builtins report its own verdicts too (a secret binding expired).
    assert BuiltinOutcome("denied").status == "denied"
    assert BuiltinOutcome("not_found").status == "not_found"
    with pytest.raises(InvalidValue) as caught:
        ToolOutcome("x" * 10_000)  # type: ignore[arg-type]
    assert len(caught.value.message) < 200
    with pytest.raises(InvalidValue, match=r"not dict$"):
        ToolOutcome({})  # type: ignore[arg-type]


async def test_a_tool_error_without_text_keeps_the_call_it_ended(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority)
    result = await p.run("probe.unprintable", {})
    assert (result.status, result.started, result.error) == ("failed", True, "_Unprintable")
    assert "partial output" in result.views.model


async def test_an_approver_that_raises_is_named_and_the_call_never_runs(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority, policy=EffectPolicy(allow=("*",), ask=("probe.ok",)))

    async def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise KeyError(request.approval_id)

    p.approver.decide = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeFailure) as caught:
        await p.run("probe.ok", {"text": "hi"})
    assert caught.value.message == (
        "the approval provider Approver raised KeyError; the call did not run"
    )
    assert "invoke" not in p.trace.steps


async def test_five_views_are_bounded_and_never_carry_raw_arguments(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority)
    result = await p.run("probe.raise", {})
    ok = await p.run("probe.ok", {"text": ARGUMENT})
    for outcome in (result, ok):
        views = outcome.views
        for audience in (views.operator, views.event, views.durable, views.debug):
            assert ARGUMENT not in repr(audience)
            assert len(repr(audience)) < 2_000
            assert audience["effect"] == outcome.effect
    assert ok.views.model == f"ok ({len(ARGUMENT)} chars)"
    assert result.views.model == "[failed] RuntimeError: adapter exploded"


async def test_order_checks_then_preflight_then_approval_then_invoke(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority, policy=EffectPolicy(ask=("probe.*",)))
    refused = await p.run("probe.checked", {"text": "refuse"})
    assert (refused.status, refused.started) == ("denied", False)
    assert p.trace.steps == ["preflight"]
    invalid = await p.run("probe.checked", {"text": 3.5})
    assert invalid.status == "invalid"
    assert p.trace.steps == ["preflight"]
    p.trace.steps.clear()
    assert (await p.run("probe.checked", {"text": "fine"})).status == "succeeded"
    assert p.trace.steps == ["preflight", "approval", "invoke"]


async def test_an_effect_outside_the_snapshot_is_denied_before_anything_runs(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority, policy=EffectPolicy(ask=("probe.*",)))
    narrowed = TurnExecutionContext(
        **{
            name: getattr(p.context, name)
            for name in p.context.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": ("probe.ok",)},
    )
    ref = p.catalog.resolve("probe_checked")
    assert ref is not None
    result = await p.runtime.execute(EffectRequest("c1", ref, {"text": "x"}), narrowed)
    assert (result.status, result.started) == ("denied", False)
    assert p.trace.steps == []


async def test_secrets_need_an_exact_grant_before_anyone_is_asked(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority, secrets=("HK_TOKEN_OTHER",))
    result = await p.run("probe.echo", {"secrets": ["HK_TOKEN"]})
    assert (result.status, result.started) == ("denied", False)
    assert "secret.bind:HK_TOKEN" in (result.error or "")
    assert p.trace.steps == []


async def test_bound_secrets_are_approved_once_every_time_and_redacted_everywhere(
    authority: AuthorityResolver,
) -> None:
    # "allow" policy and an "approve for session" answer: a secret binding still asks each time.
    p = await pipeline(authority, decision="approve_session")
    for _ in range(2):
        result = await p.run("probe.echo", {"secrets": ["HK_TOKEN"], "text": "echo:"})
        assert result.status == "succeeded"
        assert "[redacted:HK_TOKEN]" in result.views.model
        assert SECRET not in repr(result.views)
    assert p.trace.steps == ["approval", "invoke", "approval", "invoke"]
    assert p.trace.secrets == [{"HK_TOKEN": SECRET}] * 2
    assert p.approver.seen[0].view["binds"] == ("secret.bind:HK_TOKEN",)
    assert SECRET not in repr(p.approver.seen[0].view)


async def test_a_denied_secret_binding_never_reads_or_passes_the_value(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority, decision="deny")
    result = await p.run("probe.echo", {"secrets": ["HK_TOKEN"]})
    assert (result.status, result.started) == ("denied", False)
    assert p.trace.secrets == []


@pytest.mark.parametrize(
    ("environ", "problem"),
    [({}, "is not set"), ({"HK_TOKEN": "abc"}, "too short")],
)
async def test_missing_or_unredactable_secret_values_fail_before_the_tool(
    authority: AuthorityResolver, environ: dict[str, str], problem: str
) -> None:
    p = await pipeline(authority, environ=environ)
    result = await p.run("probe.echo", {"secrets": ["HK_TOKEN"]})
    assert (result.status, result.started) == ("failed", False)
    assert problem in (result.error or "")
    assert "invoke" not in p.trace.steps


async def test_tools_without_a_secrets_argument_never_see_secrets(
    authority: AuthorityResolver,
) -> None:
    p = await pipeline(authority)
    seen: list[Mapping[str, str]] = []

    @tool("probe.peek")
    async def peek(ctx: ToolContext, secrets: list[str]) -> str:
        """Tries to get secrets without declaring them."""
        seen.append(dict(ctx.secrets))
        return "peeked"

    runtime = EffectRuntime(toolsets=Tools([peek], EffectPolicy()), environ={"HK_TOKEN": SECRET})
    context = TurnExecutionContext(
        **{
            name: getattr(p.context, name)
            for name in p.context.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": ("probe.peek",), "secrets": ("secret.bind:HK_TOKEN",)},
    )
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("probe_peek")
    assert ref is not None
    result = await runtime.execute(EffectRequest("c1", ref, {"secrets": ["HK_TOKEN"]}), context)
    assert result.status == "succeeded"
    assert seen == [{}]
