"""TurnExecution: contract order, outcomes, terminal records, validation before start."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import (
    InvalidValue,
    LeaseLost,
    ProviderError,
    StoreError,
    StoreOutcomeUnknown,
    TurnInfrastructureError,
    TurnRejected,
)
from hostkit.host import Host
from hostkit.store import FAILED_NOTICE, SessionLease, _lease_rows
from hostkit.store._turns import SqlTurnStore
from hostkit.testing import CallTools, Fail, Reply, ScriptedModel
from hostkit.types import ModelLimits, ModelMessage, ResumeSession, TurnRequest
from tests.hosts import config, event_kinds, open_host, request, turn_rows

pytestmark = pytest.mark.anyio


@tool("demo.echo")
async def echo(ctx: ToolContext, text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@tool("demo.explode")
async def explode(ctx: ToolContext) -> str:
    """Always fails."""
    raise RuntimeError("secret=hunter2 boom")


async def test_turn_follows_the_contract_order(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("demo_echo", {"text": "hi"})), Reply("done")])
    async with open_host(tmp_path, model, tools=[echo]) as host:
        result = await host.turns.run(request("say hi"))
        assert result.outcome == "completed"
        assert result.text == "done"
        assert await event_kinds(host, result.turn_id) == [
            "turn.started",
            "input.persisted",
            "provider.completed",
            "effect.completed",
            "provider.completed",
            "turn.completed",
        ]
        # The catalog was final before the first provider request: definitions were sent.
        assert [d.name for d in model.requests[0].tools] == ["demo_echo"]
        # Context was prepared (and its decision recorded) for each step before the provider.
        decisions = await host.store.read(
            lambda c: c.execute(
                "SELECT step_id, kind FROM context_decisions WHERE turn_id = ? ORDER BY step_id",
                [result.turn_id],
            ).fetchall()
        )
        assert decisions == [(0, "ready"), (1, "ready")]
        second = model.requests[1].messages
        assert [m.role for m in second][-3:] == ["user", "assistant", "tool"]
        assert second[-1].content == "echo: hi"


async def test_turn_result_is_a_frozen_snapshot(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        result = await host.turns.run(request())
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.outcome = "failed"  # type: ignore[misc]
    assert isinstance(result.effects, tuple)


async def test_transcript_and_usage_are_durable(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("demo_echo", {"text": "x"})), Reply("fine")])
    async with open_host(tmp_path, model, tools=[echo]) as host:
        result = await host.turns.run(request("persist me"))
        roles = await host.store.read(
            lambda c: c.execute(
                "SELECT role FROM messages WHERE turn_id = ? ORDER BY seq", [result.turn_id]
            ).fetchall()
        )
        usage = await host.store.read(
            lambda c: c.execute(
                "SELECT COUNT(*), SUM(input_tokens) FROM usage_observations WHERE turn_id = ?",
                [result.turn_id],
            ).fetchone()
        )
    assert [r[0] for r in roles] == ["user", "assistant", "tool", "assistant"]
    assert usage[0] == 2
    assert usage[1] == result.usage.input_tokens > 0


@pytest.mark.parametrize(
    "make_request",
    [
        pytest.param(lambda: request(core_id="nobody"), id="unknown agent"),
        pytest.param(lambda: request(core_revision="cfg-wrong"), id="unavailable revision"),
        pytest.param(
            lambda: request(session=ResumeSession("ses_does_not_exist")), id="missing session"
        ),
    ],
)
async def test_rejection_happens_before_turn_started(tmp_path: Path, make_request) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel([Reply("never")])
    async with open_host(tmp_path, model) as host:
        with pytest.raises(TurnRejected):
            await host.turns.run(make_request())
        assert await turn_rows(host) == []
    assert model.requests == []


async def test_resuming_another_conversations_session_looks_like_a_missing_one(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("a")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        theirs = await host.turns.run(request(conversation="theirs", principal="bob"))
        with pytest.raises(TurnRejected) as foreign:
            await host.turns.run(request(session=ResumeSession(theirs.session_id)))
        with pytest.raises(TurnRejected) as missing:
            await host.turns.run(request(session=ResumeSession("ses_nope")))
        assert str(foreign.value) == str(missing.value)
        assert [status for _, status in await turn_rows(host)] == ["completed"]


async def test_forged_scope_is_rejected_before_start(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("x")])) as host:
        scope = await host.operator("ops", reason="test")
        forged = dataclasses.replace(scope, proof="0" * 64)
        with pytest.raises(TurnRejected):
            await host.turns.run(
                TurnRequest(input="hi", principal=forged, request_id="r1", core_id="assistant")
            )
        assert await turn_rows(host) == []


def test_request_values_are_validated_on_construction() -> None:
    with pytest.raises(InvalidValue):
        request("")
    with pytest.raises(InvalidValue):
        request("x" * 100_001)
    with pytest.raises(InvalidValue):
        request(session="new")  # type: ignore[arg-type]
    frozen = request(metadata={"client": {"tags": ["a"]}})
    with pytest.raises(TypeError):
        frozen.metadata["client"]["tags"] = ()  # type: ignore[index]


async def test_provider_failure_is_persisted_as_a_sanitized_failed_result(tmp_path: Path) -> None:
    failing = ScriptedModel([Fail(ProviderError("HTTP 500 api_key=sk-abc", provider="test"))])
    async with open_host(tmp_path, failing) as host:
        result = await host.turns.run(request())
        assert result.outcome == "failed"
        assert result.error is not None
        assert "provider failed" in result.error
        assert "sk-abc" not in result.error
        assert await turn_rows(host) == [(result.turn_id, "failed")]
        assert (await event_kinds(host, result.turn_id))[-1] == "turn.failed"


async def test_control_characters_in_a_provider_error_are_stored_as_escapes(
    tmp_path: Path,
) -> None:
    """A provider's error body is outside text: a NUL in it (which PostgreSQL's text and
    JSON refuse) or an ESC reaches the terminal result, the stored result and the turn's
    events as a visible escape, never as the character or its JSON ``\\u`` escape."""
    hostile = "HTTP 500: \x00\x00bad gateway\x1b[2J\x7f"
    failing = ScriptedModel([Fail(ProviderError(hostile, provider="test"))])
    async with open_host(tmp_path, failing) as host:
        asked = request()
        result = await host.turns.run(asked)
        again = await host.turns.run(asked)
        stored = await host.store.read(
            lambda c: c.execute(
                "SELECT result FROM turns WHERE turn_id = ? UNION ALL "
                "SELECT detail FROM turn_events WHERE turn_id = ?",
                [result.turn_id, result.turn_id],
            ).fetchall()
        )
    shown = "HTTP 500: \\x00\\x00bad gateway\\x1b[2J\\x7f"
    assert result.outcome == "failed"
    assert result.error == f"provider failed: test: {shown}"
    assert again.error == result.error
    texts = [text for (text,) in stored]
    assert any(json.dumps(shown)[1:-1] in text for text in texts)
    assert not any("\\u00" in text or not text.isprintable() for text in texts)


async def test_a_step_whose_provider_failed_still_has_its_context_decision(
    tmp_path: Path,
) -> None:
    # The decision is held until its observation; a failed call has none, so the turn's
    # end writes it: the inspectors see what was sent even for a failed turn.
    failing = ScriptedModel([Reply("first"), Fail(ProviderError("HTTP 500", provider="test"))])
    async with open_host(tmp_path, failing) as host:
        first = await host.turns.run(request())
        failed = await host.turns.run(request())
        assert (first.outcome, failed.outcome) == ("completed", "failed")
        operator = await host.operator("ops", reason="test: read the decisions")
        for turn in (first, failed):
            recorded = await host.store.inspect.turn_decisions(
                operator, session_id=turn.session_id, turn_id=turn.turn_id
            )
            assert [d.decision.step_id for d in recorded.decisions] == [0]
            assert recorded.decisions[0].decision.kind == "ready"
        # Only the observed step has reported usage.
        usage = await host.store.inspect.turn_decisions(
            operator, session_id=failed.session_id, turn_id=failed.turn_id
        )
        assert usage.decisions[0].reported_input_tokens is None


async def test_a_failing_tool_is_reported_to_the_model_not_leaked(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("demo_explode", {})), Reply("recovered")])
    async with open_host(tmp_path, model, tools=[explode]) as host:
        result = await host.turns.run(request())
    assert result.outcome == "completed"
    assert result.effects[0].status == "failed"
    assert "hunter2" not in model.requests[1].messages[-1].content


async def test_an_effect_runtime_crash_fails_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hostkit.effects import EffectRuntime

    async def crash(self, request, context):  # type: ignore[no-untyped-def]
        raise ProviderError("adapter exploded", provider="effects")

    monkeypatch.setattr(EffectRuntime, "execute", crash)
    model = ScriptedModel([CallTools(("demo_echo", {"text": "x"})), Reply("never")])
    async with open_host(tmp_path, model, tools=[echo]) as host:
        result = await host.turns.run(request())
    assert result.outcome == "failed"


async def test_unknown_tool_name_from_the_model_is_not_found(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("no_such_tool", {})), Reply("ok")])
    async with open_host(tmp_path, model, tools=[echo]) as host:
        result = await host.turns.run(request())
    assert result.effects[0].status == "not_found"
    assert result.outcome == "completed"


async def test_step_limit_ends_the_turn_failed(tmp_path: Path) -> None:
    model = ScriptedModel([CallTools(("demo_echo", {"text": "again"}))], repeat_last=True)
    async with open_host(tmp_path, model, tools=[echo], max_steps=3) as host:
        result = await host.turns.run(request())
    assert result.outcome == "failed"
    assert "step limit" in (result.error or "")
    assert len(model.requests) == 3


async def test_context_overflow_fails_before_any_provider_request(tmp_path: Path) -> None:
    tiny = ScriptedModel(
        [Reply("never")],
        limits=ModelLimits(context_window=600, max_output_tokens=100, safety_margin_tokens=50),
    )
    async with open_host(tmp_path, tiny) as host:
        result = await host.turns.run(request("word " * 2000))
    assert result.outcome == "failed"
    assert "context overflow" in (result.error or "")
    assert tiny.requests == []


async def test_terminal_commit_failure_raises_infrastructure_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StoreError("disk I/O error", retryable=True)

    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        monkeypatch.setattr(SqlTurnStore, "finish", broken)
        with pytest.raises(TurnInfrastructureError) as caught:
            await host.turns.run(request(request_id="req-infra"))
        assert caught.value.request_id == "req-infra"
        assert caught.value.outcome == "indeterminate"
        turn_id = caught.value.durable_result_ref
        monkeypatch.undo()
    # The next Host open finds the turn without a terminal record and marks it lost.
    async with Host.open(config(tmp_path), capabilities=None) as reopened:
        rows = await turn_rows(reopened)
        kinds = await event_kinds(reopened, turn_id or "")
    assert rows == [(turn_id, "lost")]
    assert kinds.count("turn.lost") == 1


@pytest.mark.parametrize("abandon_fails", [False, True])
async def test_a_turn_without_its_terminal_record_does_not_block_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abandon_fails: bool
) -> None:
    async def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StoreError("disk I/O error", retryable=True)

    # Admission would wait up to ten minutes for a session still held by a live turn.
    async with open_host(tmp_path, ScriptedModel([Reply("ok")], repeat_last=True)) as host:
        monkeypatch.setattr(SqlTurnStore, "finish", broken)
        if abandon_fails:
            monkeypatch.setattr(SqlTurnStore, "abandon", broken)
        with pytest.raises(TurnInfrastructureError) as caught:
            await host.turns.run(request())
        monkeypatch.undo()
        # The next turn of the session ends the stranded one first and runs at once.
        with anyio.fail_after(10):
            follow = await host.turns.run(request())
        assert follow.outcome == "completed"
        assert await turn_rows(host) == [
            (caught.value.durable_result_ref, "lost"),
            (follow.turn_id, "completed"),
        ]


async def test_turns_whose_end_could_not_be_written_are_remembered_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each such turn's lease used to be kept until its session's next turn: a store outage
    # left one per one-off conversation for the life of the process.
    from hostkit.turns import _holder

    async def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StoreError("disk I/O error", retryable=True)

    monkeypatch.setattr(_holder, "_ABANDONED_KEPT", 3, raising=False)
    async with open_host(tmp_path, ScriptedModel([Reply("ok")], repeat_last=True)) as host:
        with monkeypatch.context() as patched:
            patched.setattr(SqlTurnStore, "finish", broken)
            patched.setattr(SqlTurnStore, "abandon", broken)
            stranded = []
            for n in range(10):
                with pytest.raises(TurnInfrastructureError) as caught:
                    await host.turns.run(request(conversation=f"c{n}"))
                stranded.append(caught.value.durable_result_ref)
                assert len(host.turns._leases._abandoned) <= 3
        assert list(host.turns._leases._abandoned) == stranded[-3:]  # the newest are kept
        # The newest one's session is freed at once by its next turn, as before.
        with anyio.fail_after(10):
            follow = await host.turns.run(request(conversation="c9"))
        assert follow.outcome == "completed"


@pytest.mark.parametrize("retry", ["new_request", "same_request"])
async def test_an_admission_that_landed_and_could_not_be_read_back_does_not_block_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retry: str
) -> None:
    # The admission's COMMIT landed, its answer was lost and the database went down before
    # it could be read back (a server crash): the turn holds its session with nobody to
    # drive it. Its session used to stay blocked until the lease expired (a minute).
    async def unreadable(fn: Any) -> Any:
        raise StoreError("read failed: the database is down", retryable=True)

    async with open_host(tmp_path, ScriptedModel([Reply("ok")], repeat_last=True)) as host:
        store, real_admit = host.store, _lease_rows.admit
        real_write = store.write
        admitting: list[int] = []

        def admit(*args: Any, **kwargs: Any) -> Any:
            admitting.append(1)
            return real_admit(*args, **kwargs)

        async def write(fn: Any) -> Any:
            admitting.clear()
            written = await real_write(fn)
            if not admitting:
                return written
            monkeypatch.setattr(store, "read", unreadable)
            raise StoreOutcomeUnknown("the connection broke during COMMIT")

        monkeypatch.setattr(_lease_rows, "admit", admit)
        monkeypatch.setattr(store, "write", write)
        first = request()
        with pytest.raises(TurnRejected) as caught:
            await host.turns.run(first)
        monkeypatch.undo()
        assert caught.value.retryable
        [(stranded, status)] = await turn_rows(host)
        assert status == "running"
        with anyio.fail_after(10):
            follow = await host.turns.run(request() if retry == "new_request" else first)
        if retry == "same_request":
            # The request's turn, ended lost for it: a retry reads that record.
            assert (follow.turn_id, follow.outcome) == (stranded, "lost")
            assert await turn_rows(host) == [(stranded, "lost")]
        else:
            assert follow.outcome == "completed"
            assert await turn_rows(host) == [(stranded, "lost"), (follow.turn_id, "completed")]


async def test_late_writes_after_the_terminal_record_are_refused(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        result = await host.turns.run(request())
        token = await host.store.read(
            lambda c: c.execute(
                "SELECT token FROM session_leases WHERE session_id = ?", [result.session_id]
            ).fetchone()[0]
        )
        # The very lease the turn held: released by its terminal commit, so it fences nothing.
        ended = SessionLease(result.session_id, result.turn_id, token, "x", 0.0, 60.0)
        with pytest.raises(LeaseLost, match="write refused"):
            await host.store.turns.append_message(
                ended,
                event_seq=99,
                message=ModelMessage("assistant", "too late"),
                event="provider.completed",
            )
        with pytest.raises(LeaseLost):
            await host.store.turns.finish(ended, result, event_seq=99)
        assert (await event_kinds(host, result.turn_id)).count("turn.completed") == 1


async def test_route_gets_a_delivery_intent_in_the_terminal_transaction(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Reply("deliver me")])) as host:
        result = await host.turns.run(request(route={"channel": "test", "thread": "t1"}))
        outbox = await host.store.read(
            lambda c: c.execute("SELECT intent_id, route, payload FROM outbox").fetchall()
        )
        stored = await host.store.read(
            lambda c: c.execute(
                "SELECT result FROM turns WHERE turn_id = ?", [result.turn_id]
            ).fetchone()
        )
    assert len(outbox) == 1
    assert result.deliveries == (outbox[0][0],)
    assert json.loads(outbox[0][1]) == {"channel": "test", "thread": "t1"}
    assert json.loads(outbox[0][2]) == {
        "text": "deliver me",
        "turn_id": result.turn_id,
        "part": 1,
        "parts": 1,
    }
    assert json.loads(stored[0])["deliveries"] == [outbox[0][0]]


async def test_failed_turn_delivers_the_failure_notice_not_its_error(tmp_path: Path) -> None:
    async with open_host(tmp_path, ScriptedModel([Fail()])) as host:
        result = await host.turns.run(request(route={"channel": "test"}))
        outbox = await host.store.read(
            lambda c: c.execute("SELECT intent_id, payload FROM outbox").fetchall()
        )
    assert result.outcome == "failed"
    assert [(i, json.loads(p)) for i, p in outbox] == [
        (result.deliveries[0], {"text": FAILED_NOTICE})
    ]


def _tool_then_answer(request_: object) -> CallTools | Reply:
    last = request_.messages[-1]  # type: ignore[attr-defined]
    return Reply("done") if last.role == "tool" else CallTools(("demo_echo", {"text": "ping"}))


async def test_a_turn_of_two_steps_and_one_tool_call_is_four_write_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admission (with the input); the first answer with its observation; the tool's
    result; the final answer with its observation and the terminal record."""
    model = ScriptedModel([_tool_then_answer], repeat_last=True)
    async with open_host(tmp_path, model, tools=[echo]) as host:
        await host.turns.run(request())  # the session exists, its window is cached
        store = host.store
        counts = {"write": 0, "read": 0}
        write, read = store.write, store.read  # type: ignore[attr-defined]

        async def counted_write(fn: object) -> object:
            counts["write"] += 1
            return await write(fn)

        async def counted_read(fn: object) -> object:
            counts["read"] += 1
            return await read(fn)

        monkeypatch.setattr(store, "write", counted_write)
        monkeypatch.setattr(store, "read", counted_read)
        result = await host.turns.run(request())
        monkeypatch.undo()
        assert (result.outcome, result.text) == ("completed", "done")
        # One read: the context window's new rows. Whether the session has approvals to
        # void came with the admission (none here, so no look of its own).
        assert counts == {"write": 4, "read": 1}
        operator = await host.operator("ops", reason="test: the turn's decisions")
        recorded = await store.inspect.turn_decisions(
            operator, session_id=result.session_id, turn_id=result.turn_id
        )
        assert [d.reported_input_tokens is not None for d in recorded.decisions] == [True, True]


