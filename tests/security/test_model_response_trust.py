"""What a broken or hostile model server reports is not taken on trust by the turn.

A server (or a proxy in front of it) can cut a stream between events, report
token counts that are no counts, or give two tool calls one id. A cut stream
once reached the turn as a finished answer and its tool calls ran; a usage
count of ``10**30`` lost the turn in the store; repeated ids left the model
two results under one id. Each runs here through a real Host against both SDK
adapters and the loopback servers speaking their APIs (``tests.wire``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from hostkit.errors import InvalidValue
from hostkit.types import Usage
from tests.hosts import open_host, request
from tests.security.test_model_stream_bounds import PROBE, counting_tool, make_rig, turn_rows
from tests.wire import WireServer, sse_reply
from tests.wire.rigs import ScriptableRig, WireRig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

WIRE = ["openai", "anthropic"]
CALLS = Answer(
    deltas=("Counting.",),
    calls=(Call.of("call_a", PROBE, {}), Call.of("call_b", PROBE, {})),
    finish="tool_calls",
)


@pytest.mark.parametrize("kind", WIRE)
async def test_a_turn_whose_stream_was_cut_fails_and_runs_no_call(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    rig = cast(WireRig, make_rig(kind, wire, built))
    wire.script(sse_reply(rig.fmt.unfinished_events(CALLS)))
    ran: list[str] = []
    async with open_host(tmp_path, rig.provider, tools=[counting_tool(ran)]) as host:
        result = await host.turns.run(request("go"))
        roles, kinds = await turn_rows(host, result.turn_id)
    assert result.outcome == "failed"
    assert "before the response was finished" in (result.error or "")
    assert ran == []
    assert result.effects == ()
    assert roles == ["user"]
    assert not [k for k in kinds if k.startswith("effect.")]
    assert len(wire.requests) == 1


@pytest.mark.parametrize("kind", WIRE)
@pytest.mark.parametrize("count", [10**30, "12k", -5000], ids=["huge", "str", "negative"])
async def test_a_turn_whose_usage_is_no_token_count_completes_and_keeps_zero(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str, count: object
) -> None:
    rig = cast(WireRig, make_rig(kind, wire, built))
    wire.script(rig.fmt.usage_reply(count, stream=True))
    async with open_host(tmp_path, rig.provider) as host:
        result = await host.turns.run(request("go"))
        kept = await host.store.read(
            lambda c: c.execute(
                "SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens "
                "FROM usage_observations"
            ).fetchall()
        )
    assert result.outcome == "completed", result.error
    assert result.text == "ok"
    assert result.usage == Usage()
    assert [tuple(row) for row in kept] == [(0, 0, 0, 0)]


@pytest.mark.parametrize("kind", WIRE)
async def test_each_tool_result_answers_one_call_when_a_server_repeats_an_id(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    rig = cast(WireRig, make_rig(kind, wire, built))
    twice = Answer(calls=(Call.of("call_x", PROBE, {}),) * 2, finish="tool_calls")
    rig.expect(twice, stream=True)
    rig.expect(Answer(deltas=("done",)), stream=True)
    ran: list[str] = []
    async with open_host(tmp_path, rig.provider, tools=[counting_tool(ran)]) as host:
        result = await host.turns.run(request("go"))
    assert result.outcome == "completed", result.error
    assert len(ran) == 2
    sent = json.dumps(wire.requests[1].body["messages"])
    # Both ids went back to the provider, each with its own result.
    assert sent.count('"call_x"') == 2
    assert sent.count('"call_x_1"') == 2


@pytest.mark.parametrize(
    "count",
    ["12", 1.0, -1, 2**63, True, None],
    ids=["str", "float", "negative", "past-64-bits", "bool", "none"],
)
def test_any_provider_building_usage_that_is_no_count_gets_a_typed_error(count: object) -> None:
    # The backstop for providers that are no hostkit adapter: the value refuses itself.
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        with pytest.raises(InvalidValue, match="token counts are integers from 0 to"):
            Usage(**{field: count})  # type: ignore[arg-type]


def test_usage_up_to_what_the_store_holds_is_kept() -> None:
    largest = 2**63 - 1
    assert Usage(largest, largest, largest, largest).input_tokens == largest
