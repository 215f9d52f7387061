"""RuntimeStore.erase_session: a session's content goes in one transaction, its ids stay.

After an operator erased a session, nothing it held reaches a model again: the next turn in
the same conversation (the same session) asks the model without any of it. The turns stay
as id-only tombstones, one ``session.erased`` audit row says who and why (never what), and
bad input is refused with typed, bounded errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError, TurnInProgress
from hostkit.host import Host
from hostkit.store import MAX_REASON, ErasedSession
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import AttachmentSupport, ConversationFacts, ModelRequest
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

SECRET = "PASSPORT-X7Q4-ZEBRAFISH"


def answer(request: ModelRequest) -> Reply:
    said = str(request.messages[-1])
    return Reply(f"noted: {SECRET}" if SECRET in said else "hello again")


async def holding(host: Host) -> dict[str, int]:
    """Rows of the content tables that still hold the secret."""
    like = f"%{SECRET}%"
    checks = {
        "messages": "SELECT count(*) FROM messages WHERE content LIKE ?",
        "turns": "SELECT count(*) FROM turns WHERE result LIKE ?",
        "turn_events": "SELECT count(*) FROM turn_events WHERE detail LIKE ?",
        "outbox": "SELECT count(*) FROM outbox WHERE payload LIKE ?",
        "context": "SELECT count(*) FROM context_decisions WHERE summary LIKE ?",
    }
    found = {}
    for name, sql in checks.items():
        row = await host.store.read(lambda c, sql=sql: c.execute(sql, [like]).fetchone())
        found[name] = int(row[0])
    return {name: n for name, n in found.items() if n}


async def test_after_an_erase_the_next_turn_sees_nothing_the_session_held(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([answer], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request(f"please remember my passport {SECRET}"))
        assert first.outcome == "completed"
        assert SECRET in first.text
        assert await holding(host)
        scope = await host.operator("ops", reason="erasure request from alice")
        erased = await host.store.erase_session(
            scope, first.session_id, "alice asked to be forgotten"
        )
        assert isinstance(erased, ErasedSession)
        assert (erased.session_id, erased.turns) == (first.session_id, 1)
        assert erased.messages >= 2
        assert await holding(host) == {}

        model.requests.clear()
        second = await host.turns.run(request("hi"))
        assert (second.outcome, second.session_id) == ("completed", first.session_id)
        assert model.requests
        assert not any(SECRET in str(asked) for asked in model.requests)
        # What the session says after the erase is its history again: numbered after the
        # erased messages, so the next turn reads it.
        model.requests.clear()
        await host.turns.run(request("and again"))
        (asked,) = model.requests
        assert [m.content for m in asked.messages if m.role != "system"] == [
            "hi",
            "hello again",
            "and again",
        ]

        # The first turn stays as a tombstone: its id and outcome, no text.
        state = await host.store.turns.state(scope, first.turn_id)
        assert state.status == "completed"
        assert state.result is not None
        assert state.result.text == ""
        rows = await host.store.read_audit(scope, kind="session.erased")
    (row,) = rows
    assert (row.session_id, row.reason) == (first.session_id, "alice asked to be forgotten")
    assert row.detail["turns"] == 1
    assert SECRET not in str(row)


async def test_erasing_needs_an_operator_a_reason_and_a_known_idle_session(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("hello")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        done = await host.turns.run(request("hi"))
        scope = await host.operator("ops", reason="erase contract suite")
        person = await host.authority.for_conversation(request("hi").principal)
        with pytest.raises(ScopeError, match="operator authority"):
            await host.store.erase_session(person, done.session_id, "why")
        for bad in ("", "   ", "x" * (MAX_REASON + 1)):
            with pytest.raises(InvalidValue, match="erasing a session needs a reason"):
                await host.store.erase_session(scope, done.session_id, bad)
        with pytest.raises(NotFoundOrUnauthorized, match="session not found"):
            await host.store.erase_session(scope, "ses_nothing", "why")
        with pytest.raises(InvalidValue):
            await host.store.erase_session(scope, "", "why")

        # A turn still running in the session: refused, nothing erased.
        await host.store.write(
            lambda c: c.execute(
                "UPDATE turns SET status = 'running' WHERE turn_id = ?", [done.turn_id]
            )
        )
        with pytest.raises(TurnInProgress, match=done.turn_id):
            await host.store.erase_session(scope, done.session_id, "why")
        kept = await host.store.read(
            lambda c: c.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", [done.session_id]
            ).fetchone()
        )
        assert kept[0] >= 2
        assert await host.store.read_audit(scope, kind="session.erased") == ()


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


async def test_bytes_another_session_still_names_are_kept(tmp_path: Path) -> None:
    """One attachment row per person and digest: the same image sent in two conversations
    is one row. Erasing one session deletes only what no other session of that person
    names: the other still reads its image and sends it to the model."""
    model = ScriptedModel(
        [Reply("a chart")], repeat_last=True, attachments=AttachmentSupport({"image/png"})
    )
    async with open_host(tmp_path, model) as host:
        sessions: dict[str, str] = {}
        for conversation in ("c1", "c2"):
            facts = ConversationFacts(
                channel="test", conversation_key=conversation, principal_key="alice"
            )
            png = await host.attachments.add(facts, PNG, name="a.png", media_type="image/png")
            turn = await host.turns.run(
                request("what is this?", conversation=conversation, attachments=(png,))
            )
            sessions[conversation] = turn.session_id
        scope = await host.operator("ops", reason="erase one conversation")
        erased = await host.store.erase_session(scope, sessions["c1"], "alice asked, c1 only")
        assert erased.attachments == 0
        kept = ConversationFacts(channel="test", conversation_key="c2", principal_key="alice")
        assert await host.attachments.read(kept, png) == PNG
        erased = await host.store.erase_session(scope, sessions["c2"], "and c2 now")
        assert erased.attachments == 1