async def test_an_observation_that_cannot_be_written_keeps_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider call is never repeated nor its answer lost: telemetry degrades."""
    import sqlite3

    from hostkit.store import _turn_rows

    def broken(*args: object) -> object:
        raise sqlite3.OperationalError("disk I/O error")

    model = ScriptedModel([_tool_then_answer], repeat_last=True)
    async with open_host(tmp_path, model, tools=[echo]) as host:
        async with host.events.subscribe() as events:
            monkeypatch.setattr(_turn_rows, "observe_step", broken)
            result = await host.turns.run(request())
            monkeypatch.undo()
            seen = []
            while True:
                try:
                    seen.append(events.receive_nowait())
                except anyio.WouldBlock:
                    break
        assert (result.outcome, result.text) == ("completed", "done")
        assert len(model.requests) == 2  # nothing was asked twice
        degraded = [e.data["step"] for e in seen if e.kind == "telemetry.degraded"]
        assert degraded == [0, 1]
        assert (await event_kinds(host, result.turn_id))[-1] == "turn.completed"
        operator = await host.operator("ops", reason="test: the turn's transcript")
        page = await host.store.list_messages(operator, result.session_id)
        assert [m.role for m in page.items] == ["user", "assistant", "tool", "assistant"]
        # The decisions were still written (at the turn's end), without usage.
        recorded = await host.store.inspect.turn_decisions(
            operator, session_id=result.session_id, turn_id=result.turn_id
        )
        assert [d.reported_input_tokens for d in recorded.decisions] == [None, None]
        # The next turn's observations commit again.
        again = await host.turns.run(request())
        recorded = await host.store.inspect.turn_decisions(
            operator, session_id=again.session_id, turn_id=again.turn_id
        )
        assert all(d.reported_input_tokens is not None for d in recorded.decisions)
