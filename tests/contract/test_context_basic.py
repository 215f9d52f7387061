"""ContextManager (first slice): budget arithmetic, layers, groups, overflow, idempotent observe."""

from __future__ import annotations

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.context import CharEstimator, ContextManager, Estimator, TokenizerEstimator
from hostkit.context._assemble import CUT_MIN_TOKENS, CUT_STUB, CalibratedEstimator, at_floor
from hostkit.context._calls import result_floor
from hostkit.store import RuntimeStore
from hostkit.types import (
    ContextRequest,
    ModelLimits,
    ModelMessage,
    PrincipalScope,
    ToolCall,
    ToolDefinition,
    TurnExecutionContext,
    TurnToken,
    Usage,
    UsageObservation,
    new_id,
)
from tests.support import facts

pytestmark = pytest.mark.anyio

LIMITS = ModelLimits(context_window=4000, max_output_tokens=800, safety_margin_tokens=100)


def context_for(scope: PrincipalScope, turn_id: str = "turn_now") -> TurnExecutionContext:
    session = scope.session_id or ""

    def token(kind: str) -> TurnToken:
        return TurnToken(kind, "req", turn_id, session, new_id("n"))  # type: ignore[arg-type]

    return TurnExecutionContext(
        request_id="req",
        turn_id=turn_id,
        principal=scope,
        session_id=session,
        core_id="assistant",
        core_revision="r1",
        capability_snapshot={},
        workspace_scope="/tmp",
        route_token=token("route"),
        admission_lease_token=token("admission"),
        cancellation_token=token("cancellation"),
        trace_ids=("t",),
        interaction_metadata={},
    )


async def add_history(
    store: RuntimeStore, scope: PrincipalScope, messages: list[ModelMessage]
) -> None:
    for message in messages:
        await store.append_message(
            scope,
            scope.session_id or "",
            role=message.role,
            content=message.to_json(),
            turn_id="turn_old",
        )


async def test_budget_is_chosen_from_limits_and_schema_overhead_is_counted(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("c"))
    manager = ContextManager(store)
    output, hard = manager.budget(LIMITS)
    assert output == 800  # min(max_output, max(256, window // 4)) = min(800, 1000)
    assert hard == 4000 - 800 - 100
    schema = ToolDefinition("big_tool", "x" * 700, {"type": "object"})
    request = ContextRequest(
        context=context_for(scope),
        step_id=0,
        limits=LIMITS,
        messages=(ModelMessage("user", "hi"),),
        definitions=(schema,),
        instructions="be brief",
    )
    ready = await manager.prepare(request)
    assert ready.kind == "ready"
    layers = {layer.name: layer.tokens for layer in ready.layers}
    assert layers["schemas"] == CharEstimator().definitions([schema]) > 200
    assert ready.estimated_input_tokens == sum(layers.values())
    assert ready.output_budget == 800
    assert ready.hard_budget == 3100
    assert [m.role for m in ready.messages] == ["system", "user"]


async def test_prepare_is_deterministic(store: RuntimeStore, authority: AuthorityResolver) -> None:
    scope = await authority.for_conversation(facts("c"))
    await add_history(store, scope, [ModelMessage("user", f"old {i}") for i in range(20)])
    manager = ContextManager(store)
    request = ContextRequest(
        context=context_for(scope), step_id=0, limits=LIMITS, messages=(ModelMessage("user", "q"),)
    )
    first, second = await manager.prepare(request), await ContextManager(store).prepare(request)
    assert first.messages == second.messages
    assert first.layers == second.layers


