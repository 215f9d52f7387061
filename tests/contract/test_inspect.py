"""Inspector view-models over real turns: the numbers are the recorded rows, owner-checked in
SQL, bounded; cost where the model is priced; ``hostkit context`` and ``hostkit budget``."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from hostkit.cli._inspect import budget_report, context_report
from hostkit.context import DEFAULT_SUMMARY_INSTRUCTIONS
from hostkit.effects import ToolContext, tool
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.host import Host, parse_config
from hostkit.inspect import (
    MAX_STEPS,
    MAX_TURNS,
    PRICES,
    ContextView,
    ModelPrice,
    approval_rows,
    budget_view,
    context_view,
    cost_text,
    price_for,
    session_rows,
)
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelLimits, ModelRequest, PrincipalScope, TurnResult
from tests.contract.test_cli import hostkit
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

# Small enough that the fifth 1,500-character note pushes old results out: pruning.
TIGHT = ModelLimits(context_window=2_000, max_output_tokens=300, safety_margin_tokens=50)
NOTE = "x" * 1_500


@tool("notes.big")
async def big_note(ctx: ToolContext, n: int) -> str:
    """Read a big note."""
    return f"note {n} " + NOTE


def reader(req: ModelRequest) -> Reply | CallTools:
    """Read one note per turn, then answer; a summarizer request (no tools) gets a summary."""
    if not req.tools:
        return Reply("they read notes")
    if req.messages[-1].role == "tool":
        return Reply("read it")
    return CallTools(("notes_big", {"n": len(req.messages)}))


def reading_model(model: str = "gpt-4o-mini") -> ScriptedModel:
    return ScriptedModel([reader], repeat_last=True, model=model, limits=TIGHT)


@asynccontextmanager
async def reading_host(
    tmp_path: Path, model: str = "gpt-4o-mini", **options: Any
) -> AsyncIterator[Host]:
    async with open_host(tmp_path, reading_model(model), tools=[big_note], **options) as host:
        yield host


async def read_turns(host: Host, count: int, conversation: str = "c1") -> list[TurnResult]:
    results = []
    for index in range(count):
        result = await host.turns.run(request(f"read note {index}", conversation=conversation))
        assert result.outcome == "completed", result.error
        results.append(result)
    return results


async def scope_of(host: Host, conversation: str) -> PrincipalScope:
    return await host.authority.for_conversation(
        ConversationFacts(channel="test", conversation_key=conversation, principal_key="alice")
    )


async def decisions(host: Host, turn_id: str) -> list[tuple[Any, ...]]:
    """(step, decision id, kind, reported input tokens) straight from the SQLite rows.

    Deliberately not through the inspect queries under test.
    """
    return await host.store.read(  # type: ignore[attr-defined, no-any-return]
        lambda c: c.execute(
            "SELECT d.step_id, d.decision_id, d.kind, u.input_tokens "
            "FROM context_decisions d LEFT JOIN usage_observations u USING (decision_id) "
            "WHERE d.turn_id = ? ORDER BY d.step_id",
            [turn_id],
        ).fetchall()
    )


async def usage_rows(host: Host, session_id: str) -> list[tuple[Any, ...]]:
    return await host.store.read(
        lambda c: c.execute(
            "SELECT turn_id, step_id, model, input_tokens, output_tokens, cache_read_tokens, "
            "cache_write_tokens, estimated_input_tokens FROM usage_observations "
            "WHERE session_id = ? ORDER BY id",
            [session_id],
        ).fetchall()
    )


async def test_a_context_view_is_exactly_what_the_decisions_recorded(tmp_path: Path) -> None:
    async with reading_host(tmp_path) as host:
        results = await read_turns(host, 5)
        last = results[-1]
        operator = await host.operator("ops", reason="inspect context")
        latest = await context_view(host, operator, session_id=last.session_id)
        by_turn = await context_view(host, operator, turn_id=last.turn_id)
        both = await context_view(host, operator, session_id=last.session_id, turn_id=last.turn_id)
        assert latest == by_turn == both
        assert (latest.turn_id, latest.turn_status, latest.core_id) == (
            last.turn_id,
            "completed",
            "assistant",
        )
        rows = await decisions(host, last.turn_id)
        assert [step.decision_id for step in latest.steps] == [row[1] for row in rows]
        for step, (step_id, decision_id, kind, reported) in zip(latest.steps, rows, strict=True):
            recorded = await host.store.context.decision(decision_id)
            assert recorded is not None
            assert (step.step_id, step.kind, step.reported_input_tokens) == (
                step_id,
                kind,
                reported,
            )
            assert (recorded.step_id, recorded.kind, recorded.turn_id) == (
                step_id,
                kind,
                last.turn_id,
            )
            assert step.layers == recorded.layers
            for field in (
                "estimated_input_tokens",
                "raw_input_tokens",
                "framing_tokens",
                "hard_budget",
                "output_budget",
                "context_window",
                "summary_used",
                "cutoff",
                "pruned_results",
                "dropped_messages",
                "protected_dropped",
                "compaction",
                "estimator",
                "exact_estimator",
                "calibration",
            ):
                assert getattr(step, field) == getattr(recorded, field), field
            assert step.overflow_reason is None
            assert step.context_window == TIGHT.context_window
        # The fifth note no longer fits: old results were pruned to stubs, and it shows.
        assert any(step.pruned_results > 0 for step in latest.steps)
        # Counts and names only: no message content reaches a view.
        assert "note " not in repr(latest)
        assert NOTE[:50] not in repr(latest)
        assert "read note" not in repr(latest)


async def test_an_overflow_decision_shows_its_reason_and_the_tokens_it_needed(
    tmp_path: Path,
) -> None:
    async with reading_host(tmp_path) as host:
        result = await host.turns.run(request("y" * 9_000))
        assert result.outcome != "completed"
        operator = await host.operator("ops", reason="inspect an overflow")
        view = await context_view(host, operator, turn_id=result.turn_id)
        ((_, decision_id, kind, _),) = await decisions(host, result.turn_id)
        recorded = await host.store.context.decision(decision_id)
        (step,) = view.steps
        assert recorded is not None
        assert (step.kind, kind, recorded.kind) == ("overflow", "overflow", "overflow")
        assert step.overflow_reason == recorded.overflow_reason == "current_input_too_large"
        assert step.estimated_input_tokens == recorded.estimated_input_tokens > TIGHT.context_window
        assert step.layers == recorded.layers == ()
        assert step.hard_budget == recorded.hard_budget
        assert step.hard_budget is not None
        assert step.hard_budget > 0
        assert step.reported_input_tokens is None


async def test_a_budget_view_is_the_usage_rows_with_cost_for_a_priced_model(
    tmp_path: Path,
) -> None:
    async with reading_host(tmp_path, model="gpt-4o-mini") as host:
        results = await read_turns(host, 3)
        session_id = results[0].session_id
        operator = await host.operator("ops", reason="inspect budget")
        view = await budget_view(host, operator, session_id)
        rows = await usage_rows(host, session_id)
        calibration = await host.store.read(
            lambda c: c.execute(
                "SELECT provider, model, estimator, ratio, samples, updated_at "
                "FROM context_calibration WHERE session_id = ?",
                [session_id],
            ).fetchone()
        )
    assert [turn.turn_id for turn in view.turns] == [r.turn_id for r in results]
    steps = [(turn.turn_id, step) for turn in view.turns for step in turn.steps]
    assert len(steps) == len(rows) == 6
    price = PRICES["gpt-4o-mini"]
    for (turn_id, step), row in zip(steps, rows, strict=True):
        assert (
            turn_id,
            step.step_id,
            step.model,
            step.input_tokens,
            step.output_tokens,
            step.cache_read_tokens,
            step.cache_write_tokens,
            step.estimated_input_tokens,
        ) == row
        assert step.error_pct == round((row[7] - row[3]) / row[3] * 100, 2)
        assert step.cost_usd == pytest.approx(
            (row[3] * price.input + row[4] * price.output) / 1_000_000
        )
    assert view.calibration is not None
    assert dataclasses.astuple(view.calibration) == calibration
    totals = view.totals
    assert (totals.steps, totals.input_tokens, totals.output_tokens) == (
        6,
        sum(row[3] for row in rows),
        sum(row[4] for row in rows),
    )
    assert totals.cost_usd == pytest.approx(sum(s.cost_usd or 0 for _, s in steps))
    assert totals.unpriced_steps == 0
    for turn, result in zip(view.turns, results, strict=True):
        assert (turn.totals.input_tokens, turn.totals.output_tokens) == (
            result.usage.input_tokens,
            result.usage.output_tokens,
        )
    assert not view.turns_truncated


def talker(req: ModelRequest) -> Reply:
    """Long answers, so the session compacts by its fifth turn; summarizer requests get one."""
    if req.messages[0].content == DEFAULT_SUMMARY_INSTRUCTIONS:
        return Reply("they talked about sheds")
    return Reply("about sheds: " + "the shed is green " * 90)


async def test_a_compactions_summarizer_call_is_counted_wherever_usage_is(
    tmp_path: Path,
) -> None:
    """The summary a compaction asks for is a paid provider call like any step: it is in
    the budget view (a row marked ``summary``, before the step it was made for), in the
    turn's and the session's totals, in ``TurnResult.usage`` and in ``hostkit budget``;
    the context view (the turn's prepare() decisions) is unchanged by it."""
    model = ScriptedModel([talker], repeat_last=True, model="gpt-4o-mini", limits=TIGHT)
    async with open_host(tmp_path, model) as host:
        results = [await host.turns.run(request(f"tell me about shed {i}")) for i in range(5)]
        assert [r.outcome for r in results] == ["completed"] * 5
        session_id = results[0].session_id
        operator = await host.operator("ops", reason="inspect budget")
        view = await budget_view(host, operator, session_id)
        context = await context_view(host, operator, session_id=session_id)
        rows = await usage_rows(host, session_id)
    summaries = [r for r in model.requests if r.messages[0].content == DEFAULT_SUMMARY_INSTRUCTIONS]
    assert len(summaries) == 1
    # Every provider call the model served is one usage row and one budget view step.
    assert len(rows) == len(model.requests) == view.totals.steps == 6
    last = view.turns[-1]
    assert [(s.step_id, s.summary) for s in last.steps] == [(0, True), (0, False)]
    summary = last.steps[0]
    assert summary.input_tokens > 0
    assert summary.estimated_input_tokens is not None
    assert summary.cost_usd is not None
    assert summary.cost_usd > 0
    assert not any(s.summary for turn in view.turns[:-1] for s in turn.steps)
    for turn, result in zip(view.turns, results, strict=True):
        assert (turn.totals.steps, turn.totals.input_tokens, turn.totals.output_tokens) == (
            len(turn.steps),
            result.usage.input_tokens,
            result.usage.output_tokens,
        )
    assert results[-1].usage.input_tokens == sum(s.input_tokens for s in last.steps)
    assert (view.totals.input_tokens, view.totals.output_tokens) == (
        sum(row[3] for row in rows),
        sum(row[4] for row in rows),
    )
    assert [step.step_id for step in context.steps] == [0]
    shown = io.StringIO()
    Console(file=shown, width=200, color_system=None).print(budget_report(view, width=200))
    text = shown.getvalue()
    assert "0*" in text
    assert "gpt-4o-mini (summary)" in text
    assert "summarizer call" in text
    assert "totals: 6 steps" in text


async def test_unknown_models_have_no_cost_until_prices_are_given(tmp_path: Path) -> None:
    async with reading_host(tmp_path, model="mystery-9") as host:
        (result,) = await read_turns(host, 1)
        operator = await host.operator("ops", reason="inspect budget")
        unpriced = await budget_view(host, operator, result.session_id)
        priced = await budget_view(
            host, operator, result.session_id, prices={"mystery-9": ModelPrice(1.0, 2.0)}
        )
    assert [step.cost_usd for step in unpriced.turns[0].steps] == [None, None]
    assert (unpriced.totals.cost_usd, unpriced.totals.unpriced_steps) == (None, 2)
    totals = priced.totals
    assert totals.cost_usd == pytest.approx(
        (totals.input_tokens * 1.0 + totals.output_tokens * 2.0) / 1_000_000
    )
    assert totals.unpriced_steps == 0


async def test_a_session_before_its_first_step_costs_zero_not_unknown(tmp_path: Path) -> None:
    """No step, no model to price: the totals say $0 (an unpriced model says unknown)."""
    async with reading_host(tmp_path, model="mystery-9") as host:
        facts = ConversationFacts(channel="test", conversation_key="empty", principal_key="a")
        scope = await host.authority.for_conversation(facts)
        operator = await host.operator("ops", reason="inspect budget")
        view = await budget_view(host, operator, scope.session_id or "")
    assert (view.turns, view.totals.steps, view.totals.cost_usd) == ((), 0, 0.0)
    assert cost_text(view.totals.cost_usd) == "$0"


def test_prices_fall_back_from_dated_ids_and_cache_buckets_are_priced_apart() -> None:
    assert price_for("gpt-4o-mini-2024-07-18") == PRICES["gpt-4o-mini"]
    assert price_for("claude-haiku-4-5-20251001") == PRICES["claude-haiku-4-5"]
    assert price_for("gpt-4o-audio-preview") is None
    assert price_for("scripted-1") == ModelPrice(0.0, 0.0, 0.0, 0.0)
    assert price_for("gpt-4o", {"gpt-4o": ModelPrice(9.0, 9.0)}) == ModelPrice(9.0, 9.0)
    sonnet = PRICES["claude-sonnet-4-5"]
    # 1M prompt tokens of which 600k were read from cache and 100k written to it.
    cost = sonnet.cost(
        input_tokens=1_000_000,
        output_tokens=0,
        cache_read_tokens=600_000,
        cache_write_tokens=100_000,
    )
    assert cost == pytest.approx(0.3 * 3.00 + 0.6 * 0.30 + 0.1 * 3.75)


async def test_views_are_owner_checked_in_sql_and_operators_see_every_session(
    tmp_path: Path,
) -> None:
    async with reading_host(tmp_path) as host:
        (mine,) = await read_turns(host, 1, conversation="c1")
        (theirs,) = await read_turns(host, 1, conversation="c2")
        scope = await scope_of(host, "c1")
        operator = await host.operator("ops", reason="inspect everything")
        own = await context_view(host, scope, session_id=mine.session_id)
        assert own.turn_id == mine.turn_id
        assert (await budget_view(host.store, scope, mine.session_id)).turns
        foreign_and_missing = [
            context_view(host, scope, session_id=theirs.session_id),
            context_view(host, scope, turn_id=theirs.turn_id),
            # A foreign turn under one's own session id is no way in either.
            context_view(host, scope, session_id=mine.session_id, turn_id=theirs.turn_id),
            budget_view(host, scope, theirs.session_id),
            context_view(host, scope, session_id="ses_missing"),
            context_view(host, scope, turn_id="turn_missing"),
            budget_view(host, scope, "ses_missing"),
        ]
        for attempt in foreign_and_missing:
            with pytest.raises(NotFoundOrUnauthorized) as denied:
                await attempt
            assert "missing" not in denied.value.message
        audit = await host.store.read_audit(
            operator, kind="principal_scope.owner_lookup_denied", limit=50
        )
        assert len(audit) == len(foreign_and_missing)
        for target in (mine, theirs):
            seen = await context_view(host, operator, session_id=target.session_id)
            assert seen.turn_id == target.turn_id
            assert (await budget_view(host, operator, target.session_id)).turns
        assert [s.session_id for s in (await session_rows(host, scope)).sessions] == [
            mine.session_id
        ]
        assert {s.session_id for s in (await session_rows(host, operator)).sessions} == {
            mine.session_id,
            theirs.session_id,
        }
        forged = dataclasses.replace(
            scope, session_id=theirs.session_id, allowed_session_ids=frozenset({theirs.session_id})
        )
        with pytest.raises(ScopeError):
            await context_view(host, forged, session_id=theirs.session_id)
        with pytest.raises(ScopeError):
            await budget_view(host, forged, theirs.session_id)


async def test_every_list_is_bounded_and_totals_still_count_everything(tmp_path: Path) -> None:
    async with reading_host(tmp_path) as host:
        results = await read_turns(host, 3)
        await read_turns(host, 1, conversation="c2")
        operator = await host.operator("ops", reason="inspect bounds")
        session_id = results[0].session_id
        whole = await budget_view(host, operator, session_id)
        cut = await budget_view(host, operator, session_id, turns=2, steps=1)
        assert [t.turn_id for t in cut.turns] == [r.turn_id for r in results[1:]]
        assert cut.turns_truncated
        assert not whole.turns_truncated
        assert all(len(t.steps) == 1 and t.steps_truncated for t in cut.turns)
        assert cut.totals == whole.totals
        assert [t.totals for t in cut.turns] == [t.totals for t in whole.turns[1:]]
        context = await context_view(host, operator, session_id=session_id, steps=1)
        assert len(context.steps) == 1
        assert context.steps_truncated
        for bad in (
            budget_view(host, operator, session_id, turns=MAX_TURNS + 1),
            budget_view(host, operator, session_id, steps=MAX_STEPS + 1),
            budget_view(host, operator, session_id, turns=0),
            context_view(host, operator, session_id=session_id, steps=0),
            context_view(host, operator),
            approval_rows(host, operator, limit=201),
        ):
            with pytest.raises(InvalidValue):
                await bad
        sessions = await session_rows(host, operator, limit=1)
        assert len(sessions.sessions) == 1
        assert sessions.truncated
        assert not (await session_rows(host, operator, limit=2)).truncated


async def test_approval_rows_carry_the_redacted_view_never_the_arguments(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("notes_big", {"n": 7, "api_key": "sk-live-99"}))])

    @tool("notes.big")
    async def guarded(ctx: ToolContext, n: int, api_key: str = "") -> str:
        """Read a big note."""
        return "never run"

    policy = {"allow": ["*"], "ask": ["notes.big"]}
    async with open_host(tmp_path, model, tools=[guarded], policy=policy) as host:
        paused = await host.turns.run(request("read"))
        assert paused.outcome == "needs_user"
        operator = await host.operator("ops", reason="review approvals")
        rows = await approval_rows(host, operator)
        other = await approval_rows(host, await scope_of(host, "c9"), status=None)
    (approval,) = rows.approvals
    assert (approval.approval_id, approval.status, rows.status) == (
        paused.pending_approval,
        "pending",
        "pending",
    )
    assert approval.view["arguments"]["n"] == 7
    assert "sk-live-99" not in repr(rows)
    assert not rows.truncated
    assert other.approvals == ()


