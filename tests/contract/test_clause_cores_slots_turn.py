"""Agent Slots in a turn: bootstrap, input and output of a core at its live revision.

Clauses (TurnExecution): "Run bootstrap and input slots against that same
catalog, then persist normalized input. Pass the catalog's final definitions
to ContextManager.prepare(), then run provider/effect steps and output
slots"; "Provider, slot, and effect failures after start are sanitized,
persisted, and returned as TurnResult(outcome="failed")". Slots get the
``ctx`` SDK: their state and events are the turn's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalLedger, ToolContext, tool
from hostkit.host import Host, HostConfig
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from tests.cores_support import core_host_config, make_core
from tests.hosts import event_kinds, request
from tests.support import table_rows

pytestmark = pytest.mark.anyio

SECRET = "sk-live-SLOT-SECRET-0123456789"
SLOTS = f'''
import asyncio


async def boot(ctx):
    ctx.emit("booted", {{"revision": ctx.core_revision}})
    seen = await ctx.core_state.get("turns") or 0
    await ctx.core_state.set("turns", seen + 1)
    return "Bootstrap: answer in French."


async def normalize(ctx, text):
    await ctx.state.set("raw", text)
    ctx.emit("normalized", {{"chars": len(text)}})
    return " ".join(text.split()).lower()


def finish(ctx, text):
    # A sync slot: it runs in a worker thread, its events still reach the turn.
    ctx.emit("finished", {{"token": "{SECRET}"}})
    return text + " [checked]"


async def leak(ctx, text):
    raise ValueError("{SECRET}")


async def slow(ctx):
    await asyncio.sleep(30)


async def wrong(ctx, text):
    return {{"not": "text"}}


# Ordinary bugs that leave a lone surrogate, which no transcript or model request carries:
# a string cut mid-escape, bytes read with errors="surrogateescape".
async def cut_bootstrap(ctx):
    return "Answer in French. \\ud83d"


async def smuggled_input(ctx, text):
    return text + b" caf\\xe9".decode("utf-8", "surrogateescape")


async def cut_output(ctx, text):
    return text + " \\ud800"
'''


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)


def core(tmp_path: Path, slots: dict[str, str], **limits: Any) -> HostConfig:
    manifest = {
        "model": "test",
        "instructions": "You are the notes core.",
        "slots": slots,
        "limits": limits,
        "memory": False,
    }
    path, _ = make_core(tmp_path, "notes", manifest=manifest, files={"agent/slots.py": SLOTS})
    return core_host_config(tmp_path, {"notes": path})


async def messages(host: Host, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT role, content FROM messages WHERE session_id = ? ORDER BY seq", [session_id]
        ).fetchall()
    )
    return [(row[0], json.loads(row[1])) for row in rows]


async def test_bootstrap_input_and_output_shape_the_turn(tmp_path: Path) -> None:
    config = core(
        tmp_path, {"bootstrap": "slots:boot", "input": "slots:normalize", "output": "slots:finish"}
    )
    model, recorder = ScriptedModel([Reply("bonjour")]), Recorder()
    async with Host.open(config, capabilities=capabilities(model, observer=recorder)) as host:
        result = await host.turns.run(request("  HELLO   World ", core_id="notes"))
        transcript = await messages(host, result.session_id)
        kinds = await event_kinds(host, result.turn_id)
        raw = await host.store.cores.state_get("notes", result.session_id, "raw")
        turns = await host.store.cores.state_get("notes", "", "turns")
    assert result.outcome == "completed"
    # Output: the final answer as returned and as persisted.
    assert result.text == "bonjour [checked]"
    assert transcript[-1][0] == "assistant"
    assert transcript[-1][1]["text"] == "bonjour [checked]"
    # Input: what the model saw and what the transcript keeps is the normalized text.
    sent = model.requests[0].messages
    assert [m.content for m in sent if m.role == "user"] == ["hello world"]
    assert transcript[0][0] == "user"
    assert transcript[0][1]["text"] == "hello world"
    # Admission kept only the input's digest; the normalized input was appended after
    # the slot ran, before the first model call (the transcript stays append-only).
    assert kinds.index("input.admitted") < kinds.index("input.persisted")
    # Bootstrap: its text joins the pinned instructions of this turn's model request.
    system = "\n".join(m.content for m in sent if m.role == "system")
    assert "You are the notes core." in system
    assert "Bootstrap: answer in French." in system
    # Slot state is the turn's: session-scoped and core-wide, durable.
    assert raw is not None
    assert raw.value == "  HELLO   World "
    assert turns is not None
    assert turns.value == 1
    # Order: bootstrap, input, the model call, output; each slot's events are "slot.<kind>".
    live = [e.kind for e in recorder.events if e.turn_id == result.turn_id]
    order = ["slot.booted", "slot.normalized", "provider.started", "slot.finished"]
    assert [kind for kind in live if kind in order] == order
    booted = next(e for e in recorder.events if e.kind == "slot.booted")
    assert booted.data["revision"] == result.core_revision
    finished = next(e for e in recorder.events if e.kind == "slot.finished")
    assert SECRET not in json.dumps(dict(finished.data))  # secret-named fields are redacted
    # The answer is the slot's: the model's own words never stream to a terminal or panel.
    assert [e for e in recorder.events if e.kind == "text.delta"] == []


async def test_a_repeated_request_still_matches_its_normalized_turn(tmp_path: Path) -> None:
    config = core(tmp_path, {"input": "slots:normalize"})
    model = ScriptedModel([Reply("once")])
    async with Host.open(config, capabilities=capabilities(model)) as host:
        first = await host.turns.run(request("  SAME  ", core_id="notes", request_id="req-1"))
        again = await host.turns.run(request("  SAME  ", core_id="notes", request_id="req-1"))
    assert again.turn_id == first.turn_id
    assert again.text == "once"
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    ("slots", "limits", "error", "model_called"),
    [
        # Where the core's own code raised (never the message, which quotes what it held).
        ({"input": "slots:leak"}, {}, "slot 'input' failed (ValueError at agent/slots.py:", False),
        ({"bootstrap": "slots:slow"}, {"slot_timeout_s": 0.3}, "slot 'bootstrap' did not", False),
        (
            {"output": "slots:wrong"},
            {},
            "slot 'output' must return text of at most 1000000 characters, not dict",
            True,
        ),
        ({"input": "gone:fn"}, {}, "slot 'input' cannot be loaded (ModuleNotFoundError)", False),
        # Text with a lone surrogate is refused as the slot's failure, never kept: kept, it
        # would fail every later request of the session, whichever revision runs then.
        ({"bootstrap": "slots:cut_bootstrap"}, {}, "slot 'bootstrap' must return valid", False),
        ({"input": "slots:smuggled_input"}, {}, "slot 'input' must return valid text", False),
        ({"output": "slots:cut_output"}, {}, "slot 'output' must return valid text", True),
    ],
)
async def test_a_failing_slot_fails_the_turn_sanitized_and_recorded(
    tmp_path: Path,
    slots: dict[str, str],
    limits: dict[str, float],
    error: str,
    model_called: bool,
) -> None:
    config = core(tmp_path, slots, **limits)
    model = ScriptedModel([Reply("never shown")])
    async with Host.open(config, capabilities=capabilities(model)) as host:
        with anyio.fail_after(20):
            result = await host.turns.run(request("hello", core_id="notes"))
        kinds = await event_kinds(host, result.turn_id)
        transcript = await messages(host, result.session_id)
        # The Host keeps serving the core: the next turn runs (and fails the same way).
        following = await host.turns.run(request("again", core_id="notes"))
    assert result.outcome == "failed"
    assert result.error is not None
    assert result.error.startswith(error)
    assert result.text == ""
    assert kinds[-1] == "turn.failed"
    assert bool(model.requests) is model_called
    # No answer was kept for a failed turn: the transcript holds the input only.
    assert [role for role, _ in transcript] == ["user"]
    assert following.outcome == "failed"
    cells = await anyio.to_thread.run_sync(lambda: list(table_rows(tmp_path / "hostkit.db")))
    assert not any(SECRET in cell for cell in cells)


COUNTING = """
async def boot(ctx):
    await ctx.core_state.set("boots", (await ctx.core_state.get("boots") or 0) + 1)
    return "counted"


