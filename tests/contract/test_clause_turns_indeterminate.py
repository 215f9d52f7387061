"""Indeterminate outcomes (issue 12, "Outcomes that must be right"), named after the clause:

"A turn cancelled after a tool returned but before its result was recorded ends
``indeterminate`` (the effect may have happened), never ``cancelled``; the next turn
tells the model the call's outcome is unknown, not that it has no result. The same
for ``cancel()`` while an effect runs, and for a crash mid-effect: the call gets an
``indeterminate`` outcome of its own, not only the turn."

The crash is a real Host process killed with SIGKILL while its tool runs.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import StoreError
from hostkit.host import Host
from hostkit.store._turns import SqlTurnStore
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest
from tests.hosts import child_store_url, config, open_host, request, turn_rows
from tests.support import facts, sigkill_when

pytestmark = pytest.mark.anyio


def tool_messages(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool"]


async def test_a_turn_cancelled_after_its_tool_returned_is_indeterminate_and_says_so_next_turn(
    tmp_path: Path,
) -> None:
    holder: dict[str, Host] = {}
    ran: list[str] = []

    @tool("side.effect")
    async def side_effect(ctx: ToolContext) -> str:
        """Does something irreversible, then the turn is cancelled before it is recorded."""
        ran.append(ctx.turn_id)
        owner = await holder["host"].authority.for_conversation(facts("c1", "alice", "test"))
        await holder["host"].turns.cancel(ctx.turn_id, owner)
        return "done"

    model = ScriptedModel(
        [CallTools(("side_effect", {})), Reply("never"), Reply("next turn")], repeat_last=False
    )
    async with open_host(tmp_path, model, tools=[side_effect]) as host:
        holder["host"] = host
        first = await host.turns.run(request("do it"))
        assert ran == [first.turn_id]
        assert first.outcome == "indeterminate"
        assert [(e.effect, e.status) for e in first.effects] == [("side.effect", "indeterminate")]
        follow = await host.turns.run(request("what happened?"))
        assert follow.outcome == "completed"
    unknown = tool_messages(model.requests[-1])
    assert len(unknown) == 1
    assert unknown[0].startswith("[indeterminate]")
    assert "outcome is unknown" in unknown[0]


async def test_cancel_while_an_effect_runs_is_indeterminate(tmp_path: Path) -> None:
    entered = anyio.Event()

    @tool("slow.work")
    async def slow_work(ctx: ToolContext) -> str:
        """Works until cancelled."""
        entered.set()
        await anyio.sleep_forever()
        return "never"

    model = ScriptedModel([CallTools(("slow_work", {})), Reply("never")])
    async with open_host(tmp_path, model, tools=[slow_work]) as host:
        results = []

        async def run() -> None:
            results.append(await host.turns.run(request("work")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered.wait()
            owner = await host.authority.for_conversation(facts("c1", "alice", "test"))
            (turn_id, _), *_ = await turn_rows(host)
            answer = await host.turns.cancel(turn_id, owner)
    assert (answer.disposition, answer.outcome) == ("cancelled", "indeterminate")
    assert results[0].outcome == "indeterminate"
    assert [e.status for e in results[0].effects] == ["indeterminate"]


async def test_a_known_result_whose_write_failed_is_recorded_once_as_it_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool returned and the Host holds its result, but writing it failed (a lock held
    past its deadline, a full disk): the turn fails, and its ending writes that result, not
    "may have run"; the call is listed once, succeeded, under its effect's name."""
    ran: list[str] = []

    @tool("probe.stamp")
    async def stamp(ctx: ToolContext) -> str:
        """Does something once."""
        ran.append(ctx.turn_id)
        return "stamped"

    original = SqlTurnStore.append_message
    failed: list[str] = []

    async def once_broken(self, lease, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("event") == "effect.completed" and not failed:
            failed.append(kwargs["event"])
            raise StoreError("database is locked", retryable=True)
        return await original(self, lease, **kwargs)

    monkeypatch.setattr(SqlTurnStore, "append_message", once_broken)
    model = ScriptedModel([CallTools(("probe_stamp", {})), Reply("never"), Reply("next turn")])
    async with open_host(tmp_path, model, tools=[stamp]) as host:
        first = await host.turns.run(request("do it"))
        assert failed
        assert ran == [first.turn_id]
        assert first.outcome == "failed"
        assert [(e.effect, e.status, e.summary) for e in first.effects] == [
            ("probe.stamp", "succeeded", "stamped")
        ]
        follow = await host.turns.run(request("what happened?"))
        stored = await host.store.read(
            lambda c: c.execute(
                "SELECT result FROM turns WHERE turn_id = ?", [first.turn_id]
            ).fetchone()[0]
        )
    assert follow.outcome == "completed"
    assert [(e["effect"], e["status"]) for e in json.loads(stored)["effects"]] == [
        ("probe.stamp", "succeeded")
    ]
    assert tool_messages(model.requests[-1]) == ["stamped"]


async def test_a_result_written_before_a_cancel_request_stays_in_the_turns_effects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write that makes a call's result durable may also bring word of a cancel request
    (another process asked): the turn ends cancelled, and the call it ran is still listed,
    once, as it happened."""

    @tool("probe.stamp")
    async def stamp(ctx: ToolContext) -> str:
        """Does something once."""
        return "stamped"

    original = SqlTurnStore.append_message

    async def cancel_seen(self, lease, **kwargs):  # type: ignore[no-untyped-def]
        written = await original(self, lease, **kwargs)
        if kwargs.get("event") == "effect.completed":
            return dataclasses.replace(written, cancel_requested=True)
        return written

    monkeypatch.setattr(SqlTurnStore, "append_message", cancel_seen)
    model = ScriptedModel([CallTools(("probe_stamp", {})), Reply("never")])
    async with open_host(tmp_path, model, tools=[stamp]) as host:
        first = await host.turns.run(request("do it"))
    assert first.outcome == "cancelled"
    assert [(e.effect, e.status) for e in first.effects] == [("probe.stamp", "succeeded")]


CHILD = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from hostkit.effects import ToolContext, tool
    from hostkit.host import Host, parse_config
    from hostkit.testing import CallTools, ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest

    root, marker, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    second = sys.argv[4] if len(sys.argv) > 4 else "slow_work"

    @tool("slow.work")
    async def slow_work(ctx: ToolContext) -> str:
        \"\"\"Runs until the Host is killed.\"\"\"
        await anyio.Path(marker).write_text("inside the effect")
        await anyio.sleep_forever()
        return "never"

    async def main():
        config = parse_config(
            {
                "host": {"database": str(root / "hostkit.db"), "workspace": str(root)},
                **({"store": {"url": url}} if url else {}),
                "providers": {"test": {"kind": "scripted"}},
                "agents": {"assistant": {"provider": "test", "memory": False}},
            },
            base_dir=root,
        )
        model = ScriptedModel([CallTools(("slow_work", {}), (second, {}))])
        async with Host.open(config, capabilities=capabilities(model, tools=[slow_work])) as host:
            await host.turns.run(
                TurnRequest(
                    input="hello",
                    principal=ConversationFacts(
                        channel="test", conversation_key="c1", principal_key="alice"
                    ),
                    request_id="req-crash",
                )
            )

    anyio.run(main)
    """
)


