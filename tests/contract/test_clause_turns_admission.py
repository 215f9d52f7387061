"""Turn admission clauses (issue 12, "Outcomes that must be right"), each named after its clause.

- Request validation failures are ``TurnRejected``, not a bare ``InvalidValue``.
- A request id reused with different input is refused as a conflict, not answered with
  the first turn's result.
- Admission that fails on a store error is ``TurnRejected``, and a rejected admission
  never reappears later as a ``lost`` turn that blocks its request id.

The store failure is a real SQLite error inside the admission transaction (a trigger
that aborts the turn insert), not a fake.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from hostkit.errors import InvalidTurnRequest, InvalidValue, RequestConflict, TurnRejected
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import ConversationFacts, TurnRequest
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

FACTS = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")


@pytest.mark.parametrize(
    "fields",
    [
        {"input": ""},
        {"input": "x" * 2_000_000},
        {"request_id": ""},
        {"core_id": "x" * 1000},
        {"session": "somewhere"},
        {"continues": ""},
        # PostgreSQL's text holds no NUL: refused alike on every store, not by one of them.
        {"request_id": "r\x001"},
        {"core_id": "assistant\x00"},
        {"core_revision": "rev\x00"},
        {"continues": "apr\x00"},
        # Routes a delivery claim could not read back (see the delivery store clause).
        {"route": {"channel": "slack.main", "reply": {"ts": "1.2\x00"}}},
        {"route": {"channel": "slack.main", "reply\x00": {"ts": "1.2"}}},
        {"route": {"channel": "slack.main", "reply": {"ts": "\udcff"}}},
        {"route": {"channel": "slack.main", "reply": {"n": float("nan")}}},
        {"route": {"channel": "slack.main", "reply": {"n": float("inf")}}},
        {"route": {"channel": "slack.main", "reply": {"n": [-(2**64)]}}},
        {"route": "slack.main"},
    ],
)
def test_request_validation_failures_are_turn_rejected(fields: dict[str, object]) -> None:
    arguments: dict[str, object] = {"input": "hi", "principal": FACTS, "request_id": "r1"}
    with pytest.raises(InvalidTurnRequest) as caught:
        TurnRequest(**{**arguments, **fields})  # type: ignore[arg-type]
    assert isinstance(caught.value, TurnRejected)
    assert isinstance(caught.value, InvalidValue)  # callers catching bad values still do
    assert len(str(caught.value)) <= 520
    if "route" in fields:
        assert str(caught.value).startswith("turn rejected: route ")


@pytest.mark.parametrize("field", ["conversation_key", "principal_key"])
def test_a_key_holding_a_nul_is_refused(field: str) -> None:
    keys = {"conversation_key": "c1", "principal_key": "alice", field: "a\x00b"}
    with pytest.raises(InvalidValue, match=field):
        ConversationFacts(channel="test", **keys)


async def test_input_and_context_holding_a_nul_are_text_like_any_other(tmp_path: Path) -> None:
    # Free text is kept inside JSON, where a NUL is an escape: refused, it would be lost.
    async with open_host(tmp_path, ScriptedModel([Reply("ok")])) as host:
        result = await host.turns.run(request("hi\x00there", injected_context=("note\x00 one",)))
    assert result.outcome == "completed", result.error


async def test_a_request_id_reused_with_different_input_is_a_conflict(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("first answer")], repeat_last=True)
    async with open_host(tmp_path, model, agents=("assistant", "other")) as host:
        first = await host.turns.run(request("hello", request_id="req-1"))
        assert first.text == "first answer"
        again = await host.turns.run(request("hello", request_id="req-1"))
        assert again == first  # a true repeat still gets the first result
        with pytest.raises(RequestConflict) as caught:
            await host.turns.run(request("something else", request_id="req-1"))
        assert isinstance(caught.value, TurnRejected)
        assert "req-1" in str(caught.value)
        for core_id in ("other", "gone"):  # another agent; an agent that is not there
            with pytest.raises(RequestConflict):
                await host.turns.run(request("hello", request_id="req-1", core_id=core_id))
        assert len(model.requests) == 1  # nothing ran for the conflicting requests


def _set_failure(database: Path, *, on: bool) -> None:
    with closing(sqlite3.connect(database)) as conn:
        if on:
            conn.execute(
                "CREATE TRIGGER hk_fail_admission BEFORE INSERT ON turns "
                "BEGIN SELECT RAISE(ABORT, 'injected admission failure'); END"
            )
        else:
            conn.execute("DROP TRIGGER hk_fail_admission")
        conn.commit()


@pytest.mark.sqlite_only(
    "the store error is injected by a trigger made through a raw sqlite3 connection to the file"
)
async def test_an_admission_store_error_is_turn_rejected_and_never_a_lost_turn_later(
    tmp_path: Path,
) -> None:
    database = tmp_path / "hostkit.db"
    model = ScriptedModel([Reply("answered")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        await host.turns.run(request("warm up", request_id="warm"))  # the schema exists
        await anyio.to_thread.run_sync(lambda: _set_failure(database, on=True))
        with pytest.raises(TurnRejected) as caught:
            await host.turns.run(request("hello", request_id="req-store"))
        assert "could not admit" in str(caught.value)
        assert not isinstance(caught.value, InvalidValue)
        await anyio.to_thread.run_sync(lambda: _set_failure(database, on=False))
    # A later Host recovers nothing for it, and the request id runs as new.
    async with open_host(tmp_path, model) as host:
        assert await host.store.turns.recover() == ()
        result = await host.turns.run(request("hello", request_id="req-store"))
        assert (result.outcome, result.text) == ("completed", "answered")
