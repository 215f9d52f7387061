"""A provider's token counts are bounded so that a session's sums stay readable.

The inspectors sum a session's per-call usage rows in 64-bit integers: a provider
reporting counts near that column's limit made SQLite's ``SUM`` fail for good after
two turns (PostgreSQL answered with a numeric). A count is at most
``MAX_TOKEN_COUNT``, far below it, on every adapter.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hostkit.effects import tool
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import MAX_TOKEN_COUNT, ModelRequest, ModelResponse, Usage
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio


@tool("notes.echo")
async def echo(text: str) -> str:
    """Echo the text.

    Args:
        text: the text
    """
    return text


class Reports(ScriptedModel):
    """Reports ``count`` in every usage bucket of every call: two turns, the first of two
    calls."""

    def __init__(self, count: int) -> None:
        super().__init__([CallTools(("notes.echo", {"text": "x"})), Reply("one"), Reply("two")])
        self.count = count

    def _respond(self, request: ModelRequest, step: Reply | CallTools) -> ModelResponse:
        response = super()._respond(request, step)
        return dataclasses.replace(response, usage=Usage(*(self.count,) * 4))


async def test_two_turns_at_the_largest_count_leave_the_session_usage_readable(
    tmp_path: Path,
) -> None:
    async with open_host(tmp_path, Reports(MAX_TOKEN_COUNT), tools=[echo]) as host:
        first = await host.turns.run(request("one"))
        second = await host.turns.run(request("two"))
        operator = await host.operator("ops", reason="read usage")
        usage = await host.store.inspect.session_usage(operator, first.session_id)
    assert (first.outcome, second.outcome) == ("completed", "completed")
    # A turn's total stops at the bound; the rows the inspectors sum stay exact.
    assert first.usage == second.usage == Usage(*(MAX_TOKEN_COUNT,) * 4)
    (sums,) = usage.sums
    assert (sums.steps, sums.input_tokens, sums.cache_write_tokens) == (
        3,
        3 * MAX_TOKEN_COUNT,
        3 * MAX_TOKEN_COUNT,
    )


async def test_a_count_near_the_columns_limit_is_refused_and_the_sums_stay_readable(
    tmp_path: Path,
) -> None:
    async with open_host(tmp_path, Reports(2**62 + 5), tools=[echo]) as host:
        results = [await host.turns.run(request(text)) for text in ("one", "two")]
        operator = await host.operator("ops", reason="read usage")
        usage = await host.store.inspect.session_usage(operator, results[0].session_id)
    assert [result.outcome for result in results] == ["failed", "failed"]
    assert "token counts are integers from 0 to" in (results[0].error or "")
    assert usage.sums == ()