async def test_a_session_without_turns_has_an_empty_context_view(tmp_path: Path) -> None:
    async with reading_host(tmp_path) as host:
        scope = await scope_of(host, "quiet")
        assert scope.session_id is not None
        view = await context_view(host, scope, session_id=scope.session_id)
        budget = await budget_view(host, scope, scope.session_id)
    assert (view.turn_id, view.steps) == (None, ())
    assert (budget.turns, budget.calibration, budget.totals.steps) == ((), None, 0)


CONFIG = """
[host]
database = "state/hostkit.db"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "notes.read", arguments = { name = "welcome.md" } },
  { reply = "Every turn ends with exactly one terminal record." },
]

[agents.assistant]
provider = "scripted"
tool_modules = ["hostkit.examples.tools"]
"""


async def test_the_context_and_budget_commands_draw_the_views(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, _, err = await hostkit("run", "What is recorded?", cwd=tmp_path)
    assert code == 0, err
    session = re.search(r"session\]?: (ses_\w+)", err)
    turn = re.search(r"turn\]?: (turn_\w+)", err)
    assert session, err
    assert turn, err
    code, out, err = await hostkit("context", session[1], "--reason", "why", cwd=tmp_path)
    assert code == 0, err
    for expected in (turn[1], "step 0", "step 1", "hard budget", "schemas", "history"):
        assert expected in out
    assert re.search(r"I+T+F*U+·+\|", out), out  # the stacked bar and the budget marker
    code, by_turn, err = await hostkit(
        "context", session[1], "--turn", turn[1], "--reason", "why", cwd=tmp_path
    )
    assert (code, by_turn) == (0, out), err
    code, out, err = await hostkit("budget", session[1], "--reason", "why", cwd=tmp_path)
    assert code == 0, err
    assert "scripted-1" in out
    assert "calibration: scripted/scripted-1" in out
    assert "totals: 2 steps" in out
    assert "cost $0" in out  # a free model, without six decimals
    assert "0.000000" not in out
    # The local user's own database: no reason needed (the audit says a local operator acted).
    code, unreasoned, err = await hostkit("budget", session[1], cwd=tmp_path)
    assert code == 0, err
    assert "totals: 2 steps" in unreasoned
    code, _, err = await hostkit("context", "ses_nobody", "--reason", "why", cwd=tmp_path)
    assert (code, "error: session not found" in err, "Traceback" in err) == (2, True, False)


def test_the_view_models_live_in_hostkit_inspect_and_nowhere_else() -> None:
    import importlib
    import pkgutil

    import hostkit.host
    import hostkit.inspect

    exported = hostkit.inspect.__all__
    assert len(exported) == len(set(exported))
    for name in exported:
        assert hasattr(hostkit.inspect, name), name
        assert not hasattr(hostkit.host, name), f"hostkit.host still exports {name}"
    for info in pkgutil.iter_modules(hostkit.inspect.__path__):
        assert info.name.startswith("_"), f"hostkit.inspect.{info.name} should be private"
    for module in ("hostkit.host._inspect", "hostkit.host._prices"):
        with pytest.raises(ImportError):
            importlib.import_module(module)


@pytest.mark.parametrize(
    ("kind", "cost"), [("local", "$0"), ("scripted", "$0"), ("openai", "unknown")]
)
async def test_a_provider_that_runs_on_this_machine_is_free_whatever_its_model_is_called(
    tmp_path: Path, kind: str, cost: str
) -> None:
    """An operator's own GGUF (``model_path``) names its model after the file: no price
    table knows it, but a local (or scripted) provider costs nothing. The kind of the
    provider the usage row names decides; a remote model nobody priced stays unknown."""
    stem = "qwen2.5-0.5b-instruct-q4_k_m"
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"mine": {"kind": kind}},
            "agents": {"assistant": {"provider": "mine", "policy": {"allow": ["*"]}}},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([Reply("hi")], name="mine", model=stem, repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model)) as host:
        result = await host.turns.run(request("hello"))
        operator = await host.operator("ops", reason="inspect budget")
        view = await budget_view(host, operator, result.session_id)
    (step,) = [step for turn in view.turns for step in turn.steps]
    assert step.model == stem
    assert (cost_text(step.cost_usd), cost_text(view.totals.cost_usd)) == (cost, cost)
    assert view.totals.unpriced_steps == (1 if cost == "unknown" else 0)


@pytest.mark.parametrize(
    ("status", "said"),
    [
        ("lost", "this lost turn's were held in memory by the process that died"),
        ("interrupted", "this interrupted turn's holder is gone"),
        ("running", "no context decisions written yet: a running turn's are held in memory"),
        ("completed", "no context decisions recorded"),
    ],
)
def test_a_turn_without_decisions_says_why(status: str, said: str) -> None:
    """Decisions are held in memory until their step's usage is observed or the turn ends
    (docs/context.md): a running turn's are not written yet, a killed one's are gone."""
    view = ContextView("ses_1", "turn_1", status, "assistant", None, (), False)
    out = io.StringIO()
    Console(file=out, width=200).print(context_report(view))
    assert said in " ".join(out.getvalue().split())
