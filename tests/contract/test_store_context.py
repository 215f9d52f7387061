"""The store's context and inspect groups, written against the ``RuntimeStore`` interface.

``adapter`` yields each store adapter (SQLite today; PostgreSQL joins the
parametrisation later): typed decision records round-trip, usage and
calibration commit together once, prepare's state is one bounded snapshot,
the compaction lease fences commits, and bad input is refused with a typed,
bounded error while everything already accepted stays.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import MESSAGE_LIMIT, InvalidValue, NotFoundOrUnauthorized, StoreError
from hostkit.store import (
    MAX_BOOTSTRAP_CHARS,
    MAX_INSPECT_ROWS,
    MAX_SUMMARY_CHARS,
    MAX_WINDOW,
    RowStore,
    RuntimeStore,
)
from hostkit.store._context_rows import MAX_RATIO, MIN_LOWERING_TOKENS, MIN_RATIO, REFUSAL_STEP
from hostkit.types import (
    MAX_DECISION_TEXT,
    ContextDecision,
    LayerSummary,
    ModelMessage,
    PrincipalScope,
    Usage,
    UsageObservation,
)
from tests.contract._store_adapters import open_store
from tests.support import facts

pytestmark = pytest.mark.anyio


@pytest.fixture
async def adapter(store_adapter: str, tmp_path: Path) -> AsyncIterator[RuntimeStore]:
    """One open store per adapter, empty."""
    async with open_store(store_adapter, tmp_path) as store:
        yield store


@pytest.fixture
async def resolver(adapter: RuntimeStore) -> AsyncIterator[AuthorityResolver]:
    async with AuthorityResolver.bind(adapter) as bound:
        yield bound


async def new_session(store: RuntimeStore) -> str:
    return await store.create_session(owner_kind="system", principal_id="p")


def ready(session_id: str, decision_id: str = "ctx_1", **fields: Any) -> ContextDecision:
    """A ready decision with every field set to something other than its default."""
    values: dict[str, Any] = {
        "decision_id": decision_id,
        "session_id": session_id,
        "turn_id": "turn_1",
        "step_id": 2,
        "kind": "ready",
        "estimated_input_tokens": 1_420,
        "hard_budget": 1_650,
        "output_budget": 300,
        "context_window": 2_000,
        "layers": (
            LayerSummary("instructions", 20, 1),
            LayerSummary("history", 900, 12, pruned=3),
        ),
        "raw_input_tokens": 1_400,
        "framing_tokens": 30,
        "estimator": "charclass/3.5/1.5",
        "exact_estimator": True,
        "provider": "p",
        "model": "m",
        "calibration": 1.0125,
        "summary_used": True,
        "cutoff": 8,
        "pruned_results": 3,
        "dropped_messages": 2,
        "protected_dropped": True,
        "compaction": "committed",
    }
    values.update(fields)
    return ContextDecision(**values)


def overflow(session_id: str, decision_id: str = "ctx_over") -> ContextDecision:
    return ContextDecision(
        decision_id=decision_id,
        session_id=session_id,
        turn_id="turn_1",
        step_id=0,
        kind="overflow",
        estimated_input_tokens=9_000,
        hard_budget=1_650,
        output_budget=300,
        context_window=2_000,
        overflow_reason="current_input_too_large",
    )


def observed(decision: ContextDecision, input_tokens: int, model: str = "m") -> UsageObservation:
    return UsageObservation(
        decision_id=decision.decision_id,
        session_id=decision.session_id,
        turn_id=decision.turn_id,
        step_id=decision.step_id,
        provider="p",
        model=model,
        usage=Usage(input_tokens, 5),
    )


async def refused(call: Awaitable[object], *, kind: type[Exception] = InvalidValue) -> str:
    """Await ``call``, expect ``kind``, and return its (bounded) message."""
    with pytest.raises(kind) as caught:
        await call
    message = str(caught.value)
    assert 0 < len(message) <= MESSAGE_LIMIT
    return message


# -- the typed decision record ---------------------------------------------------------


async def test_a_decision_record_round_trips_typed(adapter: RuntimeStore) -> None:
    session_id = await new_session(adapter)
    defaults = ContextDecision(
        decision_id="ctx_plain",
        session_id=session_id,
        turn_id="turn_1",
        step_id=0,
        kind="ready",
        estimated_input_tokens=10,
        hard_budget=-5,  # a tiny window can leave a negative budget
        output_budget=256,
        context_window=300,
    )
    for decision in (ready(session_id), overflow(session_id), defaults):
        await adapter.context.record_decision(decision)
        assert await adapter.context.decision(decision.decision_id) == decision
    assert await adapter.context.decision("ctx_missing") is None


def test_a_decision_record_validates_its_values() -> None:
    good = ready("ses_1")
    bad: list[dict[str, Any]] = [
        {"kind": "maybe"},
        {"decision_id": ""},
        {"turn_id": "t" * (MAX_DECISION_TEXT + 1)},
        {"step_id": -1},
        {"estimated_input_tokens": True},
        {"pruned_results": 1.5},
        {"context_window": -1},
        {"hard_budget": "1"},
        {"summary_used": 1},
        {"calibration": math.nan},
        {"calibration": 0.0},
        {"compaction": "sideways"},
        {"overflow_reason": "current_input_too_large"},  # a ready decision has none
        {"kind": "overflow"},  # an overflow decision needs one
        {"kind": "overflow", "overflow_reason": "too_big"},
        {"layers": ({"name": "history", "tokens": 1, "items": 1},)},
        {"estimator": ""},
    ]
    for change in bad:
        with pytest.raises(InvalidValue) as caught:
            dataclasses.replace(good, **change)
        assert len(caught.value.message) <= MESSAGE_LIMIT, change
    with pytest.raises(dataclasses.FrozenInstanceError):
        good.step_id = 3  # type: ignore[misc]
    assert isinstance(good.layers, tuple)


# -- bad input: typed, bounded, and nothing accepted is lost ---------------------------


async def test_bad_input_is_refused_with_a_typed_bounded_error_and_nothing_accepted_is_lost(
    adapter: RuntimeStore,
) -> None:
    context = adapter.context
    session_id = await new_session(adapter)
    kept = ready(session_id)
    await context.record_decision(kept)
    assert await context.keep_bootstrap(session_id, snapshot="notes", source="AGENTS.md")
    take = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="lease_a", owner="a", now=10.0, expires_at=70.0
    )
    assert take.kind == "taken"

    lease: dict[str, Any] = {"expected_cutoff": None, "owner": "b", "now": 10.0}
    commit: dict[str, Any] = {
        "lease_id": "lease_a",
        "text": "a summary",
        "cutoff_seq": 4,
        "added": 4,
        "summarizer": "s",
        "cooldown_until": 0.0,
    }
    attempts: list[Awaitable[object]] = [
        context.record_decision({"decision_id": "ctx_2"}),  # type: ignore[arg-type]
        # The same id again, with other numbers: the recorded decision stays as it was.
        context.record_decision(ready(session_id, estimated_input_tokens=1)),
        context.record_usage("usage"),  # type: ignore[arg-type]
        context.read_state(session_id=session_id, turn_id="t", window=0),
        context.read_state(session_id=session_id, turn_id="t", window=MAX_WINDOW + 1),
        context.read_state(session_id="", turn_id="t", window=5),
        context.keep_bootstrap("ses_missing", snapshot="x", source="AGENTS.md"),
        context.keep_bootstrap(
            session_id, snapshot="x" * (MAX_BOOTSTRAP_CHARS + 1), source="AGENTS.md"
        ),
        context.take_compaction_lease(session_id, lease_id="", expires_at=20.0, **lease),
        context.take_compaction_lease(session_id, lease_id="l", expires_at=math.inf, **lease),
        context.take_compaction_lease(session_id, lease_id="l", expires_at=5.0, **lease),
        context.take_compaction_lease("ses_missing", lease_id="l", expires_at=20.0, **lease),
        context.commit_summary(session_id, **{**commit, "text": "  "}),
        context.commit_summary(session_id, **{**commit, "text": "s" * (MAX_SUMMARY_CHARS + 1)}),
        context.commit_summary(session_id, **{**commit, "added": 0}),
        context.commit_summary(session_id, **{**commit, "cutoff_seq": -1}),
        context.commit_summary(session_id, **{**commit, "cooldown_until": math.nan}),
        context.release_compaction_lease(session_id, ""),
        context.decision(""),
    ]
    for attempt in attempts:
        message = await refused(attempt)
        assert "x" * 100 not in message
        assert "s" * 100 not in message

    assert await context.decision(kept.decision_id) == kept
    state = await context.read_state(session_id=session_id, turn_id="t", window=5)
    assert state.bootstrap == "notes"
    compaction = await context.compaction_state(session_id)
    assert compaction.lease_id == "lease_a"  # still held by its taker
    assert compaction.summary is None


async def test_a_refused_write_among_concurrent_writes_costs_only_itself(
    adapter: RuntimeStore,
) -> None:
    """Writes that share a commit (group commit) each stand or fall on their own."""
    session_id = await new_session(adapter)
    await adapter.context.record_decision(ready(session_id, "ctx_first"))
    outcomes: dict[str, object] = {}

    async def attempt(name: str, call: Callable[[], Awaitable[object]]) -> None:
        try:
            outcomes[name] = await call()
        except InvalidValue as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as group:
        for index in range(8):
            decision = ready(session_id, f"ctx_{index}")
            group.start_soon(
                attempt, f"good {index}", lambda d=decision: adapter.context.record_decision(d)
            )
            # Duplicates of the first decision, with other numbers: each is refused alone.
            group.start_soon(
                attempt,
                f"duplicate {index}",
                lambda i=index: adapter.context.record_decision(
                    ready(session_id, "ctx_first", estimated_input_tokens=i)
                ),
            )
    for index in range(8):
        assert outcomes[f"good {index}"] is None
        assert isinstance(outcomes[f"duplicate {index}"], InvalidValue)
        assert await adapter.context.decision(f"ctx_{index}") == ready(session_id, f"ctx_{index}")
    assert await adapter.context.decision("ctx_first") == ready(session_id, "ctx_first")


# -- usage and calibration ------------------------------------------------------------


async def test_usage_and_calibration_commit_together_once_per_decision(
    adapter: RuntimeStore,
) -> None:
    context = adapter.context
    session_id = await new_session(adapter)

    async def calibration() -> tuple[str, str, str, float, int] | None:
        state = await context.read_state(session_id=session_id, turn_id="t", window=1)
        found = state.calibration
        if found is None:
            return None
        return (found.provider, found.model, found.estimator, found.ratio, found.samples)

    over = overflow(session_id)
    await context.record_decision(over)
    assert await context.record_usage(observed(over, 500))
    assert await calibration() is None  # an overflow decision calibrates nothing

    first = ready(session_id, "ctx_a", raw_input_tokens=1_000)
    await context.record_decision(first)
    # The provider reports a dated alias: calibration stays keyed by the pinned model.
    assert await context.record_usage(observed(first, 800, model="m-2025-01-01"))
    assert await calibration() == ("p", "m", "charclass/3.5/1.5", pytest.approx(0.8), 1)
    assert not await context.record_usage(observed(first, 100))  # a repeat changes nothing
    assert await calibration() == ("p", "m", "charclass/3.5/1.5", pytest.approx(0.8), 1)

    second = ready(session_id, "ctx_b", raw_input_tokens=1_000)
    await context.record_decision(second)
    assert await context.record_usage(observed(second, 1_000))
    # Above the ratio but not above 1 (the estimate was not short): averaged in.
    assert await calibration() == ("p", "m", "charclass/3.5/1.5", pytest.approx(0.9), 2)

    # Whatever a provider reports, the ratio stays bounded; another model starts afresh.
    other = ready(session_id, "ctx_c", raw_input_tokens=1_000, model="n")
    await context.record_decision(other)
    assert await context.record_usage(observed(other, 1_000_000, model="n"))
    assert await calibration() == ("p", "n", "charclass/3.5/1.5", pytest.approx(4.0), 1)

    # Usage of a decision that was never recorded is still kept (the provider's truth).
    unknown = ready(session_id, "ctx_unrecorded")
    assert await context.record_usage(observed(unknown, 10))
    assert not await context.record_usage(observed(unknown, 10))


# -- prepare's state and the bootstrap snapshot ---------------------------------------


async def test_prepare_state_is_one_snapshot_after_the_cutoff_bounded_by_the_window(
    adapter: RuntimeStore, resolver: AuthorityResolver
) -> None:
    context = adapter.context
    scope: PrincipalScope = await resolver.for_conversation(facts("state"))
    session_id = scope.session_id or ""
    empty = await context.read_state(session_id=session_id, turn_id="turn_now", window=3)
    assert (empty.summary, empty.cutoff, empty.window, empty.older) == (None, None, (), False)
    assert (empty.bootstrap, empty.calibration) == (None, None)

    seqs = []
    for index in range(8):
        record = await adapter.append_message(
            scope,
            session_id,
            role="user",
            content=ModelMessage("user", f"m{index}").to_json(),
            turn_id="turn_old",
        )
        seqs.append(record.seq)
    await adapter.append_message(
        scope,
        session_id,
        role="user",
        content=ModelMessage("user", "mine").to_json(),
        turn_id="turn_now",
    )
    take = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="l", owner="o", now=0.0, expires_at=1.0
    )
    assert take.kind == "taken"
    committed = await context.commit_summary(
        session_id,
        lease_id="l",
        text="m0 and m1",
        cutoff_seq=seqs[1],
        added=2,
        summarizer="s",
        cooldown_until=0.0,
    )
    assert committed is not None

    state = await context.read_state(session_id=session_id, turn_id="turn_now", window=3)
    assert (state.summary, state.cutoff) == ("m0 and m1", seqs[1])
    assert [seq for seq, _ in state.window] == seqs[-3:]
    assert [m.content for _, m in state.window] == ["m5", "m6", "m7"]  # never this turn's own
    assert state.older
    whole = await context.read_state(session_id=session_id, turn_id="turn_now", window=6)
    assert [m.content for _, m in whole.window] == [f"m{i}" for i in range(2, 8)]
    assert not whole.older


async def test_a_read_after_a_seq_returns_only_what_is_new_under_the_same_cutoff(
    adapter: RuntimeStore, resolver: AuthorityResolver
) -> None:
    context = adapter.context
    scope: PrincipalScope = await resolver.for_conversation(facts("incremental"))
    session_id = scope.session_id or ""

    async def append(text: str, turn_id: str) -> int:
        record = await adapter.append_message(
            scope,
            session_id,
            role="user",
            content=ModelMessage("user", text).to_json(),
            turn_id=turn_id,
        )
        return record.seq

    seqs = [await append(f"m{i}", "turn_old") for i in range(4)]
    mine = await append("mine", "turn_now")
    full = await context.read_state(session_id=session_id, turn_id="turn_now", window=3)
    assert full.after is None
    # The turn's own rows come along (a window kept across turns needs them); ``window``
    # leaves them out.
    assert [(r.seq, r.message.content, r.turn_id) for r in full.rows] == [
        (seqs[1], "m1", "turn_old"),
        (seqs[2], "m2", "turn_old"),
        (seqs[3], "m3", "turn_old"),
        (mine, "mine", "turn_now"),
    ]
    assert [m.content for _, m in full.window] == ["m1", "m2", "m3"]
    assert full.older

    newer = [await append(f"n{i}", "turn_next") for i in range(2)]
    after = await context.read_state(
        session_id=session_id, turn_id="turn_next", window=3, after_seq=mine, after_cutoff=None
    )
    assert after.after == mine
    assert [(r.seq, r.message.content) for r in after.rows] == [
        (newer[0], "n0"),
        (newer[1], "n1"),
    ]
    assert not after.older
    nothing = await context.read_state(
        session_id=session_id,
        turn_id="turn_next",
        window=3,
        after_seq=newer[-1],
        after_cutoff=None,
    )
    assert (nothing.after, nothing.rows, nothing.older) == (newer[-1], (), False)
    # More arrived than one window holds: the newest window, and ``older`` says so.
    burst = [await append(f"b{i}", "turn_other") for i in range(5)]
    gap = await context.read_state(
        session_id=session_id,
        turn_id="turn_next",
        window=3,
        after_seq=newer[-1],
        after_cutoff=None,
    )
    assert [r.seq for r in gap.rows] == burst[-3:]
    assert (gap.after, gap.older) == (newer[-1], True)

    # Compaction moved the cutoff: whatever the caller holds, the read is a full one.
    take = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="l", owner="o", now=0.0, expires_at=1.0
    )
    assert take.kind == "taken"
    await context.commit_summary(
        session_id,
        lease_id="l",
        text="up to n1",
        cutoff_seq=newer[-1],
        added=7,
        summarizer="s",
        cooldown_until=0.0,
    )
    moved = await context.read_state(
        session_id=session_id,
        turn_id="turn_next",
        window=10,
        after_seq=newer[-1],
        after_cutoff=None,
    )
    assert (moved.after, moved.cutoff, moved.summary) == (None, newer[-1], "up to n1")
    assert [r.seq for r in moved.rows] == burst
    same = await context.read_state(
        session_id=session_id,
        turn_id="turn_next",
        window=10,
        after_seq=burst[-1],
        after_cutoff=newer[-1],
    )
    assert (same.after, same.rows, same.summary) == (burst[-1], (), "up to n1")
    for bad in (
        {"after_seq": -1},
        {"after_seq": True},
        {"after_seq": 3, "after_cutoff": -2},
        {"after_seq": 3, "after_cutoff": "1"},
    ):
        await refused(context.read_state(session_id=session_id, turn_id="t", window=3, **bad))


async def test_calibration_rises_at_once_and_falls_as_a_moving_average(
    adapter: RuntimeStore,
) -> None:
    """A sample above both the ratio and 1 (the provider counted more than the estimate)
    is taken as it is: the next request must fit. Any other is averaged in arithmetically
    (last weight 1/20 once 20 samples are in), as at least MIN_RATIO. The step's own answer
    is what the session then holds, and another estimator starts it afresh."""
    context = adapter.context
    session_id = await new_session(adapter)
    ratio, count = 0.0, 0
    for index in range(27):
        # 0.5 .. 2.0 (below MIN_RATIO, taken as it), never one value twice in a row.
        sample = 0.5 + (index * 7 % 16) / 10
        step = ready(session_id, f"ctx_avg_{index}", raw_input_tokens=1_000)
        recorded = await context.record_step(step, observed(step, round(sample * 1_000)))
        sample = max(MIN_RATIO, sample)
        weight = min(count, 20 - 1)
        rises = count == 0 or sample > max(ratio, 1.0)
        ratio, count = sample if rises else (ratio * weight + sample) / (weight + 1), count + 1
        assert recorded.calibration is not None
        assert (recorded.calibration.ratio, recorded.calibration.samples) == (
            pytest.approx(ratio, rel=1e-12),
            count,
        )
        state = await context.read_state(session_id=session_id, turn_id="t", window=1)
        assert state.calibration == recorded.calibration

    other = ready(session_id, "ctx_avg_other", raw_input_tokens=1_000, estimator="bytes/4")
    reset = await context.record_step(other, observed(other, 900))
    assert reset.calibration is not None
    assert (reset.calibration.estimator, reset.calibration.samples) == ("bytes/4", 1)
    assert reset.calibration.ratio == pytest.approx(0.9)


async def test_text_counted_far_below_the_estimate_lowers_the_ratio_only_to_min_ratio(
    adapter: RuntimeStore,
) -> None:
    """Chinese is counted at a quarter of the estimate (o200k): neither its first sample
    nor twenty more take the session's ratio below 0.8, where the English (0.71 of the
    estimate) and Python (0.62) the same session sends later are still counted high."""
    context = adapter.context
    session_id = await new_session(adapter)
    for index in range(21):
        step = ready(session_id, f"ctx_cjk_{index}", raw_input_tokens=3_608)
        recorded = await context.record_step(step, observed(step, 875))
        assert recorded.calibration is not None
        assert recorded.calibration.ratio == pytest.approx(0.8)
    assert MIN_RATIO == 0.8


async def test_a_small_request_never_lowers_the_calibration(adapter: RuntimeStore) -> None:
    """A request of a few hundred estimated tokens is mostly the estimate's generous fixed
    costs: a provider counting fewer (24 of 156) must not halve the estimates of the larger
    requests that follow. Counting more, it raises the ratio as any request does."""
    context = adapter.context
    session_id = await new_session(adapter)
    small = ready(session_id, "ctx_small", raw_input_tokens=156)
    first = await context.record_step(small, observed(small, 24))
    assert first.calibration is not None
    assert (first.calibration.ratio, first.calibration.samples) == (1.0, 1)
    large = ready(session_id, "ctx_large", raw_input_tokens=MIN_LOWERING_TOKENS)
    second = await context.record_step(large, observed(large, MIN_LOWERING_TOKENS * 17 // 20))
    assert second.calibration is not None
    assert second.calibration.ratio == pytest.approx((1.0 + 0.85) / 2)
    under = ready(session_id, "ctx_small_under", raw_input_tokens=200)
    third = await context.record_step(under, observed(under, 500))
    assert third.calibration is not None
    assert third.calibration.ratio == pytest.approx(2.5)
    # Above 1, small requests counted low do not pull the ratio back down either.
    for n in range(10):
        small = ready(session_id, f"ctx_small_{n}", raw_input_tokens=300)
        held = await context.record_step(small, observed(small, 100))
        assert held.calibration is not None
        assert held.calibration.ratio == pytest.approx(2.5)


async def test_a_refused_request_raises_the_calibration_at_once(adapter: RuntimeStore) -> None:
    """The provider refused a request the estimate let through: its decision is kept, and
    the ratio rises at once to the one that puts that request at its hard budget (with
    ``REFUSAL_STEP`` to spare), or ``REFUSAL_STEP`` times the current one when that is
    more, never past ``MAX_RATIO``. Another provider, model or estimator starts afresh."""
    context = adapter.context
    session_id = await new_session(adapter)
    first = ready(session_id, "ctx_refused_1", raw_input_tokens=2_000, hard_budget=1_650)
    raised = await context.record_refusal(first)
    assert raised is not None
    assert (raised.ratio, raised.samples) == (pytest.approx(1_650 / 2_000 * REFUSAL_STEP), 1)
    assert await context.decision("ctx_refused_1") == first
    # Refused again with less history: REFUSAL_STEP times the ratio is the larger.
    second = ready(session_id, "ctx_refused_2", raw_input_tokens=1_600, hard_budget=1_650)
    again = await context.record_refusal(second)
    assert again is not None
    assert again.ratio == pytest.approx(raised.ratio * REFUSAL_STEP)
    for n in range(12):
        step = ready(session_id, f"ctx_refused_more_{n}", raw_input_tokens=1_000)
        capped = await context.record_refusal(step)
        assert capped is not None
        assert capped.ratio <= MAX_RATIO
    assert capped.ratio == MAX_RATIO
    state = await context.read_state(session_id=session_id, turn_id="t", window=1)
    assert state.calibration == capped
    other = ready(session_id, "ctx_refused_other", raw_input_tokens=2_000, model="m2")
    reset = await context.record_refusal(other)
    assert reset is not None
    assert (reset.model, reset.samples) == ("m2", 1)
    assert reset.ratio == pytest.approx(1_650 / 2_000 * REFUSAL_STEP)
    # Nothing to scale: the decision is kept and the calibration left as it is.
    unpinned = ready(session_id, "ctx_refused_unpinned", provider=None)
    assert await context.record_refusal(unpinned) is None
    assert await context.decision("ctx_refused_unpinned") == unpinned
    assert (
        await context.read_state(session_id=session_id, turn_id="t", window=1)
    ).calibration == reset
    await refused(context.record_refusal(object()))  # type: ignore[arg-type]


async def test_a_step_records_its_decision_usage_and_calibration_in_one_call(
    adapter: RuntimeStore,
) -> None:
    context = adapter.context
    session_id = await new_session(adapter)
    step = ready(session_id, "ctx_step", raw_input_tokens=1_000)
    recorded = await context.record_step(step, observed(step, 800))
    assert recorded.observed
    assert recorded.calibration is not None
    assert recorded.calibration.ratio == pytest.approx(0.8)
    assert recorded.calibration.samples == 1
    assert await context.decision("ctx_step") == step
    # A repeat changes nothing, and neither does usage recorded separately afterwards.
    again = await context.record_step(step, observed(step, 100))
    assert not again.observed
    assert again.calibration == recorded.calibration
    assert not await context.record_usage(observed(step, 100))

    # A decision recorded before (a write whose outcome was unknown) stays as it was, and
    # the usage counts against the recorded one.
    first = ready(session_id, "ctx_known", raw_input_tokens=500)
    await context.record_decision(first)
    retried = await context.record_step(
        dataclasses.replace(first, raw_input_tokens=2_000), observed(first, 1_000)
    )
    assert retried.observed
    assert await context.decision("ctx_known") == first
    assert retried.calibration is not None
    # 1000 / 500, above 0.8 so taken at once: calibrated against the recorded raw estimate.
    assert retried.calibration.ratio == pytest.approx(2.0)

    other = await new_session(adapter)
    attempts: list[Awaitable[object]] = [
        context.record_step("decision", observed(step, 1)),  # type: ignore[arg-type]
        context.record_step(step, "usage"),  # type: ignore[arg-type]
        context.record_step(ready(session_id, "ctx_x"), observed(ready(session_id, "ctx_y"), 1)),
        context.record_step(ready(session_id, "ctx_z"), observed(ready(other, "ctx_z"), 1)),
    ]
    for attempt in attempts:
        await refused(attempt)
    for missing in ("ctx_x", "ctx_y", "ctx_z"):
        assert await context.decision(missing) is None


async def test_decisions_written_in_a_batch_skip_the_recorded_ones(adapter: RuntimeStore) -> None:
    context = adapter.context
    session_id = await new_session(adapter)
    kept = ready(session_id, "ctx_kept")
    await context.record_decision(kept)
    batch = [
        ready(session_id, "ctx_kept", estimated_input_tokens=1),  # recorded already: skipped
        ready(session_id, "ctx_new_1"),
        overflow(session_id, "ctx_new_2"),
    ]
    assert await context.record_decisions(batch) == 2
    assert await context.record_decisions(batch) == 0  # writing them again is safe
    assert await context.record_decisions([]) == 0
    assert await context.decision("ctx_kept") == kept
    assert await context.decision("ctx_new_1") == batch[1]
    assert await context.decision("ctx_new_2") == batch[2]
    for bad in ("ctx", [kept, "ctx"], None):
        await refused(context.record_decisions(bad))  # type: ignore[arg-type]


async def test_the_first_bootstrap_snapshot_is_kept(adapter: RuntimeStore) -> None:
    session_id = await new_session(adapter)
    context = adapter.context
    assert await context.keep_bootstrap(session_id, snapshot="one", source="AGENTS.md") == "one"
    assert await context.keep_bootstrap(session_id, snapshot="two", source="AGENTS.md") == "one"
    state = await context.read_state(session_id=session_id, turn_id="t", window=1)
    assert state.bootstrap == "one"


async def test_a_session_that_found_no_bootstrap_keeps_none_ever(adapter: RuntimeStore) -> None:
    """A "looked, nothing" record is kept too: a file that appears later (an agent may write one)
    never becomes this session's instructions, after a restart as much as before."""
    session_id = await new_session(adapter)
    context = adapter.context
    assert await context.keep_bootstrap(session_id, snapshot="", source="") == ""
    assert await context.keep_bootstrap(session_id, snapshot="late", source="AGENTS.md") == ""
    state = await context.read_state(session_id=session_id, turn_id="t", window=1)
    assert state.bootstrap == ""
    # Half of the "nothing" record is no record: refused, nothing kept.
    other = await new_session(adapter)
    await refused(context.keep_bootstrap(other, snapshot="", source="AGENTS.md"))
    await refused(context.keep_bootstrap(other, snapshot="text", source=""))
    assert (await context.read_state(session_id=other, turn_id="t", window=1)).bootstrap is None


