"""Clause: text UTF-8 cannot encode never bricks a session.

A lone surrogate is a valid Python ``str`` character that UTF-8 has no bytes
for: a JSON ``"\\ud800"`` escape decodes to one, and so does a byte read with
``errors="surrogateescape"``. A transcript is sent to the model again on every
later turn, so one kept there failed every later request of its session
(``request could not be encoded``), whatever revision ran then. What a model
sends is made valid where it arrives (the two halves of one character joined back,
any other lone surrogate U+FFFD; a tool's smuggled byte is its ``\\xNN`` escape;
an authored slot's result is refused instead, ``test_clause_cores_slots_turn``),
and a transcript row an older version kept is made valid as it is read back.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ModelMessage, ModelRequest, ToolCall, ToolDefinition
from tests.hosts import open_host, request
from tests.wire.rigs import WireRig, build_rig
from tests.wire.scenario import Answer, Call
from tests.wire.server import WireServer, serve_wire

pytestmark = pytest.mark.anyio

KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


def _rig(kind: str, wire: WireServer) -> WireRig:
    rig = build_rig(kind, wire=wire, local=None)
    assert isinstance(rig, WireRig)
    return rig


def _sent_text(wire: WireServer) -> str:
    """Every string in the last request's body as the server read it, one a line."""
    strings: list[str] = []
    pending: list[object] = [wire.requests[-1].body]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return "\n".join(strings)


class Deltas:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def notify(self, event: TurnEvent) -> None:
        if event.kind == "text.delta":
            self.texts.append(str(event.data["text"]))


@KINDS
async def test_a_models_lone_surrogate_is_replaced_and_the_next_turn_sends_it_back(
    tmp_path: Path, wire: WireServer, kind: str
) -> None:
    rig = _rig(kind, wire)
    try:
        rig.expect(Answer(deltas=("Bonjour ", "\ud83d!")), stream=True)
        rig.expect(Answer(deltas=("Encore.",)), stream=True)
        async with open_host(tmp_path, rig.provider) as host:
            first = await host.turns.run(request("hello"))
            second = await host.turns.run(request("again"))
    finally:
        await rig.aclose()
    assert (first.outcome, first.text) == ("completed", "Bonjour \ufffd!")
    first.text.encode("utf-8")
    assert (second.outcome, second.text) == ("completed", "Encore."), second.error
    assert "Bonjour \ufffd!" in _sent_text(wire)


@KINDS
async def test_a_call_to_a_tool_named_with_a_lone_surrogate_is_answered_and_the_turn_goes_on(
    tmp_path: Path, wire: WireServer, kind: str
) -> None:
    rig = _rig(kind, wire)
    call = Call("call_\ud800", "files_\udcffread", ('{"path": "a.txt"}',))
    try:
        rig.expect(Answer(calls=(call,), finish="tool_calls"), stream=True)
        rig.expect(Answer(deltas=("No such tool.",)), stream=True)
        async with open_host(tmp_path, rig.provider) as host:
            result = await host.turns.run(request("read it"))
    finally:
        await rig.aclose()
    assert (result.outcome, result.text) == ("completed", "No such tool."), result.error
    assert [effect.status for effect in result.effects] == ["not_found"]
    # The second step sent the call (its name as the model wrote it, made valid) back.
    assert "files_\ufffdread" in _sent_text(wire)


async def test_a_scripted_answer_and_its_streamed_deltas_hold_valid_text(tmp_path: Path) -> None:
    deltas = Deltas()
    model = ScriptedModel([Reply("un \ud800 deux \udcff")])
    async with open_host(tmp_path, model, caps=capabilities(model, observer=deltas)) as host:
        result = await host.turns.run(request("hello"))
    assert result.text == "un \ufffd deux \ufffd"
    assert "".join(deltas.texts) == result.text


@KINDS
async def test_a_transcript_row_an_older_version_kept_with_a_lone_surrogate_does_not_brick_it(
    tmp_path: Path, wire: WireServer, kind: str
) -> None:
    """Rows written before text was made valid where it enters: the user's input normalized
    by a slot, the model's answer, a call's id and name. The next turn completes (with a
    fixed core, or none), and the request carries U+FFFD where the surrogates were."""
    first_model = ScriptedModel([CallTools(("lookup", {"q": "x"})), Reply("the answer")])

    def older_rows(db: sqlite3.Connection) -> None:
        # What an older version stored: canonical JSON, its lone surrogates as \\u escapes.
        for old, new in [
            ('"text":"the question"', '"text":"the question \\ud800"'),
            ('"text":"the answer"', '"text":"the answer \\udfff"'),
            ('"name":"lookup"', '"name":"look\\ud83dup"'),
        ]:
            changed = db.execute(
                "UPDATE messages SET content = replace(content, ?, ?) WHERE content LIKE ?",
                [old, new, f"%{old}%"],
            ).rowcount
            assert changed >= 1, old

    async with open_host(tmp_path, first_model) as host:
        assert (await host.turns.run(request("the question"))).outcome == "completed"
        # Written as plain SQL through the store: the same rows on either engine.
        await host.store.write(older_rows)
    rig = _rig(kind, wire)
    try:
        rig.expect(Answer(deltas=("Still here.",)), stream=True)
        async with open_host(tmp_path, rig.provider) as host:
            second = await host.turns.run(request("and now?"))
    finally:
        await rig.aclose()
    assert (second.outcome, second.text) == ("completed", "Still here."), second.error
    sent = _sent_text(wire)
    assert "the question \ufffd" in sent
    assert "the answer \ufffd" in sent
    sent.encode("utf-8")


def test_whatever_builds_a_message_its_text_encodes_as_utf8() -> None:
    """The rule at the narrowest boundary: whatever builds a message (a provider, a tool
    view, a transcript row, a context layer), its text encodes as UTF-8."""
    message = ModelMessage(
        "assistant",
        "a \ud800 b \udc80 c \ud83d\udca9",
        (ToolCall("c\udfff", "t\ud800", {}),),
    )
    sent = ModelRequest(messages=(message,))
    # A model's text is decoded JSON, never smuggled bytes: halves of one character sent
    # as two escapes are that character again; any other lone surrogate is U+FFFD.
    assert sent.messages[0].content == "a \ufffd b \ufffd c \U0001f4a9"
    assert sent.messages[0].tool_calls[0].call_id == "c\ufffd"
    json.dumps(sent.messages[0].to_json(), ensure_ascii=False).encode("utf-8")
    # A tool's description (an MCP server's) is sent with every request too.
    offered = ToolDefinition("search", "finds caf\ud800", {"type": "object"})
    assert offered.description == "finds caf\ufffd"
