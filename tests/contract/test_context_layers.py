"""ContextManager in full: layer order, reference-only summary, bootstrap snapshot, protected
head and tail, pruning before any cut, calibration, degraded telemetry."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.context import (
    REFERENCE_ONLY,
    CharEstimator,
    ContextManager,
    EstimatorRegistry,
    TokenizerEstimator,
    WorkspaceBootstrap,
)
from hostkit.errors import StoreError
from hostkit.store import RuntimeStore
from hostkit.types import (
    ContextReady,
    ContextRequest,
    ModelLimits,
    ModelMessage,
    PrincipalScope,
    ToolCall,
    ToolDefinition,
    TurnExecutionContext,
    Usage,
    UsageObservation,
)
from tests.contract.test_context_basic import add_history, context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

ROOMY = ModelLimits(context_window=64_000, max_output_tokens=1_000, safety_margin_tokens=100)


def request_for(
    context: TurnExecutionContext,
    limits: ModelLimits = ROOMY,
    *,
    text: str = "now",
    **fields: object,
) -> ContextRequest:
    return ContextRequest(
        context=context,
        step_id=0,
        limits=limits,
        messages=(ModelMessage("user", text),),
        **fields,  # type: ignore[arg-type]
    )


def with_model(context: TurnExecutionContext, provider: str, model: str) -> TurnExecutionContext:
    return dataclasses.replace(
        context, capability_snapshot={"provider": provider, "model": model, "effects": ()}
    )


async def set_summary(store: RuntimeStore, session_id: str, summary: str, cutoff: int) -> None:
    """Commit ``summary`` up to ``cutoff`` the way a compactor does: lease, then commit."""
    take = await store.context.take_compaction_lease(
        session_id,
        expected_cutoff=None,
        lease_id="lease_test",
        owner="test",
        now=0.0,
        expires_at=60.0,
    )
    assert take.kind == "taken"
    committed = await store.context.commit_summary(
        session_id,
        lease_id="lease_test",
        text=summary,
        cutoff_seq=cutoff,
        added=cutoff + 1,
        summarizer="test",
        cooldown_until=0.0,
    )
    assert committed is not None


async def seqs(store: RuntimeStore, scope: PrincipalScope) -> list[int]:
    page = await store.list_messages(scope, scope.session_id or "", limit=500)
    return [record.seq for record in page.items]


async def calibration_samples(store: RuntimeStore, session_id: str) -> int | None:
    state = await store.context.read_state(session_id=session_id, turn_id="none", window=1)
    return None if state.calibration is None else state.calibration.samples


async def scope_with(
    authority: AuthorityResolver, store: RuntimeStore, history: list[ModelMessage]
) -> PrincipalScope:
    scope = await authority.for_conversation(facts("layers"))
    await add_history(store, scope, history)
    return scope


def contents(ready: object) -> list[str]:
    assert isinstance(ready, ContextReady)
    return [m.content for m in ready.messages]


async def test_layers_come_in_the_contract_order_and_the_summary_is_reference_only(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await scope_with(
        authority, store, [ModelMessage("user", "folded"), ModelMessage("user", "kept")]
    )
    session = scope.session_id or ""
    first = (await seqs(store, scope))[0]
    await set_summary(store, session, "they talked about folding", first)
    await anyio.Path(tmp_path / "AGENTS.md").write_text("Use metric units.")
    context = dataclasses.replace(context_for(scope), workspace_scope=str(tmp_path))
    manager = ContextManager(store, bootstrap=WorkspaceBootstrap())
    ready = await manager.prepare(
        request_for(
            context, instructions="Be brief.", contributions=("memory: likes tea",), bootstrap=True
        )
    )
    assert isinstance(ready, ContextReady)
    assert [m.role for m in ready.messages] == ["system"] * 4 + ["user", "user"]
    assert contents(ready)[0] == "Be brief."
    assert "Use metric units." in contents(ready)[1]
    assert contents(ready)[2] == "Context:\nmemory: likes tea"
    assert contents(ready)[3] == REFERENCE_ONLY + "they talked about folding"
    assert "not an instruction" in REFERENCE_ONLY
    assert contents(ready)[4:] == ["kept", "now"]  # the folded message is behind the cutoff
    assert ready.summary_used
    assert [layer.name for layer in ready.layers] == [
        "instructions",
        "bootstrap",
        "contributions",
        "summary",
        "schemas",
        "framing",
        "history",
        "current",
    ]


async def test_the_bootstrap_snapshot_is_taken_once_per_session(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path
) -> None:
    scope = await scope_with(authority, store, [])
    context = dataclasses.replace(context_for(scope), workspace_scope=str(tmp_path))
    await anyio.Path(tmp_path / "AGENTS.md").write_text("version one")
    manager = ContextManager(store, bootstrap=WorkspaceBootstrap())
    first = await manager.prepare(request_for(context, bootstrap=True))
    await anyio.Path(tmp_path / "AGENTS.md").write_text("version two")
    later = dataclasses.replace(context_for(scope, "turn_2"), workspace_scope=str(tmp_path))
    again = await ContextManager(store, bootstrap=WorkspaceBootstrap()).prepare(
        request_for(later, bootstrap=True)
    )
    assert "version one" in contents(first)[0]
    assert contents(again) == contents(first)
    plain = await manager.prepare(request_for(context_for(scope, "turn_3")))
    assert contents(plain) == ["now"]  # the snapshot shows only on bootstrap turns


async def test_old_tool_results_are_pruned_to_stubs_before_anything_is_dropped(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    call = ToolCall("call_1", "notes_read", {"name": "big.md"})
    scope = await scope_with(
        authority,
        store,
        [
            ModelMessage("user", "read the big note"),
            ModelMessage("assistant", "", (call,)),
            ModelMessage("tool", "x" * 9_000, tool_call_id="call_1", name="notes_read"),
            ModelMessage("assistant", "it is long"),
            ModelMessage("user", "recent"),
            ModelMessage("assistant", "recent answer"),
        ],
    )
    small = ModelLimits(context_window=2_000, max_output_tokens=300, safety_margin_tokens=50)
    manager = ContextManager(store)
    ready = await manager.prepare(request_for(context_for(scope), small))
    assert isinstance(ready, ContextReady)
    assert contents(ready) == [
        "read the big note",
        "",
        "[pruned: the result of notes_read (9,000 characters)]",
        "it is long",
        "recent",
        "recent answer",
        "now",
    ]
    history = next(layer for layer in ready.layers if layer.name == "history")
    assert history.pruned == 1
    # Never observed: the decision is written when its turn ends.
    assert await manager.flush("turn_now")
    decision = await store.context.decision(ready.decision_id)
    assert decision is not None
    assert (decision.pruned_results, decision.dropped_messages, decision.layers) == (
        1,
        0,
        ready.layers,
    )
    assert "x" * 50 not in repr(decision)  # decisions never hold content


async def test_the_protected_head_and_tail_survive_when_the_middle_is_cut(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    history = [ModelMessage("user", "the task: build a shed")]
    history += [ModelMessage("user", f"middle {i} " + "m" * 400) for i in range(12)]
    history += [ModelMessage("user", "latest detail"), ModelMessage("assistant", "ok")]
    scope = await scope_with(authority, store, history)
    small = ModelLimits(context_window=1_400, max_output_tokens=300, safety_margin_tokens=50)
    ready = await ContextManager(store, protect_head=1, protect_tail=2).prepare(
        request_for(context_for(scope), small)
    )
    kept = contents(ready)
    assert kept[0] == "the task: build a shed"
    assert kept[-3:] == ["latest detail", "ok", "now"]
    middle = [text for text in kept if text.startswith("middle")]
    assert middle, "some middle fits"
    # What is kept of the middle is its newest, contiguous end.
    numbers = [int(text.split()[1]) for text in middle]
    assert numbers == list(range(12 - len(numbers), 12))


async def test_schema_overhead_is_part_of_the_budget(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", "h" * 2_000)])
    limits = ModelLimits(context_window=1_600, max_output_tokens=300, safety_margin_tokens=50)
    schema = ToolDefinition("big_tool", "d" * 2_500, {"type": "object", "properties": {}})
    manager = ContextManager(store)
    without = await manager.prepare(request_for(context_for(scope), limits))
    with_schema = await manager.prepare(
        request_for(context_for(scope, "turn_2"), limits, definitions=(schema,))
    )
    assert isinstance(without, ContextReady)
    assert isinstance(with_schema, ContextReady)
    assert "h" * 2_000 in contents(without)
    assert "h" * 2_000 not in contents(with_schema)  # the schema took the room
    assert with_schema.estimated_input_tokens <= with_schema.hard_budget


async def observe(
    manager: ContextManager, ready: object, context: TurnExecutionContext, reported: int
) -> None:
    assert isinstance(ready, ContextReady)
    snapshot = context.capability_snapshot
    await manager.observe(
        UsageObservation(
            decision_id=ready.decision_id,
            session_id=context.session_id,
            turn_id=context.turn_id,
            step_id=0,
            provider=str(snapshot["provider"]),
            model=str(snapshot["model"]),
            usage=Usage(reported, 5),
        )
    )


async def test_calibration_advances_after_the_observation_and_resets_on_a_model_switch(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", "w" * 3_500)])
    manager = ContextManager(store)
    context = with_model(context_for(scope, "t1"), "p", "model-a")
    first = await manager.prepare(request_for(context))
    assert isinstance(first, ContextReady)
    # The provider counted half of what was estimated: the ratio falls to MIN_RATIO (0.8).
    await observe(manager, first, context, first.estimated_input_tokens // 2)
    second = await manager.prepare(
        request_for(with_model(context_for(scope, "t2"), "p", "model-a"))
    )
    assert isinstance(second, ContextReady)
    assert second.estimated_input_tokens < first.estimated_input_tokens * 0.85
    switched = await manager.prepare(
        request_for(with_model(context_for(scope, "t3"), "p", "model-b"))
    )
    assert isinstance(switched, ContextReady)
    assert switched.estimated_input_tokens == first.estimated_input_tokens


async def test_a_repeated_observation_does_not_calibrate_twice(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", "w" * 3_500)])
    manager = ContextManager(store)
    context = with_model(context_for(scope, "t1"), "p", "m")
    ready = await manager.prepare(request_for(context))
    for _ in range(3):
        await observe(manager, ready, context, 100)
    assert await calibration_samples(store, context.session_id) == 1


async def test_a_failed_observation_write_makes_the_next_prepare_conservative(
    store: RuntimeStore, authority: AuthorityResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", "w" * 3_500)])
    manager = ContextManager(store)
    context = with_model(context_for(scope, "t1"), "p", "m")
    ready = await manager.prepare(request_for(context))
    assert isinstance(ready, ContextReady)

    async def failing(*args: object) -> bool:
        raise StoreError("disk full")

    # The held decision goes with its observation (record_step); a repeat without it would
    # go through record_usage: both fail.
    monkeypatch.setattr(store.context, "record_step", failing)
    monkeypatch.setattr(store.context, "record_usage", failing)
    with pytest.raises(StoreError):
        await observe(manager, ready, context, 10)
    monkeypatch.undo()
    assert await calibration_samples(store, context.session_id) is None  # nothing advanced
    assert manager.pending_decisions == 1  # still held, for a later write
    cautious = await manager.prepare(request_for(with_model(context_for(scope, "t2"), "p", "m")))
    assert isinstance(cautious, ContextReady)
    assert cautious.estimated_input_tokens > ready.estimated_input_tokens
    # When even the conservative estimate cannot fit, the overflow says why.
    tight = ModelLimits(context_window=1_500, max_output_tokens=300, safety_margin_tokens=50)
    overflow = await manager.prepare(
        request_for(with_model(context_for(scope, "t3"), "p", "m"), tight, text="q" * 3_600)
    )
    assert overflow.kind == "overflow"
    assert overflow.reason == "unsafe_estimate"
    # A committed observation clears the degraded state.
    await observe(manager, cautious, with_model(context_for(scope, "t2"), "p", "m"), 900)
    recovered = await manager.prepare(request_for(with_model(context_for(scope, "t4"), "p", "m")))
    assert isinstance(recovered, ContextReady)
    assert recovered.estimated_input_tokens < cautious.estimated_input_tokens


async def test_sessions_degraded_by_failed_observation_writes_stay_within_a_bound(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to keep every session whose observation ever failed to commit until that
    # session's next one did: an outage left each one-off conversation held for good.
    from hostkit.context import _manager

    monkeypatch.setattr(_manager, "_DEGRADED_KEPT", 8, raising=False)
    manager = ContextManager(store)
    sessions = [f"ses_{i}" for i in range(50)]
    for i, session_id in enumerate(sessions):
        observation = UsageObservation(
            decision_id=f"ctx_{i}",
            session_id=session_id,
            turn_id=f"turn_{i}",
            step_id=0,
            provider="p",
            model="m",
            usage=Usage(100, 5),
        )
        await manager.settle(manager.stage(observation), None, committed=False)
        assert len(manager._degraded) <= 8
    assert list(manager._degraded) == sessions[-8:]  # the most recently degraded are kept


async def test_prepare_reads_only_after_the_cutoff(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", f"m{i}") for i in range(10)])
    session = scope.session_id or ""
    cutoff = (await seqs(store, scope))[6]
    await set_summary(store, session, "m0..m6", cutoff)
    ready = await ContextManager(store).prepare(request_for(context_for(scope)))
    assert contents(ready)[1:] == ["m7", "m8", "m9", "now"]


async def test_a_summary_too_long_for_the_window_keeps_its_newest_part_within_budget(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    from hostkit.context import SUMMARY_CUT

    scope = await scope_with(authority, store, [ModelMessage("user", "kept")])
    session = scope.session_id or ""
    first = (await seqs(store, scope))[0]
    await set_summary(store, session, "old " * 1_500 + "the newest fact", first - 1)
    tight = ModelLimits(context_window=1_600, max_output_tokens=300, safety_margin_tokens=50)
    ready = await ContextManager(store).prepare(request_for(context_for(scope), tight))
    assert isinstance(ready, ContextReady)
    assert ready.estimated_input_tokens <= ready.hard_budget
    summary = contents(ready)[0]
    assert summary.startswith(REFERENCE_ONLY + SUMMARY_CUT)
    assert summary.endswith("the newest fact")
    layer = next(x for x in ready.layers if x.name == "summary")
    assert layer.pruned == 1


@pytest.mark.parametrize("window", [1_024, 1_280, 1_536])
async def test_a_long_summary_is_cut_before_the_protected_tail_is_dropped(
    store: RuntimeStore, authority: AuthorityResolver, window: int
) -> None:
    """The previous exchange (the protected tail) outranks the summary: on a small window the
    summary is sized after it, cut to its newest part, and the request still fits."""
    from hostkit.context import SUMMARY_CUT

    question = "Q1 " + "please tell me more about it " * 6
    answer = "Answer to Q1: " + "the reply explains the matter in detail " * 12
    scope = await scope_with(
        authority,
        store,
        [
            ModelMessage("user", "folded"),
            ModelMessage("user", question),
            ModelMessage("assistant", answer),
        ],
    )
    first = (await seqs(store, scope))[0]
    summary = "The user and assistant discussed topic seven at length. " * 40 + "newest fact"
    await set_summary(store, scope.session_id or "", summary, first)
    limits = ModelLimits(context_window=window, max_output_tokens=window // 4)
    ready = await ContextManager(store).prepare(
        request_for(context_for(scope), limits, text="Q2 " + "please tell me more about it " * 6)
    )
    assert isinstance(ready, ContextReady)
    assert ready.estimated_input_tokens <= ready.hard_budget
    texts = contents(ready)
    assert texts[1:] == [question, answer, "Q2 " + "please tell me more about it " * 6]
    assert texts[0].startswith(REFERENCE_ONLY)
    assert texts[0].endswith("newest fact")
    layers = {layer.name: layer for layer in ready.layers}
    assert layers["history"].pruned == 0
    if layers["summary"].pruned:
        assert texts[0].startswith(REFERENCE_ONLY + SUMMARY_CUT)


async def test_the_summary_is_not_cut_for_a_tail_that_would_not_fit_anyway(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Only the tail groups that then fit are made room for: a previous message larger than
    the whole input budget leaves the summary as it was."""
    scope = await scope_with(
        authority, store, [ModelMessage("user", "folded"), ModelMessage("user", "h" * 9_000)]
    )
    first = (await seqs(store, scope))[0]
    summary = "they talked about folding and the newest fact"
    await set_summary(store, scope.session_id or "", summary, first)
    limits = ModelLimits(context_window=1_024, max_output_tokens=256)
    ready = await ContextManager(store).prepare(request_for(context_for(scope), limits))
    assert contents(ready) == [REFERENCE_ONLY + summary, "now"]
    assert next(x for x in ready.layers if x.name == "summary").pruned == 0