# -- summaries and the compaction lease -----------------------------------------------


async def test_the_compaction_lease_fences_every_commit(adapter: RuntimeStore) -> None:
    context = adapter.context
    session_id = await new_session(adapter)

    async def take(lease_id: str, **options: Any) -> str:
        fields: dict[str, Any] = {
            "expected_cutoff": None,
            "owner": f"owner of {lease_id}",
            "now": 100.0,
            "expires_at": 200.0,
        }
        fields.update(options)
        return (await context.take_compaction_lease(session_id, lease_id=lease_id, **fields)).kind

    async def commit(lease_id: str, cutoff: int, **options: Any) -> object:
        fields: dict[str, Any] = {
            "text": f"up to {cutoff}",
            "cutoff_seq": cutoff,
            "added": 2,
            "summarizer": "s",
            "cooldown_until": 160.0,
        }
        fields.update(options)
        return await context.commit_summary(session_id, lease_id=lease_id, **fields)

    assert await take("lease_a") == "taken"
    held = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="lease_b", owner="b", now=150.0, expires_at=250.0
    )
    assert (held.kind, held.holder_lease, held.holder_owner) == (
        "held",
        "lease_a",
        "owner of lease_a",
    )
    # B proved A's holder dead and takes over; A's commit is then fenced out.
    assert await take("lease_b", dead_lease="lease_a") == "taken"
    assert await commit("lease_a", 4) is None
    assert await context.summary(session_id) is None
    done = await commit("lease_b", 4)
    assert done == await context.summary(session_id)
    assert done is not None
    assert (done.summary, done.cutoff_seq, done.summarized_messages, done.summarizer) == (
        "up to 4",
        4,
        2,
        "s",
    )
    state = await context.compaction_state(session_id)
    assert state.lease is not None
    assert (state.lease_id, state.lease.owner, state.lease.expires_at) == (None, None, None)
    assert state.lease.cooldown_until == 160.0

    # A stale cutoff rereads; the cooldown refuses unless forced; after it, a plain take works.
    reread = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="lease_c", owner="c", now=150.0, expires_at=250.0
    )
    assert (reread.kind, reread.summary) == ("reread", done)
    assert await take("lease_c", expected_cutoff=4, now=150.0) == "cooldown"
    assert await take("lease_c", expected_cutoff=4, now=150.0, force=True) == "taken"
    await refused(commit("lease_c", 4))  # a new cutoff must follow the committed one
    assert not await context.release_compaction_lease(session_id, "lease_a")
    assert await context.release_compaction_lease(session_id, "lease_c")
    assert (await context.compaction_state(session_id)).lease_id is None
    assert await take("lease_d", expected_cutoff=4, now=170.0) == "taken"
    later = await commit("lease_d", 9, added=3)
    assert later is not None
    assert (later.cutoff_seq, later.summarized_messages) == (9, 5)