async def normalize(ctx, text):
    await ctx.core_state.set("inputs", (await ctx.core_state.get("inputs") or 0) + 1)
    await ctx.state.set("asked", text)
    return text


async def finish(ctx, text):
    return text + " [out]"
"""


async def test_a_continuation_does_not_run_bootstrap_or_input_again(tmp_path: Path) -> None:
    @tool("notes.stamp")
    async def stamp(ctx: ToolContext) -> str:
        """Stamp what the session asked (asks for approval first)."""
        assert ctx.state is not None
        return f"stamped {await ctx.state.get('asked')}"

    manifest = {
        "model": "test",
        "capabilities": {"notes.*": "ask"},
        "slots": {"bootstrap": "slots:boot", "input": "slots:normalize", "output": "slots:finish"},
        "memory": False,
    }
    path, _ = make_core(tmp_path, "notes", manifest=manifest, files={"agent/slots.py": COUNTING})
    config = core_host_config(tmp_path, {"notes": path})
    model = ScriptedModel([CallTools(("notes_stamp", {})), Reply("done")])
    async with Host.open(config, capabilities=capabilities(model, tools=[stamp])) as host:
        paused = await host.turns.run(request("stamp it", core_id="notes"))
        assert paused.outcome == "needs_user"
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer approvals")
        finished = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        counts = [await host.store.cores.state_get("notes", "", key) for key in ("boots", "inputs")]
    assert finished.outcome == "completed", finished.error
    assert finished.text == "done [out]"  # output runs on the continuation's answer
    assert [entry.value for entry in counts if entry is not None] == [1, 1]
    # The approved tool ran in the continuation with the session's state.
    assert "stamped stamp it" in model.requests[1].messages[-1].content


GUARDED = """
import os


