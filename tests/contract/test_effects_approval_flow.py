"""Approvals wired through a real Host: ask policy, providers, durable pending approvals,
continuation turns, typed refusals and every cache invalidation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import (
    ApprovalDecision,
    ApprovalKey,
    ApprovalLedger,
    ApprovalProvider,
    ApprovalRequest,
    AuthoredTool,
    PendingApproval,
    ToolContext,
    tool,
)
from hostkit.errors import ApprovalRefused, InvalidValue, NotFoundOrUnauthorized, TurnInProgress
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ConversationFacts, FreshSession, ModelRequest, TurnResult
from tests.hosts import request

pytestmark = pytest.mark.anyio

ASK = {"allow": ["*"], "ask": ["files.stamp"]}


class Stamps:
    """An effect with an observable side effect: each call appends one line to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

        @tool("files.stamp")
        async def stamp(ctx: ToolContext, label: str, api_key: str = "") -> str:
            """Append a stamp line."""
            async with await anyio.open_file(self.path, "a") as out:
                await out.write(label + "\n")
            return f"stamped {label}"

        self.tool = stamp

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


class Approver:
    """Answers with a fixed decision (or never), recording every request it saw."""

    def __init__(self, decision: ApprovalDecision | None, gate: anyio.Event | None = None) -> None:
        self.decision = decision
        self.gate = gate
        self.seen: list[ApprovalRequest] = []
        self.asked = anyio.Event()

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        self.asked.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.decision is None:
            await anyio.sleep_forever()
        assert self.decision is not None
        return self.decision


def host_config(tmp_path: Path, policy: dict[str, Any] = ASK, **agent: Any) -> Any:
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                "approval_timeout_s": agent.pop("approval_timeout_s", 5.0),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {"provider": "test", "memory": False, "policy": policy, **agent}
            },
        },
        base_dir=tmp_path,
    )


@asynccontextmanager
async def approval_host(
    tmp_path: Path,
    model: ScriptedModel,
    stamps: Stamps,
    approver: ApprovalProvider | None = None,
    policy: dict[str, Any] = ASK,
) -> AsyncIterator[Host]:
    async with Host.open(
        host_config(tmp_path, policy),
        capabilities=capabilities(model, tools=[stamps.tool]),
        approver=approver,
    ) as host:
        yield host


def stamp_call(label: str = "one", **extra: Any) -> CallTools:
    return CallTools(("files_stamp", {"label": label, **extra}))


def tool_results(req: ModelRequest) -> list[tuple[str | None, str]]:
    return [(m.tool_call_id, m.content) for m in req.messages if m.role == "tool"]


async def test_an_approved_ask_runs_once_and_the_approver_sees_a_redacted_view(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(api_key="sk-live-123456"), Reply("done")])
    approver = Approver("approve_once")
    async with approval_host(tmp_path, model, stamps, approver) as host:
        result = await host.turns.run(request("stamp it"))
    assert result.outcome == "completed"
    assert [e.status for e in result.effects] == ["succeeded"], result.effects
    assert stamps.lines() == ["one"]
    (seen,) = approver.seen
    assert seen.effect == "files.stamp"
    assert seen.turn_id == result.turn_id
    assert seen.key.session_id == result.session_id
    assert seen.key.principal_id == "test:alice"
    assert seen.view["arguments"]["label"] == "one"
    assert "sk-live-123456" not in repr(seen.view)
    assert "principal" not in seen.view
    assert "capability_snapshot" not in seen.view


async def test_a_denied_ask_never_runs_and_the_model_is_told(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("ok, not stamped")])
    async with approval_host(tmp_path, model, stamps, Approver("deny")) as host:
        result = await host.turns.run(request("stamp it"))
    assert result.outcome == "completed"
    assert stamps.lines() == []
    assert result.effects[0].status == "denied"
    assert "denied" in tool_results(model.requests[-1])[0][1]


class _BrokenApprover:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        raise ValueError("approver bug " + "Q" * 3_000)


@pytest.mark.sqlite_only("what the turn records of an approver's bug, not the store")
async def test_an_approver_that_raises_is_named_in_the_turns_record_and_nothing_runs(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("never")])
    async with approval_host(tmp_path, model, stamps, _BrokenApprover()) as host:
        result = await host.turns.run(request("stamp it"))
    assert (result.outcome, result.error) == (
        "failed",
        "the approval provider _BrokenApprover raised ValueError; the call did not run",
    )
    assert stamps.lines() == []