async def test_an_expired_lease_is_taken_over(adapter: RuntimeStore) -> None:
    context = adapter.context
    session_id = await new_session(adapter)
    first = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="old", owner="o", now=0.0, expires_at=10.0
    )
    assert first.kind == "taken"
    still = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="new", owner="n", now=10.0, expires_at=20.0
    )
    assert still.kind == "held"
    after = await context.take_compaction_lease(
        session_id, expected_cutoff=None, lease_id="new", owner="n", now=10.5, expires_at=20.0
    )
    assert after.kind == "taken"
    assert (await context.compaction_state(session_id)).lease_id == "new"


# -- inspect queries -------------------------------------------------------------------


async def test_inspect_queries_are_bounded_and_owner_checked(
    adapter: RuntimeStore, resolver: AuthorityResolver
) -> None:
    operator = await resolver.operator_issuer().issue("ops", reason="inspect the store")
    scope = await resolver.for_conversation(facts("mine"))
    other = await resolver.for_conversation(facts("theirs"))
    inspect = adapter.inspect
    session_id = scope.session_id or ""
    quiet = await inspect.turn_decisions(scope, session_id=session_id)
    assert (quiet.session_id, quiet.turn, quiet.decisions, quiet.truncated) == (
        session_id,
        None,
        (),
        False,
    )
    usage = await inspect.session_usage(operator, session_id)
    assert (usage.turns, usage.calibration, usage.sums) == ((), None, ())
    for attempt in (
        inspect.turn_decisions(scope),
        inspect.turn_decisions(scope, session_id=session_id, limit=0),
        inspect.turn_decisions(scope, session_id=session_id, limit=MAX_INSPECT_ROWS + 1),
        inspect.session_usage(scope, session_id, turns=0),
        inspect.session_usage(scope, session_id, steps=MAX_INSPECT_ROWS + 1),
    ):
        await refused(attempt)
    for denied in (
        inspect.turn_decisions(scope, session_id=other.session_id),
        inspect.turn_decisions(scope, turn_id="turn_missing"),
        inspect.session_usage(scope, other.session_id or ""),
        inspect.session_usage(scope, "ses_missing"),
    ):
        await refused(denied, kind=NotFoundOrUnauthorized)