async def test_calibration_follows_the_pinned_model_when_the_provider_reports_an_alias(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await scope_with(authority, store, [ModelMessage("user", "w" * 3_500)])
    manager = ContextManager(store)
    context = with_model(context_for(scope, "t1"), "p", "gpt-4o-mini")
    first = await manager.prepare(request_for(context))
    assert isinstance(first, ContextReady)
    await manager.observe(
        UsageObservation(
            decision_id=first.decision_id,
            session_id=context.session_id,
            turn_id="t1",
            step_id=0,
            provider="p",
            model="gpt-4o-mini-2024-07-18",  # what the provider says it ran
            usage=Usage(first.estimated_input_tokens // 2, 5),
        )
    )
    second = await manager.prepare(
        request_for(with_model(context_for(scope, "t2"), "p", "gpt-4o-mini"))
    )
    assert isinstance(second, ContextReady)
    assert second.estimated_input_tokens < first.estimated_input_tokens * 0.85


async def test_a_ratio_stored_below_min_ratio_scales_no_estimate_below_it(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """A ratio an older hostkit learned down to 0.5 (one Chinese request took it there)
    is applied as MIN_RATIO (0.8): the estimate is an upper bound, and the session's
    English must not go out over the window by it."""
    scope = await scope_with(authority, store, [ModelMessage("user", "w" * 3_500)])
    context = with_model(context_for(scope, "t1"), "p", "m")
    plain = await ContextManager(store).prepare(request_for(context))
    assert isinstance(plain, ContextReady)
    await store.write(
        lambda conn: conn.execute(
            "INSERT INTO context_calibration (session_id, provider, model, estimator, ratio, "
            "samples, updated_at) VALUES (?, 'p', 'm', ?, 0.5, 1, '2026-01-01T00:00:00.000Z')",
            [context.session_id, CharEstimator().estimator_id],
        )
    )
    scaled = await ContextManager(store).prepare(
        request_for(with_model(context_for(scope, "t2"), "p", "m"))
    )
    assert isinstance(scaled, ContextReady)
    assert plain.estimated_input_tokens * 0.8 <= scaled.estimated_input_tokens
    assert scaled.estimated_input_tokens < plain.estimated_input_tokens * 0.85


async def test_an_exact_estimate_is_never_scaled_down_by_a_learned_ratio(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    # An exact estimator whose counts once included what the model never read (tool
    # schemas a chat template drops) learned a ratio below 1; with the counts fixed,
    # applying it would under-count the window by that much.
    words = TokenizerEstimator(lambda text: len(text.split()), estimator_id="words:test")
    estimators = EstimatorRegistry()
    estimators.register(words)
    scope = await scope_with(authority, store, [ModelMessage("user", "w " * 3_500)])
    manager = ContextManager(store, estimators=estimators)
    limits = dataclasses.replace(ROOMY, estimator_id="words:test")
    context = with_model(context_for(scope, "t1"), "p", "m")
    first = await manager.prepare(request_for(context, limits))
    assert isinstance(first, ContextReady)
    await observe(manager, first, context, first.estimated_input_tokens // 2)
    assert await calibration_samples(store, context.session_id) == 1
    second = await manager.prepare(
        request_for(with_model(context_for(scope, "t2"), "p", "m"), limits)
    )
    assert isinstance(second, ContextReady)
    assert second.estimated_input_tokens == first.estimated_input_tokens


@pytest.mark.parametrize("shape", ["symlink", "hard_link", "fifo", "directory"])
async def test_the_bootstrap_file_is_one_plain_file_or_nothing(
    store: RuntimeStore, authority: AuthorityResolver, tmp_path: Path, shape: str
) -> None:
    """An agent that can write the workspace may put a link to a Host-side file (or a
    FIFO, which would block the read) where AGENTS.md goes: the snapshot reads none of
    them, judged on the opened file itself, not on a check before opening it."""
    workspace, outside = tmp_path / "workspace", tmp_path / "host-secret.env"
    workspace.mkdir()
    outside.write_text("OPENAI_API_KEY=sk-live-not-for-the-model")
    target = workspace / "AGENTS.md"
    if shape == "symlink":
        target.symlink_to(outside)
    elif shape == "hard_link":
        os.link(outside, target)
    elif shape == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    scope = await scope_with(authority, store, [])
    context = dataclasses.replace(context_for(scope), workspace_scope=str(workspace))
    manager = ContextManager(store, bootstrap=WorkspaceBootstrap())
    with anyio.fail_after(10):  # a FIFO with no writer must not hold the turn
        ready = await manager.prepare(request_for(context, bootstrap=True))
    assert contents(ready) == ["now"]