async def boot(ctx):
    return "Bootstrap: never reveal the launch codes. Key: " + os.environ.get("HK_BOOT_KEY", "none")
"""


def guarded(tmp_path: Path, **capabilities: str) -> HostConfig:
    manifest = {
        "model": "test",
        "instructions": "You are the notes core.",
        "capabilities": {"notes.*": "ask", **capabilities},
        "slots": {"bootstrap": "slots:boot"},
        "memory": False,
    }
    path, _ = make_core(tmp_path, "notes", manifest=manifest, files={"agent/slots.py": GUARDED})
    return core_host_config(tmp_path, {"notes": path})


@tool("notes.stamp")
async def stamp_tool() -> str:
    """Stamp the notes (asks for approval first)."""
    return "stamped"


def system_text(model: ScriptedModel) -> list[str]:
    """The system messages of each model request, joined: what the model was instructed."""
    return [
        "\n".join(m.content for m in sent.messages if m.role == "system") for sent in model.requests
    ]


async def test_a_continuation_sends_the_instructions_its_paused_turn_sent(
    tmp_path: Path,
) -> None:
    """Bootstrap runs once per turn, but what it added is the turn's for all of it: the
    model calls after an approval carry the same instructions as those before it."""
    config = guarded(tmp_path)
    model = ScriptedModel([CallTools(("notes_stamp", {})), Reply("done")])
    async with Host.open(config, capabilities=capabilities(model, tools=[stamp_tool])) as host:
        paused = await host.turns.run(request("stamp it", core_id="notes"))
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer approvals")
        finished = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
        kinds = await event_kinds(host, paused.turn_id)
    assert finished.outcome == "completed", finished.error
    before, after = system_text(model)
    assert "Bootstrap: never reveal the launch codes." in before
    assert after == before
    # Recorded with the paused turn, before its first model call.
    assert kinds.index("instructions.extended") < kinds.index("provider.completed")


async def test_every_continuation_in_any_host_sends_the_paused_turns_instructions(
    tmp_path: Path,
) -> None:
    """Another process answers (a fresh Host on the same database): the bootstrap text
    comes from the store, not from the paused turn's memory. Its answerer interrupted
    before the continuation ran (resumed by a third Host), a continuation that pauses
    again, answered by a fourth: every model call of the turn has the same instructions."""
    config = guarded(tmp_path)
    seen: list[str] = []

    def scripted(*steps: Reply | CallTools) -> ScriptedModel:
        return ScriptedModel(list(steps))

    async def run(model: ScriptedModel, work: Any) -> Any:
        async with Host.open(config, capabilities=capabilities(model, tools=[stamp_tool])) as host:
            operator = await host.operator("ops", reason="answer approvals")
            result = await work(host, operator)
        seen.extend(system_text(model))
        return result

    first = await run(
        scripted(CallTools(("notes_stamp", {}))),
        lambda host, _: host.turns.run(request("stamp it", core_id="notes")),
    )
    assert first.pending_approval is not None

    async def answered_only(host: Host, operator: Any) -> None:
        # The decision is recorded, then its answerer stops before the continuation runs.
        await ApprovalLedger(host.store).answer(
            operator, first.pending_approval, decision="approve_once", fingerprint=None
        )

    await run(scripted(), answered_only)
    again = await run(
        scripted(CallTools(("notes_stamp", {}))),
        lambda host, operator: host.approvals.resume(first.pending_approval, by=operator),
    )
    assert again.outcome == "needs_user", again.error
    assert again.pending_approval is not None
    last = await run(
        scripted(Reply("done")),
        lambda host, operator: host.approvals.answer(
            again.pending_approval, "approve_once", by=operator
        ),
    )
    assert last.outcome == "completed", last.error
    assert len(seen) == 3
    assert "Bootstrap: never reveal the launch codes." in seen[0]
    assert seen == [seen[0]] * 3


async def test_bootstrap_text_is_masked_like_every_text_the_turn_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret the agent holds, put into its instructions by bootstrap, is masked before
    the model or the store gets it: the text kept for the continuation holds no secret."""
    monkeypatch.setenv("HK_BOOT_KEY", SECRET)
    config = guarded(tmp_path, **{"secret.bind:HK_BOOT_KEY": "allow"})
    model = ScriptedModel([CallTools(("notes_stamp", {})), Reply("done")])
    async with Host.open(config, capabilities=capabilities(model, tools=[stamp_tool])) as host:
        paused = await host.turns.run(request("stamp it", core_id="notes"))
        assert paused.pending_approval is not None
        operator = await host.operator("ops", reason="answer approvals")
        finished = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
    assert finished.outcome == "completed", finished.error
    before, after = system_text(model)
    assert "Key: [redacted:HK_BOOT_KEY]" in before
    assert after == before
    assert SECRET not in before
    cells = await anyio.to_thread.run_sync(lambda: list(table_rows(tmp_path / "hostkit.db")))
    assert not any(SECRET in cell for cell in cells)
