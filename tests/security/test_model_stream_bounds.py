"""A model response past a bound fails its turn before any of its calls runs or is kept.

A malicious or broken model (or the server in front of it) decides how many
tool calls one response holds, how long their names and ids are and how many
bytes of text and argument JSON it streams; the Host runs or records every
call, each in its own transaction, before the step limit is looked at. One
response of 20,000 unknown 5,000-character names once wrote 20,003 rows and a
335 MB database. Every adapter now holds a response to ``MAX_TOOL_CALLS``
calls, ``MAX_TOOL_NAME_CHARS``-character names, ``MAX_CALL_ID_CHARS``-character
ids and ``MAX_RESPONSE_BYTES`` of text and arguments, counted as it arrives:
past one, the call is a ``ProviderError`` naming the bound and the turn fails
with no call run and no call row written. Exactly at the bounds still works.
These run on ``ScriptedModel`` and on both SDK adapters against loopback
servers speaking their APIs (``tests.wire``).
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import anyio
import pytest

from hostkit.effects import AuthoredTool, ToolContext, tool
from hostkit.errors import InvalidValue, ProviderError
from hostkit.host import Host
from hostkit.types import ModelMessage, ModelRequest, ModelResponse, ToolCall, Usage
from hostkit.types._model import (
    MAX_CALL_ID_CHARS,
    MAX_RESPONSE_BYTES,
    MAX_TOOL_CALLS,
    MAX_TOOL_NAME_CHARS,
)
from tests.hosts import event_kinds, open_host, request
from tests.wire import WireServer, sse_reply
from tests.wire.rigs import ScriptableRig, WireRig, build_rig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

SCRIPTABLE = ["scripted", "openai", "anthropic"]
WIRE = ["openai", "anthropic"]
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
ASK = ModelRequest(messages=(ModelMessage(role="user", content="Go."),))
# The tool the floods call; as the model sees it.
PROBE = "probe_count"
# 64 fragments of 64 KiB: past the byte bound part-way through, never in one piece.
FRAGMENT = "A" * 65_536
OVERSIZED = (
    '{"blob": "',
    *[FRAGMENT] * (MAX_RESPONSE_BYTES // len(FRAGMENT)),
    '"}',
)


@dataclass(frozen=True, slots=True)
class Flood:
    """A response past one bound, and what the error says about which."""

    answer: Answer
    bound: str
    # ScriptedModel mints its own call ids: it cannot be scripted to send a long one.
    scripted: bool = True


def _calls(count: int) -> tuple[Call, ...]:
    return tuple(Call.of(f"call_{i}", PROBE, {}) for i in range(count))


FLOODS = {
    "too_many_calls": Flood(
        Answer(calls=_calls(MAX_TOOL_CALLS + 1), finish="tool_calls"),
        f"more than {MAX_TOOL_CALLS} tool calls",
    ),
    "long_tool_name": Flood(
        Answer(calls=(Call.of("call_a", "x" * 5_000, {}),), finish="tool_calls"),
        f"a tool name longer than {MAX_TOOL_NAME_CHARS} characters",
    ),
    "long_call_id": Flood(
        Answer(calls=(Call.of("c" * (MAX_CALL_ID_CHARS + 1), PROBE, {}),), finish="tool_calls"),
        f"a tool call id longer than {MAX_CALL_ID_CHARS} characters",
        scripted=False,
    ),
    "argument_bytes": Flood(
        Answer(calls=(Call("call_a", PROBE, OVERSIZED),), finish="tool_calls"),
        f"more than {MAX_RESPONSE_BYTES} bytes of text and tool arguments",
    ),
}
CASES = [
    pytest.param(kind, name, id=f"{kind}-{name}")
    for name, flood in FLOODS.items()
    for kind in SCRIPTABLE
    if kind != "scripted" or flood.scripted
]


def make_rig(kind: str, wire: WireServer, built: list[ScriptableRig]) -> ScriptableRig:
    rig = cast(ScriptableRig, build_rig(kind, wire=wire, local=None))
    built.append(rig)
    return rig


def counting_tool(ran: list[str]) -> AuthoredTool:
    @tool("probe.count")
    async def count(ctx: ToolContext) -> str:
        """Counts its calls."""
        ran.append("ran")
        return "counted"

    return count


async def answer(rig: ScriptableRig, *, stream: bool) -> ModelResponse:
    if not stream:
        return await rig.provider.complete(ASK)
    async with aclosing(rig.provider.stream(ASK)) as events:
        done = [event.response async for event in events if event.kind == "done"]
    assert len(done) == 1
    assert done[0] is not None
    return done[0]


async def turn_rows(host: Host, turn_id: str) -> tuple[list[str], list[str]]:
    """The roles of the turn's transcript rows, and its event kinds."""
    roles = await host.store.read(
        lambda c: c.execute(
            "SELECT role FROM messages WHERE turn_id = ? ORDER BY seq", [turn_id]
        ).fetchall()
    )
    return [row[0] for row in roles], await event_kinds(host, turn_id)