async def test_history_keeps_tool_groups_whole_and_newest_first(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("c"))
    call = ToolCall("call_1", "lookup", {"q": "x"})
    history = [
        ModelMessage("user", "a" * 3000),
        ModelMessage("assistant", "", (call,)),
        ModelMessage("tool", "b" * 6000, tool_call_id="call_1"),
        ModelMessage("user", "recent question"),
        ModelMessage("assistant", "recent answer"),
    ]
    await add_history(store, scope, history)
    small = ModelLimits(context_window=2000, max_output_tokens=300, safety_margin_tokens=50)
    ready = await ContextManager(store).prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=small,
            messages=(ModelMessage("user", "now"),),
        )
    )
    contents = [m.content for m in ready.messages]
    # Too big as is: the old tool result is pruned to a stub (its group stays whole)
    # before anything is dropped, and then everything fits.
    assert contents == [
        "a" * 3000,
        "",
        "[pruned: the result of a tool (6,000 characters)]",
        "recent question",
        "recent answer",
        "now",
    ]
    history_layer = next(layer for layer in ready.layers if layer.name == "history")
    assert history_layer.pruned == 1
    roomy_limits = ModelLimits(context_window=16000, max_output_tokens=800)
    roomy = await ContextManager(store).prepare(
        ContextRequest(
            context=context_for(scope, "turn_2"),
            step_id=0,
            limits=roomy_limits,
            messages=(ModelMessage("user", "now"),),
        )
    )
    roles = [m.role for m in roomy.messages]
    assert roles[roles.index("assistant") + 1] == "tool", "a tool result follows its call"


async def test_orphaned_tool_results_at_the_window_edge_are_dropped(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("c"))
    call = ToolCall("call_1", "lookup", {})
    await add_history(
        store,
        scope,
        [
            ModelMessage("assistant", "", (call,)),
            ModelMessage("tool", "r", tool_call_id="call_1"),
            ModelMessage("user", "later"),
        ],
    )
    manager = ContextManager(store, history_window=2)
    ready = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=LIMITS,
            messages=(ModelMessage("user", "now"),),
        )
    )
    assert [m.role for m in ready.messages] == ["user", "user"]


async def test_overflow_is_typed_and_recorded_without_a_prompt(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("c"))
    manager = ContextManager(store)
    huge = ContextRequest(
        context=context_for(scope),
        step_id=0,
        limits=LIMITS,
        messages=(ModelMessage("user", "secret-content " * 2000),),
    )
    overflow = await manager.prepare(huge)
    assert overflow.kind == "overflow"
    assert overflow.reason == "current_input_too_large"
    assert overflow.hard_budget == 3100
    schema_overflow = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=1,
            limits=LIMITS,
            messages=(ModelMessage("user", "hi"),),
            definitions=(ToolDefinition("t", "d" * 20000, {}),),
        )
    )
    assert schema_overflow.reason == "schema_too_large"
    # Instructions (as an AGENTS.md snapshot or injected context) that leave no room even
    # for an empty input: no shorter message helps, and the reason says what must shrink.
    head_overflow = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=2,
            limits=LIMITS,
            messages=(ModelMessage("user", "hi"),),
            instructions="follow these rules. " * 1000,
        )
    )
    assert head_overflow.reason == "instructions_too_large"
    for prepared, reason in (
        (overflow, "current_input_too_large"),
        (schema_overflow, "schema_too_large"),
        (head_overflow, "instructions_too_large"),
    ):
        recorded = await store.context.decision(prepared.decision_id)
        assert recorded is not None
        assert (recorded.kind, recorded.overflow_reason, recorded.hard_budget) == (
            "overflow",
            reason,
            3100,
        )
        assert recorded.estimated_input_tokens == prepared.estimated_input_tokens
        assert recorded.layers == ()
        assert "secret-content" not in repr(recorded)


async def test_observe_is_idempotent_per_decision(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    scope = await authority.for_conversation(facts("c"))
    manager = ContextManager(store)
    ready = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=LIMITS,
            messages=(ModelMessage("user", "hi"),),
        )
    )
    observation = UsageObservation(
        decision_id=ready.decision_id,
        session_id=scope.session_id or "",
        turn_id="turn_now",
        step_id=0,
        provider="p",
        model="m",
        usage=Usage(10, 2, 3, 0),
        finish_reason="stop",
        provider_request_id="pr1",
    )
    await manager.observe(observation)
    await manager.observe(observation)
    assert not await store.context.record_usage(observation)
    usage = await store.inspect.session_usage(operator, scope.session_id or "")
    ((sums),) = usage.sums
    assert (sums.steps, sums.input_tokens, sums.output_tokens, sums.cache_read_tokens) == (
        1,
        10,
        2,
        3,
    )