async def test_policy_denial_capability_and_preflight_refusals_never_reach_the_approver(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    approver = Approver("approve_once")
    policy = {"allow": ["*"], "ask": ["files.*"], "deny": ["files.stamp"]}
    async with approval_host(tmp_path, model, stamps, approver, policy) as host:
        result = await host.turns.run(request("stamp it"))
    # Denied effects are not even in the catalog: the call is not_found, nobody is asked.
    assert result.effects[0].status == "not_found"
    assert approver.seen == []
    assert stamps.lines() == []


async def test_unanswered_ask_pauses_needs_user_with_a_durable_redacted_approval(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel(
        [
            CallTools(
                ("files_stamp", {"label": "one", "api_key": "sk-live-123456"}),
                ("files_stamp", {"label": "two"}),
            ),
            Reply("stamped"),
        ]
    )
    events: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def notify(self, event: TurnEvent) -> None:
            events.append((event.kind, dict(event.data)))

    async with Host.open(
        host_config(tmp_path),
        capabilities=capabilities(model, tools=[stamps.tool], observer=Recorder()),
    ) as host:
        result = await host.turns.run(request("stamp it"))
        assert result.outcome == "needs_user"
        (pending_event,) = [data for kind, data in events if kind == "approval.pending"]
        assert pending_event["approval_id"] == result.pending_approval
        assert pending_event["effect"] == "files.stamp"
        assert "sk-live-123456" not in repr(events)
        assert result.pending_approval is not None
        assert result.pending_approval in (result.error or "")
        assert [e.status for e in result.effects] == ["cancelled"]
        assert stamps.lines() == []
        operator = await host.operator("ops", reason="review approvals")
        (pending,) = await host.approvals.list(operator)
        assert pending.approval_id == result.pending_approval
        assert (pending.status, pending.effect, pending.core_id) == (
            "pending",
            "files.stamp",
            "assistant",
        )
        assert pending.view["arguments"]["label"] == "one"
        assert "sk-live-123456" not in repr(pending.view)


async def test_an_answer_after_a_restart_runs_exactly_the_approved_call_once(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call("approved-one"), Reply("all stamped")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
    assert paused.outcome == "needs_user"
    assert paused.pending_approval
    async with approval_host(tmp_path, model, stamps) as host:
        operator = await host.operator("ops", reason="answer approvals")
        result = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert result.outcome == "completed"
        assert result.text == "all stamped"
        assert result.session_id == paused.session_id
        assert stamps.lines() == ["approved-one"]
        # The model saw the real result answering the paused call, right after it.
        last = model.requests[-1]
        assert tool_results(last) == [
            (last.messages[-2].tool_calls[0].call_id, "stamped approved-one")
        ]
        # The same answer again runs nothing and reports the continuation (idempotent).
        second = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert second.turn_id == result.turn_id
        with pytest.raises(ApprovalRefused) as other:
            await host.approvals.answer(paused.pending_approval, "deny", by=operator)
        assert other.value.reason == "answered"
        (done,) = await host.approvals.list(operator, status=None)
        assert done.status == "executed"
        assert done.decided_by == operator.principal_id
    assert stamps.lines() == ["approved-one"]


async def test_a_denial_answer_continues_the_turn_without_running_the_call(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("understood, not stamped")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="answer approvals")
        assert paused.pending_approval
        result = await host.approvals.answer(paused.pending_approval, "deny", by=operator)
    assert result.outcome == "completed"
    assert result.text == "understood, not stamped"
    assert stamps.lines() == []
    assert "denied" in tool_results(model.requests[-1])[0][1]


async def test_a_stale_policy_fingerprint_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.pending_approval
        changed = {"allow": ["*"], "ask": ["files.stamp", "other.*"]}
        await host.apply_config(
            host_config(tmp_path, changed),
            capabilities=capabilities(model, tools=[stamps.tool]),
        )
        operator = await host.operator("ops", reason="answer approvals")
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert refused.value.reason == "stale"
        (row,) = await host.approvals.list(operator, status=None)
        assert row.status == "stale"
        # Asked again, the recorded reason is said once, not after a generic version of it.
        with pytest.raises(ApprovalRefused) as again:
            await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert str(again.value) == (
            f"approval {paused.pending_approval}: it is stale: the agent's policy, revision, "
            "capabilities or conversation binding changed"
        )
    assert stamps.lines() == []


async def test_an_approval_answered_where_its_agent_does_not_run_stays_pending(
    tmp_path: Path,
) -> None:
    """A Host without the asking agent (a CLI opened without its ``--agent``, another
    process's config) cannot tell whether the agent changed: it refuses the answer as
    ``unavailable`` and records nothing, and a Host that runs the agent then takes it."""
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
    assert paused.pending_approval
    without = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"other": {"provider": "test", "memory": False, "policy": ASK}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(without, capabilities=capabilities(model, tools=[stamps.tool])) as host:
        operator = await host.operator("ops", reason="answer approvals")
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert refused.value.reason == "unavailable"
        assert "'assistant'" in refused.value.message
        assert "--agent module:attribute" in refused.value.message  # where a CLI user goes next
        # Whole (not cut at the bound), and no "did you mean" pointing at this Host's agent.
        assert refused.value.message.endswith("of the Agent named 'assistant')")
        assert "did you mean" not in refused.value.message
        assert len(refused.value.message) <= 300
        row = await host.approvals.get(operator, paused.pending_approval)
        assert row.status == "pending"
    assert stamps.lines() == []
    async with approval_host(tmp_path, model, stamps) as host:
        operator = await host.operator("ops", reason="answer approvals")
        result = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
    assert result.outcome == "completed"
    assert len(stamps.lines()) == 1


async def test_a_newer_turn_supersedes_the_paused_call(tmp_path: Path) -> None:
    """Only a turn admitted with calls still open looks for them (the admission says so)."""
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("moved on")])
    async with approval_host(tmp_path, model, stamps) as host:
        looked: list[str] = []
        supersede = host.store.approvals.supersede

        async def counted(session_id: str, *, turn_id: str) -> int:
            looked.append(session_id)
            return await supersede(session_id, turn_id=turn_id)

        host.store.approvals.supersede = counted  # type: ignore[method-assign]
        paused = await host.turns.run(request("stamp it"))
        assert paused.pending_approval
        assert looked == []  # the session had no call to void
        assert (await host.turns.run(request("never mind"))).outcome == "completed"
        assert looked == [paused.session_id]
        operator = await host.operator("ops", reason="answer approvals")
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        assert refused.value.reason == "superseded"
    assert stamps.lines() == []


async def test_approvals_are_owner_checked(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it", conversation="c1", principal="alice"))
        assert paused.pending_approval
        await host.turns.run(request("hi", conversation="c2", principal="bob"))
        bob = await host.authority.for_conversation(ConversationFacts("test", "c2", "bob"))
        alice = await host.authority.for_conversation(ConversationFacts("test", "c1", "alice"))
        assert await host.approvals.list(bob) == []
        with pytest.raises(NotFoundOrUnauthorized):
            await host.approvals.answer(paused.pending_approval, "approve_once", by=bob)
        with pytest.raises(NotFoundOrUnauthorized):
            await host.approvals.answer("apr_missing", "approve_once", by=bob)
        assert [a.approval_id for a in await host.approvals.list(alice)] == [
            paused.pending_approval
        ]
        result = await host.approvals.answer(paused.pending_approval, "approve_once", by=alice)
        assert result.outcome == "completed"
    assert stamps.lines() == ["one"]


async def test_approve_for_session_is_asked_once_then_cached(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel(
        [stamp_call("a"), stamp_call("b"), Reply("one"), stamp_call("c"), Reply("two")]
    )
    approver = Approver("approve_session")
    async with approval_host(tmp_path, model, stamps, approver) as host:
        await host.turns.run(request("first"))
        await host.turns.run(request("second"))
    assert stamps.lines() == ["a", "b", "c"]
    assert len(approver.seen) == 1


async def test_a_durable_approve_for_session_answer_caches_too(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call("a"), Reply("one"), stamp_call("b"), Reply("two")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("first"))
        operator = await host.operator("ops", reason="answer approvals")
        assert paused.pending_approval
        await host.approvals.answer(paused.pending_approval, "approve_session", by=operator)
        # No approver at all, yet the next ask in the session is approved from the cache.
        second = await host.turns.run(request("second"))
    assert second.outcome == "completed"
    assert stamps.lines() == ["a", "b"]


async def test_a_replacement_session_invalidates_the_old_sessions_approvals(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel(
        [stamp_call("a"), Reply("one"), stamp_call("b"), Reply("two"), stamp_call("c"), Reply("3")]
    )
    approver = Approver("approve_session")
    async with approval_host(tmp_path, model, stamps, approver) as host:
        first = await host.turns.run(request("first"))
        fresh = await host.turns.run(request("second", session=FreshSession()))
        assert fresh.session_id != first.session_id
        runtime = host.approvals.runtime
        old_key = approver.seen[0].key
        assert not runtime.cached(old_key)
        await host.turns.run(request("third"))
    assert len(approver.seen) == 2
    assert stamps.lines() == ["a", "b", "c"]


async def test_a_revision_change_and_explicit_revocation_invalidate(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call("a"), Reply("one")])
    approver = Approver("approve_session")
    async with approval_host(tmp_path, model, stamps, approver) as host:
        result = await host.turns.run(request("first"))
        runtime = host.approvals.runtime
        key = approver.seen[0].key
        assert runtime.cached(key)
        operator = await host.operator("ops", reason="revoke")
        assert await host.approvals.revoke(operator, result.session_id) == 1
        assert not runtime.cached(key)
        await runtime.remember(key, since=await runtime.refresh())
        await host.apply_config(
            host_config(tmp_path, ASK, instructions="Be terse."),
            capabilities=capabilities(model, tools=[stamps.tool]),
        )
        assert not runtime.cached(key)
        bob = await host.authority.for_conversation(ConversationFacts("test", "other", "bob"))
        with pytest.raises(NotFoundOrUnauthorized):
            await host.approvals.revoke(bob, result.session_id)


async def test_an_unanswered_prompt_times_out_into_needs_user(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    never = Approver(None)
    async with Host.open(
        host_config(tmp_path, ASK, approval_timeout_s=0.2),
        capabilities=capabilities(model, tools=[stamps.tool]),
        approver=never,
    ) as host:
        result = await host.turns.run(request("stamp it"))
    assert result.outcome == "needs_user"
    # The id the approver was shown is the one the durable approval answers to.
    assert result.pending_approval == never.seen[0].approval_id
    assert len(never.seen) == 1
    assert stamps.lines() == []


async def test_host_shutdown_leaves_the_prompted_approval_pending_and_nothing_runs(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    gate = anyio.Event()  # never set: only shutdown can end the prompt
    approver = Approver("approve_once", gate)
    host = await Host.open(
        host_config(tmp_path),
        capabilities=capabilities(model, tools=[stamps.tool]),
        approver=approver,
    )
    results: list[TurnResult] = []

    async def run() -> None:
        results.append(await host.turns.run(request("stamp it")))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        with anyio.fail_after(5):
            await approver.asked.wait()
        await host.aclose()
    assert stamps.lines() == []
    assert not gate.is_set()
    # The prompt was withdrawn, but the approval it showed is durable and still pending:
    # the turn waits for it (needs_user), and another Host can answer it and run the call.
    (paused,) = results
    assert paused.outcome == "needs_user"
    assert paused.pending_approval == approver.seen[0].approval_id
    async with approval_host(tmp_path, model, stamps) as again:
        operator = await again.operator("ops", reason="answer approvals")
        (pending,) = await again.approvals.list(operator)
        assert pending.approval_id == paused.pending_approval
        finished = await again.approvals.answer(pending.approval_id, "approve_once", by=operator)
    assert finished.outcome == "completed"
    assert stamps.lines() == ["one"]


def test_the_cache_key_carries_the_contracts_fields() -> None:
    key = ApprovalKey("p", "s", "fp", "files.stamp", "assistant")
    assert (key.principal_id, key.session_id, key.policy_fingerprint, key.rule_key) == (
        "p",
        "s",
        "fp",
        "files.stamp",
    )


async def test_an_answer_whose_continuation_never_ran_can_be_resumed_once(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("resumed")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="answer approvals")
        assert paused.pending_approval
        # The decision is recorded, then the caller is interrupted before the turn runs.
        ledger = ApprovalLedger(host.store)
        await ledger.answer(
            operator, paused.pending_approval, decision="approve_once", fingerprint=None
        )
        # A different answer is refused and names the way out; nothing runs.
        with pytest.raises(ApprovalRefused, match="resume") as different:
            await host.approvals.answer(paused.pending_approval, "deny", by=operator)
        assert different.value.reason == "answered"
        assert stamps.lines() == []
        first = await host.approvals.resume(paused.pending_approval, by=operator)
        again = await host.approvals.resume(paused.pending_approval, by=operator)
    assert first.outcome == "completed"
    assert again.turn_id == first.turn_id
    assert stamps.lines() == ["one"]


async def test_an_answered_call_that_never_ran_is_void_once_the_session_moves_on(
    tmp_path: Path,
) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("moved on")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="answer approvals")
        assert paused.pending_approval
        ledger = ApprovalLedger(host.store)
        await ledger.answer(
            operator, paused.pending_approval, decision="approve_once", fingerprint=None
        )
        assert (await host.turns.run(request("never mind"))).outcome == "completed"
        with pytest.raises(ApprovalRefused) as refused:
            await host.approvals.resume(paused.pending_approval, by=operator)
        assert refused.value.reason == "superseded"
        raw = await host.store.read(
            lambda c: c.execute("SELECT arguments FROM approvals").fetchall()
        )
    assert raw == [("{}",)]  # raw arguments are not kept once they can never run
    assert stamps.lines() == []


SECRET_VALUE = "hk-secret-value-123456"


def secret_stamp(stamps: Stamps) -> AuthoredTool:
    """A tool that binds Host secrets (by name) and stamps; it never returns the value."""

    async def bind(ctx: ToolContext, secrets: list[str], label: str = "") -> str:
        async with await anyio.open_file(stamps.path, "a") as out:
            await out.write(label + "\n")
        return "bound " + ",".join(sorted(ctx.secrets))

    return AuthoredTool(
        "probe.bind", bind, description="Binds secrets.", secrets_argument="secrets"
    )


def approval_key(approval: PendingApproval) -> ApprovalKey:
    return ApprovalKey(
        approval.principal_id,
        approval.session_id,
        approval.policy_fingerprint,
        approval.rule_key,
        approval.core_id,
    )


async def test_approve_for_session_never_caches_a_durable_call_that_binds_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_TOKEN", SECRET_VALUE)
    stamps = Stamps(tmp_path / "stamps.txt")
    call = CallTools(("probe_bind", {"secrets": ["HK_TOKEN"], "label": "s1"}))
    model = ScriptedModel([call, Reply("bound once"), call, Reply("asked again")])
    config = host_config(tmp_path, {"allow": ["*"]}, secrets=["HK_TOKEN"])
    async with Host.open(
        config, capabilities=capabilities(model, tools=[secret_stamp(stamps)])
    ) as host:
        paused = await host.turns.run(request("bind it"))
        assert paused.outcome == "needs_user"
        assert paused.pending_approval
        operator = await host.operator("ops", reason="answer approvals")
        approval = await host.approvals.get(operator, paused.pending_approval)
        # The security fact is a typed field; the view only displays it.
        assert approval.secret_names == ("HK_TOKEN",)
        assert approval.binds_secret
        assert SECRET_VALUE not in repr(approval)
        result = await host.approvals.answer(approval.approval_id, "approve_session", by=operator)
        assert result.outcome == "completed"
        assert stamps.lines() == ["s1"]
        assert not host.approvals.runtime.cached(approval_key(approval))
        # The same call in the next turn is asked again, not approved from a cache.
        again = await host.turns.run(request("bind it again"))
    assert again.outcome == "needs_user"
    assert stamps.lines() == ["s1"]


async def test_a_call_without_secrets_is_typed_as_binding_none(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("done")])
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        operator = await host.operator("ops", reason="review approvals")
        (approval,) = await host.approvals.list(operator)
    assert paused.pending_approval == approval.approval_id
    assert (approval.secret_names, approval.binds_secret) == ((), False)


async def test_concurrent_answers_through_the_host_run_the_call_once(tmp_path: Path) -> None:
    stamps = Stamps(tmp_path / "stamps.txt")
    model = ScriptedModel([stamp_call(), Reply("stamped")], repeat_last=True)
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.pending_approval
        approval_id = paused.pending_approval
        operator = await host.operator("ops", reason="answer approvals")
        outcomes: list[str] = []

        async def answer(decision: ApprovalDecision) -> None:
            try:
                result = await host.approvals.answer(approval_id, decision, by=operator)
                outcomes.append((decision, result.outcome))
            except ApprovalRefused as exc:
                outcomes.append((decision, f"refused:{exc.reason}"))
            except TurnInProgress:
                outcomes.append((decision, "in_progress"))

        async with anyio.create_task_group() as group:
            for decision in ("approve_once", "approve_once", "approve_session"):
                group.start_soon(answer, decision)
        (done,) = await host.approvals.list(operator, status=None)
    assert done.status == "executed"
    assert stamps.lines() == ["one"]
    # One answer won; the other decision is refused; the same decision as the winner's
    # waits for the winner's continuation and has its result.
    winner = done.decision
    for decision, outcome in outcomes:
        if decision != winner:
            assert outcome == "refused:answered", outcomes
        else:
            assert outcome == "completed", outcomes


async def test_the_same_answer_again_waits_for_its_continuation_up_to_wait_s(
    tmp_path: Path,
) -> None:
    """A second click while the continuation runs gets its result once it ends; a caller
    that must not hold on (a channel command, wait_s=0) or waits too little is told the
    turn is still in progress, and the call ran once."""
    stamps = Stamps(tmp_path / "stamps.txt")
    release = anyio.Event()

    async def slow_reply(request: ModelRequest) -> Reply:
        await release.wait()
        return Reply("stamped")

    model = ScriptedModel([stamp_call(), slow_reply], repeat_last=True)
    results: list[str] = []
    async with approval_host(tmp_path, model, stamps) as host:
        paused = await host.turns.run(request("stamp it"))
        approval_id = paused.pending_approval
        assert approval_id is not None
        operator = await host.operator("ops", reason="answer approvals")

        async def answer(wait_s: float | None = None) -> None:
            result = await host.approvals.answer(
                approval_id, "approve_once", by=operator, wait_s=wait_s
            )
            results.append(result.outcome)

        with pytest.raises(InvalidValue, match="wait_s"):
            await host.approvals.answer(approval_id, "approve_once", by=operator, wait_s=-1)
        async with anyio.create_task_group() as group:
            group.start_soon(answer)
            with anyio.fail_after(10):
                while stamps.lines() != ["one"]:  # noqa: ASYNC110 (the tool's file)
                    await anyio.sleep(0.02)
            with pytest.raises(TurnInProgress):
                await answer(wait_s=0)
            with pytest.raises(TurnInProgress):
                await answer(wait_s=0.3)
            group.start_soon(answer, 10.0)
            await anyio.sleep(0.3)
            release.set()
    assert results == ["completed", "completed"]
    assert stamps.lines() == ["one"]


async def test_a_call_asked_after_its_conversation_moved_asks_nobody(tmp_path: Path) -> None:
    """A turn still running when its conversation is bound to a fresh session asks for a
    call nobody could answer (answers run in the bound session): the approval is stored
    ``stale`` as it is asked, no prompt is shown, the effect does not run, and the model
    is told the call is void and why."""
    stamps = Stamps(tmp_path / "stamps.txt")
    thinking, moved = anyio.Event(), anyio.Event()

    async def after_the_move(req: ModelRequest) -> CallTools:
        thinking.set()
        await moved.wait()
        return stamp_call("late")

    model = ScriptedModel([after_the_move, Reply("never")])
    approver = Approver("approve_once")
    kinds: list[str] = []

    class Recorder:
        def notify(self, event: TurnEvent) -> None:
            kinds.append(event.kind)

    async with Host.open(
        host_config(tmp_path),
        capabilities=capabilities(model, tools=[stamps.tool], observer=Recorder()),
        approver=approver,
    ) as host:
        async with anyio.create_task_group() as group:
            ended: list[TurnResult] = []

            async def run() -> None:
                ended.append(await host.turns.run(request("stamp it")))

            group.start_soon(run)
            with anyio.fail_after(10):
                await thinking.wait()
            fresh = await host.authority.for_conversation(
                ConversationFacts("test", "c1", "alice"), session=FreshSession()
            )
            moved.set()
        [result] = ended
        assert approver.seen == []
        assert stamps.lines() == []
        # Not paused on an approval nobody can answer (no "approval.pending"): the model is
        # told the call is void and why, and the turn goes on to its answer.
        assert (result.outcome, result.pending_approval, result.text) == (
            "completed",
            None,
            "never",
        )
        assert "approval.pending" not in kinds
        assert "turn.completed" in kinds
        reason = f"the conversation was bound to session {fresh.session_id} before this call ran"
        [(_, told)] = tool_results(model.requests[-1])
        assert told.endswith(f"is void: {reason}")
        operator = await host.operator("ops", reason="check")
        [row] = await host.approvals.list(operator, status=None)
        assert (row.status, row.void_reason) == ("stale", reason)
