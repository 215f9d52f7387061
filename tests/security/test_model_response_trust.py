"""What a broken or hostile model server reports is not taken on trust by the turn.

A server (or a proxy in front of it) can cut a stream between events, report
token counts that are no counts, or give two tool calls one id. A cut stream
once reached the turn as a finished answer and its tool calls ran; a usage
count of ``10**30`` lost the turn in the store; repeated ids left the model
two results under one id. Each runs here through a real Host against both SDK
adapters and the loopback servers speaking their APIs (``tests.wire``).

A call id the server chose and a tool name the model typed are text from
outside too: prompt injection can put a bound secret in either. Such a call id
is replaced by one the Host mints, and a name no tool has is recorded as
``UNKNOWN_EFFECT``; neither reaches an event, a record or the answer's name
unmasked (only the model's own assistant message keeps what it sent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from hostkit.errors import InvalidValue
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import (
    MAX_MODEL_ID_CHARS,
    MAX_REQUEST_ID_CHARS,
    MAX_TOKEN_COUNT,
    UNKNOWN_EFFECT,
    ModelResponse,
    Usage,
)
from tests.hosts import open_host, request
from tests.security.test_model_stream_bounds import PROBE, counting_tool, make_rig, turn_rows
from tests.support import table_rows
from tests.wire import WireServer, sse_reply
from tests.wire.rigs import ScriptableRig, WireRig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

WIRE = ["openai", "anthropic"]
SECRET_NAME = "HK_TRUST_TOKEN"
SECRET = "hkTrustSecret7c2e9f41"
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


class Seen:
    """An observer keeping every event the turn reported."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)


def occurrences(database: Path, seen: Seen, value: str) -> int:
    """How often ``value`` is in any cell of the database or any reported event."""
    cells = sum(cell.count(value) for cell in table_rows(database))
    return cells + sum(repr(event.data).count(value) for event in seen.events)