@pytest.mark.parametrize(("kind", "flood"), CASES)
@STREAMED
async def test_a_response_past_a_bound_is_a_provider_error_naming_it(
    wire: WireServer, built: list[ScriptableRig], kind: str, flood: str, stream: bool
) -> None:
    rig = make_rig(kind, wire, built)
    rig.expect(FLOODS[flood].answer, stream=stream)
    with pytest.raises(ProviderError) as raised:
        await answer(rig, stream=stream)
    error = raised.value
    assert FLOODS[flood].bound in error.message
    assert error.provider == rig.provider.name
    assert error.retryable is False
    # Never asked again: the same request would flood again.
    assert rig.served == 1
    # The bounded message names the bound, never the content that passed it.
    assert "xxxxxxxx" not in error.message
    assert FRAGMENT[:64] not in error.message


@pytest.mark.parametrize(("kind", "flood"), CASES)
async def test_a_turn_whose_response_passes_a_bound_fails_and_runs_or_keeps_no_call(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str, flood: str
) -> None:
    rig = make_rig(kind, wire, built)
    rig.expect(FLOODS[flood].answer, stream=True)
    ran: list[str] = []
    async with open_host(tmp_path, rig.provider, tools=[counting_tool(ran)]) as host:
        result = await host.turns.run(request("go"))
        roles, kinds = await turn_rows(host, result.turn_id)
    assert result.outcome == "failed"
    assert FLOODS[flood].bound in (result.error or "")
    assert ran == []
    assert result.effects == ()
    # Only the user's input was kept: no assistant message with calls, no tool results.
    assert roles == ["user"]
    assert "turn.failed" in kinds
    assert not [k for k in kinds if k.startswith("effect.")]


@pytest.mark.parametrize("kind", WIRE)
async def test_the_byte_bound_fails_the_stream_before_it_ends(
    wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    rig = cast(WireRig, make_rig(kind, wire, built))
    # Everything up to the last argument fragment, then a server that never finishes: only
    # a count made while the stream arrives can fail it (waiting for the end would hang).
    events = rig.fmt.answer_events(FLOODS["argument_bytes"].answer)[:-3]
    wire.script(sse_reply(events, hold=True))
    with anyio.fail_after(4), pytest.raises(ProviderError, match="bytes of text and tool"):
        await answer(rig, stream=True)
    with anyio.fail_after(4):
        await wire.released.wait()


@pytest.mark.parametrize("kind", SCRIPTABLE)
@STREAMED
async def test_a_response_exactly_at_every_bound_is_whole(
    wire: WireServer, built: list[ScriptableRig], kind: str, stream: bool
) -> None:
    rig = make_rig(kind, wire, built)
    name = "n" * MAX_TOOL_NAME_CHARS
    empty = [Call.of(f"{i:0{MAX_CALL_ID_CHARS}d}", name, {}) for i in range(MAX_TOOL_CALLS - 1)]
    # '{"blob": "' + blob + '"}' and the other calls' "{}" come to exactly the byte bound.
    blob = "A" * (MAX_RESPONSE_BYTES - 2 * len(empty) - 12)
    last = Call.of("c" * MAX_CALL_ID_CHARS, name, {"blob": blob})
    rig.expect(Answer(calls=(*empty, last), finish="tool_calls"), stream=stream)
    response = await answer(rig, stream=stream)
    assert len(response.tool_calls) == MAX_TOOL_CALLS
    assert {call.name for call in response.tool_calls} == {name}
    assert response.tool_calls[-1].arguments == {"blob": blob}
    if kind != "scripted":
        assert response.tool_calls[-1].call_id == "c" * MAX_CALL_ID_CHARS


@pytest.mark.parametrize("kind", SCRIPTABLE)
async def test_a_turn_of_exactly_the_most_calls_runs_every_one(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    rig = make_rig(kind, wire, built)
    rig.expect(Answer(calls=_calls(MAX_TOOL_CALLS), finish="tool_calls"), stream=True)
    rig.expect(Answer(deltas=("all ", "counted")), stream=True)
    ran: list[str] = []
    async with open_host(tmp_path, rig.provider, tools=[counting_tool(ran)]) as host:
        result = await host.turns.run(request("go"))
    assert result.outcome == "completed", result.error
    assert result.text == "all counted"
    assert len(ran) == MAX_TOOL_CALLS
    assert [e.status for e in result.effects] == ["succeeded"] * MAX_TOOL_CALLS


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ([ToolCall(f"c{i}", PROBE, {}) for i in range(MAX_TOOL_CALLS + 1)], "tool calls"),
        ([ToolCall("c1", "x" * (MAX_TOOL_NAME_CHARS + 1), {})], "tool name"),
        ([ToolCall("c" * (MAX_CALL_ID_CHARS + 1), PROBE, {})], "call id"),
    ],
    ids=["too_many_calls", "long_tool_name", "long_call_id"],
)
def test_any_provider_building_a_response_past_a_bound_gets_a_typed_error(
    calls: list[ToolCall], said: str
) -> None:
    # The backstop for providers that are no hostkit adapter: the value refuses itself.
    with pytest.raises(InvalidValue, match=said):
        ModelResponse("", tuple(calls), Usage(), "tool_calls", "custom", "m")