# -- the SQL adapters' persisted form ---------------------------------------------------


async def write_raw_decision(
    store: RuntimeStore, decision_id: str, session_id: str, kind: str, summary: str
) -> None:
    assert isinstance(store, RowStore)
    await store.write(
        lambda c: c.execute(
            "INSERT INTO context_decisions (decision_id, session_id, turn_id, step_id, kind, "
            "summary, at) VALUES (?, ?, 'turn_1', 0, ?, ?, 'then')",
            [decision_id, session_id, kind, summary],
        )
    )


async def test_sqlite_decodes_legacy_rows_and_refuses_damaged_ones(tmp_path: Path) -> None:
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        session_id = await new_session(store)
        # How the first releases recorded decisions.
        await write_raw_decision(
            store, "ctx_v1", session_id, "overflow", '{"reason": "schema_too_large", "fixed": 70}'
        )
        legacy = await store.context.decision("ctx_v1")
        assert legacy is not None
        assert (legacy.kind, legacy.overflow_reason, legacy.estimated_input_tokens) == (
            "overflow",
            "schema_too_large",
            70,
        )
        assert (legacy.hard_budget, legacy.layers) == (None, ())
        await write_raw_decision(
            store,
            "ctx_v2",
            session_id,
            "ready",
            '{"estimated_input_tokens": 5, "hard_budget": 9, "output_budget": 1, '
            '"context_window": 12, "estimator": "e", "layers": '
            '[{"name": "current", "tokens": 5, "items": 1, "pruned": 0}]}',
        )
        older = await store.context.decision("ctx_v2")
        assert older is not None
        assert older.layers == (LayerSummary("current", 5, 1),)

        secret = "sk-live-" + "9" * 600
        damaged = {
            "ctx_bad_json": "{not json",
            "ctx_bad_type": '{"estimated_input_tokens": "' + secret + '"}',
            "ctx_unknown": '{"estimated_input_tokens": 1, "prompt": "' + secret + '"}',
            "ctx_no_tokens": '{"hard_budget": 1}',
            "ctx_bad_layer": '{"estimated_input_tokens": 1, "layers": [{"name": "x"}]}',
        }
        for decision_id, summary in damaged.items():
            await write_raw_decision(store, decision_id, session_id, "ready", summary)
            message = await refused(store.context.decision(decision_id), kind=StoreError)
            assert decision_id in message
            assert "sk-live" not in message
        await write_raw_decision(
            store, "ctx_bad_kind", session_id, "sideways", '{"estimated_input_tokens": 1}'
        )
        await refused(store.context.decision("ctx_bad_kind"), kind=StoreError)

        # A damaged decision costs its calibration step, never the provider's usage.
        bad = dataclasses.replace(ready(session_id), decision_id="ctx_bad_type")
        assert await store.context.record_usage(observed(bad, 10))
        state = await store.context.read_state(session_id=session_id, turn_id="t", window=1)
        assert state.calibration is None
        assert not await store.context.record_usage(observed(bad, 10))


def test_the_sqlite_form_persists_every_field_of_the_record() -> None:
    from hostkit.store._context_rows import encode_decision

    columns = {"decision_id", "session_id", "turn_id", "step_id", "kind"}
    fields = {field.name for field in dataclasses.fields(ContextDecision)}
    body = json.loads(encode_decision(ready("ses_1")))
    assert set(body) == fields - columns
    assert body["layers"][1] == {"name": "history", "tokens": 900, "items": 12, "pruned": 3}