@pytest.mark.slow
async def test_a_crash_mid_effect_gives_the_call_an_indeterminate_outcome_of_its_own(
    tmp_path: Path, store_adapter: str
) -> None:
    marker = anyio.Path(tmp_path / "marker")
    url = await child_store_url(tmp_path, store_adapter)
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(marker), url]
    await sigkill_when(argv, marker.exists, what="the effect ran")

    model = ScriptedModel([Reply("after the crash")])
    async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
        rows = await turn_rows(host)
        # A call of it may have run: the turn's own outcome says so too.
        assert [status for _, status in rows] == ["indeterminate"]
        follow = await host.turns.run(request("what happened?"))
        assert follow.outcome == "completed"
    answers = tool_messages(model.requests[-1])
    # The call that was running: unknown; the second call of that step never ran.
    assert len(answers) == 2
    assert answers[0].startswith("[indeterminate]")
    assert answers[1].startswith("[cancelled] not run")


@pytest.mark.slow
async def test_a_crash_answers_a_made_up_tool_name_as_unknown_never_repeating_it(
    tmp_path: Path, store_adapter: str
) -> None:
    """A name the model made up is its own text (a prompt injection can make it a secret):
    the recovery that answers the crashed step's calls names that answer ``_unknown``, as
    the turn itself does, so the text stays only in the model's own message."""
    made_up = "nosuch_hkTrustSecret7c2e9f41"
    marker = anyio.Path(tmp_path / "marker")
    url = await child_store_url(tmp_path, store_adapter)
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(marker), url, made_up]
    await sigkill_when(argv, marker.exists, what="the effect ran")

    async with Host.open(config(tmp_path), capabilities=capabilities(ScriptedModel([]))) as host:
        assert [status for _, status in await turn_rows(host)] == ["indeterminate"]
        rows = await host.store.read(
            lambda conn: conn.execute("SELECT role, content FROM messages ORDER BY seq").fetchall()
        )
    answers = [json.loads(content) for role, content in rows if role == "tool"]
    assert [answer["name"] for answer in answers] == ["slow_work", "_unknown"]
    assert sum(content.count(made_up) for _, content in rows) == 1  # the assistant's own