async def test_history_window_is_bounded(store: RuntimeStore, authority: AuthorityResolver) -> None:
    scope = await authority.for_conversation(facts("c"))
    await add_history(store, scope, [ModelMessage("user", f"m{i}") for i in range(30)])
    ready = await ContextManager(store, history_window=5).prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=LIMITS,
            messages=(ModelMessage("user", "now"),),
        )
    )
    assert [m.content for m in ready.messages] == ["m25", "m26", "m27", "m28", "m29", "now"]


def many_results(count: int, size: int) -> tuple[ModelMessage, ...]:
    """The input, a step that called ``count`` tools at once, and their long results."""
    calls = tuple(ToolCall(f"call_{n}", "probe_big", {"n": n}) for n in range(count))
    results = tuple(
        ModelMessage("tool", f"result {n}: " + "y" * size, tool_call_id=f"call_{n}", name="big")
        for n in range(count)
    )
    return (ModelMessage("user", "read them all"), ModelMessage("assistant", "", calls), *results)


async def test_a_steps_results_too_long_together_are_cut_to_fit_not_the_turn_failed(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Eight results at a view's limit exceed a small window together: each is cut by one
    share, keeps its beginning and says so; the call/result pairs stay whole."""
    scope = await authority.for_conversation(facts("c"))
    await add_history(
        store, scope, [ModelMessage("user", "earlier"), ModelMessage("assistant", "ok")]
    )
    manager = ContextManager(store)
    messages = many_results(8, 8_000)
    ready = await manager.prepare(
        ContextRequest(context=context_for(scope), step_id=1, limits=LIMITS, messages=messages)
    )
    assert ready.kind == "ready", ready
    assert ready.estimated_input_tokens <= ready.hard_budget == 3100
    sent = [m for m in ready.messages if m.role == "tool"]
    assert [m.tool_call_id for m in sent] == [f"call_{n}" for n in range(8)]
    for n, message in enumerate(sent):
        assert message.content.startswith(f"result {n}: yyy")
        assert "[cut to fit the model's context window: the first " in message.content
        assert message.content.endswith(" of 8,010 characters]")
    assert len({len(m.content) for m in sent}) == 1, "every result cut by the same share"
    (current,) = [layer for layer in ready.layers if layer.name == "current"]
    assert current.pruned == 8
    # What the turn holds is unchanged: only this request was cut.
    assert all(len(m.content) == 8_010 for m in messages if m.role == "tool")


async def test_a_steps_long_text_is_cut_only_after_its_results_and_never_the_input(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Results go first; a step's text is cut (its beginning kept, same note) only when the
    results at their floor (``CUT_MIN_TOKENS`` of text) still do not fit, and never below
    its floor. What the turn holds is unchanged, and the user's input is never cut."""
    scope = await authority.for_conversation(facts("c"))
    manager = ContextManager(store)
    call = ToolCall("call_0", "probe_big", {"n": 0})
    result = ModelMessage("tool", "result: " + "y" * 12_000, tool_call_id="call_0", name="big")

    def step(text: str) -> tuple[ModelMessage, ...]:
        return (ModelMessage("user", "read it"), ModelMessage("assistant", text, (call,)), result)

    short = step("I will read it. " * 125)  # 2,000 characters: cutting the result is enough
    ready = await manager.prepare(
        ContextRequest(context=context_for(scope), step_id=1, limits=LIMITS, messages=short)
    )
    assert ready.kind == "ready", ready
    assert [m.content for m in ready.messages if m.role == "assistant"] == [short[1].content]
    [answer] = [m for m in ready.messages if m.role == "tool"]
    assert "[cut to fit the model's context window: the first " in answer.content
    assert len(answer.content) > 1_000, "the result is cut by a share, not to its floor"
    long = step("t" * 40_000)
    ready = await manager.prepare(
        ContextRequest(context=context_for(scope), step_id=2, limits=LIMITS, messages=long)
    )
    assert ready.kind == "ready", ready
    assert ready.estimated_input_tokens <= ready.hard_budget
    [sent] = [m for m in ready.messages if m.role == "assistant"]
    assert sent.tool_calls == (call,)
    floor = at_floor(long[1], CharEstimator()).content
    assert sent.content.startswith(floor[: floor.index("\n")])
    assert sent.content.endswith(" of 40,000 characters]")
    [answer] = [m for m in ready.messages if m.role == "tool"]
    assert answer.content == at_floor(result, CharEstimator()).content
    assert answer.content.startswith("result: yyy")
    assert answer.content.endswith(" of 12,008 characters]")
    assert CharEstimator().text(answer.content) <= CUT_MIN_TOKENS
    assert ready.messages[-3] == long[0]
    (current,) = [layer for layer in ready.layers if layer.name == "current"]
    assert current.pruned == 2
    assert long[1].content == "t" * 40_000  # only this request was cut
    # Text that cannot fit even at its floor (a thousand steps of it) still overflows.
    many = (
        ModelMessage("user", "go"),
        *[ModelMessage("assistant", "t" * 2_000) for _ in range(1_000)],
    )
    overflow = await manager.prepare(
        ContextRequest(context=context_for(scope), step_id=3, limits=LIMITS, messages=many)
    )
    assert (overflow.kind, overflow.reason) == ("overflow", "current_input_too_large")


async def test_results_that_cannot_fit_even_cut_to_their_floor_still_overflow(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("c"))
    manager = ContextManager(store)
    overflow = await manager.prepare(
        ContextRequest(
            context=context_for(scope), step_id=1, limits=LIMITS, messages=many_results(64, 8_000)
        )
    )
    assert (overflow.kind, overflow.reason) == ("overflow", "current_input_too_large")


# Results the estimate counts at a token a byte or more: at 400 characters each was many
# times the floor ``kept_calls`` reserved for it.
DENSE = {
    "chinese": "中文是一种非常美丽的语言有着悠久的历史" * 400,
    "emoji": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 300,
    "symbols": "".join(map(chr, range(0x2200, 0x2240))) * 100,  # mathematical operators
    "combining": "e\u0301\u0302\u0303" * 2_000,
    "digits": "0123456789" * 800,
    "prose": "the quick brown fox jumps over the lazy dog " * 200,
}


@pytest.mark.parametrize("factor", [0.8, 1.0, 1.93])
@pytest.mark.parametrize(
    "base",
    [
        CharEstimator(),
        TokenizerEstimator(lambda text: len(text.encode()), estimator_id="bytes"),
        # Counts so high that not one character fits a floor: the fixed stub.
        TokenizerEstimator(lambda text: 1_000 * len(text), estimator_id="huge"),
    ],
    ids=["charclass", "bytes", "huge"],
)
def test_a_result_at_its_floor_takes_at_most_its_reserved_tokens_whatever_it_holds(
    base: Estimator, factor: float
) -> None:
    """The floor is a number of tokens under the estimator in use, not of characters: a
    result cut to it, Chinese, emoji, symbols or prose, takes at most what ``kept_calls``
    reserves for it (``result_floor``). It keeps its beginning, or is the fixed stub when
    not even one character fits beside the note (never under ``CharEstimator`` as it is)."""
    estimate = CalibratedEstimator(base, factor)
    call = ToolCall("call_" + "x" * 27, "probe_read", {})
    for kind, text in DENSE.items():
        result = ModelMessage("tool", text, tool_call_id=call.call_id, name=call.name)
        floor = at_floor(result, estimate)
        assert floor is not result, kind
        assert estimate.message(floor) <= result_floor(estimate, call), kind
        if floor.content == CUT_STUB:
            assert not isinstance(base, CharEstimator) or factor > 1, kind
        else:
            assert floor.content.startswith(text[:1]), kind
            assert floor.content.endswith(f" of {len(text):,} characters]"), kind
        # What already fits its floor stays as it is.
        assert at_floor(floor, estimate) is floor or base.estimator_id == "huge"