@pytest.mark.parametrize("kind", WIRE)
@pytest.mark.parametrize(
    "sent", [f"call_{SECRET}", "call_\x1b[2Jx", ""], ids=["secret", "control", "empty"]
)
async def test_a_call_id_the_host_would_not_keep_is_replaced_everywhere_by_one_it_mints(
    tmp_path: Path,
    wire: WireServer,
    built: list[ScriptableRig],
    kind: str,
    sent: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    rig = cast(WireRig, make_rig(kind, wire, built))
    rig.expect(Answer(calls=(Call.of(sent, PROBE, {}),), finish="tool_calls"), stream=True)
    rig.expect(Answer(deltas=("done",)), stream=True)
    ran: list[str] = []
    seen = Seen()
    caps = capabilities(rig.provider, tools=[counting_tool(ran)], observer=seen)
    async with open_host(tmp_path, rig.provider, caps=caps, secrets=[SECRET_NAME]) as host:
        result = await host.turns.run(request("go"))
    assert result.outcome == "completed", result.error
    assert ran == ["ran"]
    (effect,) = result.effects
    minted = effect.call_id
    assert minted.startswith("call_")
    assert minted != sent
    assert SECRET not in minted
    # One id for the call everywhere: its events, and both messages sent back to the model.
    started = [e for e in seen.events if e.kind == "effect.started"]
    completed = [e for e in seen.events if e.kind == "effect.completed"]
    assert [e.data["call_id"] for e in started + completed] == [minted, minted]
    replayed = json.dumps(wire.requests[1].body["messages"])
    assert replayed.count(json.dumps(minted)) == 2
    if sent:
        assert json.dumps(sent) not in replayed
        assert occurrences(tmp_path / "hostkit.db", seen, sent) == 0


@pytest.mark.parametrize("kind", WIRE)
async def test_a_call_id_the_host_can_keep_is_kept(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    rig = cast(WireRig, make_rig(kind, wire, built))
    rig.expect(Answer(calls=(Call.of("call_Ab-9_z", PROBE, {}),), finish="tool_calls"), stream=True)
    rig.expect(Answer(deltas=("done",)), stream=True)
    async with open_host(tmp_path, rig.provider, tools=[counting_tool([])]) as host:
        result = await host.turns.run(request("go"))
    assert [e.call_id for e in result.effects] == ["call_Ab-9_z"]


async def test_a_tool_name_no_tool_has_is_recorded_as_unknown_and_masked_in_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    typed = f"nosuch_{SECRET}"
    model = ScriptedModel([CallTools((typed, {}), (PROBE, {})), Reply("done")])
    seen = Seen()
    caps = capabilities(model, tools=[counting_tool([])], observer=seen)
    async with open_host(tmp_path, model, caps=caps, secrets=[SECRET_NAME]) as host:
        result = await host.turns.run(request("go"))
        details = await host.store.read(
            lambda c: c.execute(
                "SELECT kind, detail FROM turn_events WHERE turn_id = ? ORDER BY seq",
                [result.turn_id],
            ).fetchall()
        )
    assert result.outcome == "completed", result.error
    assert [(e.effect, e.status) for e in result.effects] == [
        (UNKNOWN_EFFECT, "not_found"),
        ("probe.count", "succeeded"),
    ]
    step: dict[str, Any] = next(json.loads(d) for k, d in details if k == "provider.completed")
    assert step["tool_calls"] == [UNKNOWN_EFFECT, PROBE]
    assert step["effects_called"] == [UNKNOWN_EFFECT, "probe.count"]
    # The model reads which of its calls was wrong, the secret in the name masked.
    answer = next(m for m in model.requests[1].messages if m.role == "tool")
    assert answer.name == f"nosuch_[redacted:{SECRET_NAME}]"
    # Only the model's own assistant message keeps the name as it was sent.
    assert occurrences(tmp_path / "hostkit.db", seen, SECRET) == 1


@pytest.mark.parametrize(
    "count",
    ["12", 1.0, -1, MAX_TOKEN_COUNT + 1, 2**62 + 5, 2**63, True, None],
    ids=[
        "str",
        "float",
        "negative",
        "past-the-bound",
        "near-64-bits",
        "past-64-bits",
        "bool",
        "none",
    ],
)
def test_any_provider_building_usage_that_is_no_count_gets_a_typed_error(count: object) -> None:
    # The backstop for providers that are no hostkit adapter: the value refuses itself.
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        with pytest.raises(InvalidValue, match="token counts are integers from 0 to"):
            Usage(**{field: count})  # type: ignore[arg-type]


def test_usage_up_to_the_bound_is_kept() -> None:
    # The bound keeps a session's per-call rows summable in 64 bits (2**23 - 1 calls at it).
    largest = MAX_TOKEN_COUNT
    assert Usage(largest, largest, largest, largest).input_tokens == largest
    assert largest * (2**23 - 1) <= 2**63 - 1


# A model id and a response id as a hostile (or broken) server may choose them: a title
# change, a screen clear, a colour, a bidi override, and far longer than any real id.
HOSTILE_ID = "gpt\x1b]0;PWNED\x07\x1b[2J\x1b[31mred\u202e" + "x" * 400


@pytest.mark.parametrize("kind", WIRE)
async def test_a_server_chosen_model_and_response_id_are_kept_escaped_and_bounded(
    tmp_path: Path, wire: WireServer, built: list[ScriptableRig], kind: str
) -> None:
    """The model and response ids a server reports go into usage rows, events and every
    inspector: each is kept printable (its controls as escapes) and bounded, the same
    way every time, whichever adapter read it."""
    rig = cast(WireRig, make_rig(kind, wire, built))
    answer = Answer(deltas=("ok",), request_id=None, response_id=HOSTILE_ID)
    events = rig.fmt.answer_events(answer)
    model = json.dumps(rig.fmt.MODEL).encode()
    wire.script(sse_reply(tuple(e.replace(model, json.dumps(HOSTILE_ID).encode()) for e in events)))
    async with open_host(tmp_path, rig.provider) as host:
        result = await host.turns.run(request("go"))
        kept = await host.store.read(
            lambda c: c.execute(
                "SELECT model, provider_request_id FROM usage_observations"
            ).fetchall()
        )
    assert result.outcome == "completed", result.error
    ((stored_model, stored_id),) = [tuple(row) for row in kept]
    for stored, limit in ((stored_model, MAX_MODEL_ID_CHARS), (stored_id, MAX_REQUEST_ID_CHARS)):
        assert stored.isprintable(), stored
        assert stored.startswith("gpt\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mred\\u202e")
        assert len(stored) == limit
        assert stored.endswith("…")


def test_any_provider_building_a_response_keeps_its_ids_printable_and_bounded() -> None:
    """``ModelResponse`` holds every provider to it (a custom one, the scripted model)."""
    response = ModelResponse(
        text="",
        tool_calls=(),
        usage=Usage(),
        finish_reason="stop",
        provider="custom",
        model="m\x1b[2J",
        provider_request_id="r\x9b1m",
    )
    assert (response.model, response.provider_request_id) == ("m\\x1b[2J", "r\\x9b1m")
    clean = ModelResponse("", (), Usage(), "stop", "p", "gpt-4o-mini", "req_1")
    assert (clean.model, clean.provider_request_id) == ("gpt-4o-mini", "req_1")
