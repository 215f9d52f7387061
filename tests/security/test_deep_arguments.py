"""Tool-call arguments nested past any schema never crash a turn or a later one.

Any real provider may send deeply nested JSON as a tool call's arguments; freezing
or encoding it recursively would exhaust the stack. Parsed JSON deeper than
``MAX_ARGUMENT_DEPTH`` becomes the ``_raw`` marker (the effect is then ``invalid``),
and a Python-built call that deep is a typed ``InvalidValue``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import InvalidValue
from hostkit.providers import parse_tool_arguments
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import MAX_ARGUMENT_DEPTH, ToolCall
from tests.hosts import open_host, request


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [MAX_ARGUMENT_DEPTH + 1, 300])
def test_parsed_arguments_deeper_than_the_limit_become_raw(depth: int) -> None:
    text = json.dumps(nested(depth))
    assert parse_tool_arguments(text) == {"_raw": text[:2000]}


def test_json_too_deep_for_the_parser_becomes_raw() -> None:
    text = '{"a":' * 100_000 + "1" + "}" * 100_000
    assert parse_tool_arguments(text) == {"_raw": text[:2000]}


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
