"""Compaction through ``prepare()``: pruning first, then one leased summarizer, commit used at once;
a concurrent prepare waits and rereads; cancellation commits nothing; manual compact."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.context import (
    DEFAULT_SUMMARY_INSTRUCTIONS,
    REFERENCE_ONLY,
    ContextManager,
    ProviderSummarizer,
    SessionCompactor,
    Summarizer,
)
from hostkit.store import LeaseOwner, RuntimeStore
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import (
    ContextReady,
    ContextRequest,
    ModelLimits,
    ModelMessage,
    PrincipalScope,
    ToolCall,
    TurnExecutionContext,
)
from tests.contract.test_context_basic import add_history, context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

TIGHT = ModelLimits(context_window=1_600, max_output_tokens=300, safety_margin_tokens=50)


@dataclass
class CountingSummarizer:
    """Summarizes by counting; optionally waits on a gate first."""

    gate: anyio.Event | None = None
    calls: int = 0
    started: anyio.Event | None = None

    @property
    def name(self) -> str:
        return "counting"

    async def summarize(
        self, previous: str | None, messages: Sequence[ModelMessage], *, max_tokens: int
    ) -> str:
        self.calls += 1
        if self.started is not None:
            self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return f"{len(messages)} earlier messages about sheds"


async def manager_with(
    store: RuntimeStore, summarizer: Summarizer, worker: str, **options: float
) -> ContextManager:
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, worker)
    compactor = SessionCompactor(store, owner=owner, cooldown_s=0, **options)

    async def summarizers(context: TurnExecutionContext) -> Summarizer:
        return summarizer

    return ContextManager(store, compactor=compactor, summarizers=summarizers)


async def long_session(authority: AuthorityResolver, store: RuntimeStore) -> PrincipalScope:
    scope = await authority.for_conversation(facts("compaction"))
    await add_history(
        store,
        scope,
        [ModelMessage("user", f"shed detail {i} " + "s" * 500) for i in range(12)]
        + [ModelMessage("user", "latest"), ModelMessage("assistant", "noted")],
    )
    return scope


def request(context: TurnExecutionContext) -> ContextRequest:
    return ContextRequest(
        context=context, step_id=0, limits=TIGHT, messages=(ModelMessage("user", "now"),)
    )


async def summary_rows(store: RuntimeStore, scope: PrincipalScope) -> list[tuple[str, int]]:
    summary = await store.context.summary(scope.session_id or "")
    return [] if summary is None else [(summary.summary, summary.cutoff_seq)]


async def lease_holders(store: RuntimeStore, scope: PrincipalScope) -> list[str | None]:
    lease = (await store.context.compaction_state(scope.session_id or "")).lease
    return [] if lease is None else [lease.lease_id]


async def test_an_over_budget_history_is_compacted_once_and_the_summary_used_at_once(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await long_session(authority, store)
    summarizer = CountingSummarizer()
    manager = await manager_with(store, summarizer, "w1")
    ready = await manager.prepare(request(context_for(scope)))
    assert isinstance(ready, ContextReady)
    assert summarizer.calls == 1
    ((summary, cutoff),) = await summary_rows(store, scope)
    assert summary == "12 earlier messages about sheds"
    texts = [m.content for m in ready.messages]
    assert texts == [REFERENCE_ONLY + summary, "latest", "noted", "now"]
    assert ready.summary_used
    assert await lease_holders(store, scope) == [None]
    # The next turn reads from the cutoff: no second summary is needed.
    again = await manager.prepare(request(context_for(scope, "turn_2")))
    assert isinstance(again, ContextReady)
    assert [m.content for m in again.messages] == texts
    assert summarizer.calls == 1
    assert cutoff > 0


async def test_pruning_that_is_enough_never_calls_the_summarizer(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await authority.for_conversation(facts("prune-first"))
    call = ToolCall("c1", "notes_read", {})
    await add_history(
        store,
        scope,
        [
            ModelMessage("user", "read it"),
            ModelMessage("assistant", "", (call,)),
            ModelMessage("tool", "z" * 8_000, tool_call_id="c1", name="notes_read"),
            ModelMessage("user", "latest"),
            ModelMessage("assistant", "noted"),
        ],
    )
    summarizer = CountingSummarizer()
    manager = await manager_with(store, summarizer, "w1")
    ready = await manager.prepare(request(context_for(scope)))
    assert isinstance(ready, ContextReady)
    assert summarizer.calls == 0
    assert await summary_rows(store, scope) == []
    assert "[pruned: the result of notes_read (8,000 characters)]" in [
        m.content for m in ready.messages
    ]


async def test_a_concurrent_prepare_waits_for_the_lease_holder_and_rereads(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await long_session(authority, store)
    gate, started = anyio.Event(), anyio.Event()
    first_summarizer = CountingSummarizer(gate=gate, started=started)
    second_summarizer = CountingSummarizer()
    first = await manager_with(store, first_summarizer, "w1")
    second = await manager_with(store, second_summarizer, "w2", wait_s=10)
    results: dict[str, ContextReady] = {}

    async def run(name: str, manager: ContextManager, turn: str) -> None:
        ready = await manager.prepare(request(context_for(scope, turn)))
        assert isinstance(ready, ContextReady)
        results[name] = ready

    async with anyio.create_task_group() as group:
        group.start_soon(run, "first", first, "turn_a")
        await started.wait()
        group.start_soon(run, "second", second, "turn_b")
        await anyio.sleep(0.2)
        assert "second" not in results  # waiting on the lease, not summarizing
        gate.set()
    assert (first_summarizer.calls, second_summarizer.calls) == (1, 0)
    assert results["second"].summary_used
    assert [m.content for m in results["second"].messages] == [
        m.content for m in results["first"].messages
    ]


async def test_cancelling_prepare_mid_summary_commits_nothing_and_frees_the_lease(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await long_session(authority, store)
    started = anyio.Event()
    summarizer = CountingSummarizer(gate=anyio.Event(), started=started)
    manager = await manager_with(store, summarizer, "w1")
    async with anyio.create_task_group() as group:
        group.start_soon(manager.prepare, request(context_for(scope)))
        await started.wait()
        group.cancel_scope.cancel()
    assert await summary_rows(store, scope) == []
    assert await lease_holders(store, scope) == [None]
    # A later prepare compacts normally.
    done = CountingSummarizer()
    ready = await (await manager_with(store, done, "w2")).prepare(
        request(context_for(scope, "turn_2"))
    )
    assert isinstance(ready, ContextReady)
    assert done.calls == 1


async def test_manual_compact_goes_through_the_same_lease(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    scope = await long_session(authority, store)
    summarizer = CountingSummarizer()
    manager = await manager_with(store, summarizer, "w1")
    outcome = await manager.compact(context_for(scope))
    assert outcome is not None
    assert outcome.kind == "committed"
    ((summary, _),) = await summary_rows(store, scope)
    # Everything but the protected tail (the last two groups) was folded.
    assert summary == "12 earlier messages about sheds"
    assert await lease_holders(store, scope) == [None]


async def test_a_summarizer_that_cannot_be_built_falls_back_deterministically(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    from hostkit.errors import ProviderError

    scope = await long_session(authority, store)
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "w1")

    async def broken(context: TurnExecutionContext) -> CountingSummarizer:
        raise ProviderError("the summarizer's server would not start", provider="local")

    manager = ContextManager(
        store, compactor=SessionCompactor(store, owner=owner, cooldown_s=0), summarizers=broken
    )
    ready = await manager.prepare(request(context_for(scope)))
    assert isinstance(ready, ContextReady)
    assert ready.summary_used
    ((summary, _),) = await summary_rows(store, scope)
    assert "shed detail 0" in summary  # the extractive fallback, not a failed turn


async def test_a_summary_asked_for_while_preparing_is_capped_reported_and_recorded(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """The summarizer call ``prepare()`` makes asks for at most a third of the agent's hard
    input budget (a summary leaves history its room), is reported live like a model call
    (``provider.started`` / ``provider.responded``, marked ``summary``, with the step it
    was made for), is recorded against that turn step, and its usage comes back with the
    prepared context for the turn's own total."""
    scope = await long_session(authority, store)
    roomy = ModelLimits(context_window=32_000, max_output_tokens=4_096)
    model = ScriptedModel([Reply("they talked about sheds")], limits=roomy)
    manager = await manager_with(store, ProviderSummarizer(model), "w1")
    heard: list[tuple[str, dict[str, Any]]] = []

    def hear(kind: str, data: Mapping[str, Any]) -> None:
        heard.append((kind, dict(data)))

    asked = dataclasses.replace(request(context_for(scope)), step_id=2, on_event=hear)
    ready = await manager.prepare(asked)
    assert isinstance(ready, ContextReady)
    (summary_request,) = model.requests
    assert summary_request.messages[0].content == DEFAULT_SUMMARY_INSTRUCTIONS
    _, hard = manager.budget(TIGHT)
    assert summary_request.max_output_tokens == hard // 3 < 512
    assert [kind for kind, _ in heard] == ["provider.started", "provider.responded"]
    assert all(data["summary"] is True and data["step"] == 2 for _, data in heard)
    responded = heard[1][1]
    assert ready.summary_usage is not None
    assert ready.summary_usage.input_tokens == responded["input_tokens"] > 0
    assert ready.summary_usage.output_tokens == responded["output_tokens"] > 0
    recorded = await store.read(
        lambda c: c.execute(
            "SELECT d.kind, d.turn_id, d.step_id, u.input_tokens, u.output_tokens "
            "FROM usage_observations u JOIN context_decisions d USING (decision_id)"
        ).fetchall()
    )
    assert [tuple(row) for row in recorded] == [
        ("summary", "turn_now", 2, responded["input_tokens"], responded["output_tokens"])
    ]
    assert responded["decision_id"] is not None
