"""Tool-call arguments no tool takes never crash a turn or a later one.

Any real provider may send deeply nested JSON as a tool call's arguments; freezing
or encoding it recursively would exhaust the stack. It may send numbers Python's
``json`` reads but no strict encoder writes back (``1e999`` is inf, ``NaN``,
``Infinity``): kept in the transcript, they would fail the encoding of every later
request of the conversation. Parsed arguments of either kind become
``MalformedArguments`` with the reason (the effect is then ``invalid``); a
Python-built call holding them is a typed ``InvalidValue``; a stored call holding
them (an older version wrote it) is read back as ``MalformedArguments``.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidValue
from hostkit.providers import parse_tool_arguments
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import MAX_ARGUMENT_DEPTH, MalformedArguments, ModelMessage, ToolCall
from tests.hosts import open_host, request


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def malformed(arguments: Mapping[str, Any], text: str, said: str) -> None:
    """``arguments`` are ``MalformedArguments`` keeping ``text`` and saying ``said``."""
    assert isinstance(arguments, MalformedArguments)
    assert arguments.text == text
    assert said in arguments.reason


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 300])
def test_parsed_arguments_deeper_than_the_limit_become_malformed(depth: int) -> None:
    text = json.dumps(nested(depth))
    malformed(parse_tool_arguments(text), text[:2000], "nest deeper than 64 levels")


def test_json_too_deep_for_the_parser_becomes_malformed() -> None:
    text = '{"a":' * 100_000 + "1" + "}" * 100_000
    malformed(parse_tool_arguments(text), text[:2000], "nest too deeply to be read")


def test_arguments_at_the_limit_are_kept() -> None:
    value = nested(MAX_ARGUMENT_DEPTH)
    assert parse_tool_arguments(json.dumps(value)) == value
    assert ToolCall("c1", "t", value).arguments == value


def test_a_python_built_call_too_deep_is_a_typed_error() -> None:
    with pytest.raises(InvalidValue, match="nest deeper than 64 levels"):
        ToolCall("c1", "t", nested(500))


@pytest.mark.anyio
async def test_a_turn_with_too_deep_arguments_fails_typed_and_the_next_turn_works(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [CallTools(("anything", nested(500))), Reply("fine again")], repeat_last=True
    )
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request("deep"))
        assert first.outcome == "failed"
        assert "nest deeper than 64 levels" in (first.error or "")
        second = await host.turns.run(request("again"))
        assert (second.outcome, second.text) == ("completed", "fine again")


NOT_JSON_NUMBERS = ['{"x": 1e999}', '{"x": -1e999}', '{"x": NaN}', '{"a": {"b": [Infinity]}}']


@pytest.mark.parametrize("text", NOT_JSON_NUMBERS)
def test_parsed_numbers_json_cannot_carry_become_malformed(text: str) -> None:
    malformed(parse_tool_arguments(text), text, "which JSON cannot carry")


def test_arguments_an_sdk_parsed_holding_an_infinity_become_malformed() -> None:
    malformed(parse_tool_arguments({"x": math.inf}), '{"x": Infinity}', "the number inf")


def test_finite_numbers_however_written_are_kept() -> None:
    text = '{"a": 1e308, "b": -0.0, "c": 12345678901234567890, "d": 1E-400}'
    assert parse_tool_arguments(text) == json.loads(text)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"x": math.inf}, "the number inf"),
        ({"x": [1, {"y": -math.inf}]}, "the number -inf"),
        ({"x": math.nan}, "the number nan"),
        ({"x": b"bytes"}, "type bytes"),
        ({"x": {1: "a"}}, "key of type int"),
        ({"x": {"a", "b"}}, "type set"),
        ({"x": 10**4000}, "more than 3,900 digits"),
    ],
)
def test_a_python_built_call_holding_what_json_cannot_carry_is_a_typed_error(
    arguments: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidValue, match=said):
        ToolCall("c1", "t", arguments)


def test_the_largest_integer_json_readers_take_is_kept() -> None:
    assert ToolCall("c1", "t", {"x": 10**3900}).arguments["x"] == 10**3900


def test_a_stored_call_holding_nan_is_read_back_as_malformed() -> None:
    body = {"tool_calls": [{"call_id": "c1", "name": "t", "arguments": {"x": math.nan}}]}
    [call] = ModelMessage.from_json("assistant", body).tool_calls
    malformed(call.arguments, '{"x": NaN}', "the number nan")


def test_a_stored_call_holding_a_lone_surrogate_is_read_back_as_raw_spelled_out() -> None:
    """Rows written before ToolCall refused them: the row is read, the session goes on."""
    body = {"tool_calls": [{"call_id": "c1", "name": "t", "arguments": {"p": "a\ud800"}}]}
    [call] = ModelMessage.from_json("assistant", body).tool_calls
    assert dict(call.arguments) == {"_raw": '{"p": "a\\ud800"}'}


@pytest.mark.parametrize(
    "sent", ['{"path": "\\ud800"}', '{"\\udc80": 1}', {"path": "\ud800"}, {"\udc80": 1}]
)
def test_arguments_holding_a_lone_surrogate_become_one_raw_call(sent: Any) -> None:
    arguments = parse_tool_arguments(sent)
    assert set(arguments) == {"_raw"}
    assert "\\u" in arguments["_raw"]
    ToolCall("c1", "t", arguments)  # the raw form is itself valid arguments


def test_a_python_built_key_holding_a_lone_surrogate_is_a_typed_error() -> None:
    with pytest.raises(InvalidValue, match="lone surrogate"):
        ToolCall("c1", "t", {"\ud800": 1})


@pytest.mark.anyio
async def test_a_turn_with_an_infinite_argument_fails_typed_and_the_next_turn_works(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [CallTools(("anything", {"x": math.inf})), Reply("fine again")], repeat_last=True
    )
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request("inf"))
        assert first.outcome == "failed"
        assert "the number inf" in (first.error or "")
        second = await host.turns.run(request("again"))
        assert (second.outcome, second.text) == ("completed", "fine again")


@pytest.mark.anyio
async def test_a_transcript_row_holding_nan_from_an_older_version_does_not_brick_the_session(
    tmp_path: Path,
) -> None:
    first_model = ScriptedModel([CallTools(("anything", {"x": 1})), Reply("first")])
    async with open_host(tmp_path, first_model) as host:
        assert (await host.turns.run(request("one"))).outcome == "completed"
    # What an older version stored for {"x": nan}: Python's json writes it as a bare NaN.
    with closing(sqlite3.connect(tmp_path / "hostkit.db")) as db, db:
        changed = db.execute(
            "UPDATE messages SET content = replace(content, '\"x\":1}', '\"x\":NaN}')"
            " WHERE role = 'assistant' AND content LIKE '%\"x\":1}%'"
        ).rowcount
    assert changed == 1
    second_model = ScriptedModel([Reply("second")])
    async with open_host(tmp_path, second_model) as host:
        second = await host.turns.run(request("two"))
    assert (second.outcome, second.text) == ("completed", "second")
    [replayed] = [call for m in second_model.requests[-1].messages for call in m.tool_calls]
    malformed(replayed.arguments, '{"x": NaN}', "the number nan")
    assert dict(replayed.arguments) == {"_raw": '{"x": NaN}'}  # the form sent back
    json.dumps(dict(replayed.arguments), allow_nan=False)  # what a strict encoder sends
