"""Clause: what one kind of text teaches the calibration never puts another over the window.

The estimate (``CharEstimator``) is an upper bound, and one calibration ratio
scales all of a session's content. A provider counting as OpenAI's o200k does
counts Chinese at about a quarter of the estimate and English prose at 0.71 of
it. A session whose first turn was Chinese used to take that quarter (bounded to
0.5) as its ratio at once; its next turn read eight English documents, was
prepared at half their estimate and sent over the window: the provider refused
it, and the step had to be prepared again. The ratio now stops at 0.8, and the
English turn is prepared to fit the first time.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from hostkit.context import CharEstimator
from hostkit.effects import ToolContext, tool
from hostkit.errors import ContextOverflow
from hostkit.host import Host
from hostkit.testing import CallTools, Fail, Reply, ScriptedModel, capabilities
from hostkit.types import ModelLimits, ModelRequest, ModelResponse, Usage
from tests.hosts import config, request

pytestmark = pytest.mark.anyio

WINDOW = 16_384
# What o200k counts of CharEstimator's estimate, as measured: Chinese, everything else.
CHINESE_SHARE, ENGLISH_SHARE = 0.25, 0.71
_CJK = re.compile("[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
CHINESE = "我们今天讨论一下项目的进展和下一步的计划。请记住这些要点。" * 40
ENGLISH = (
    "The quarterly report covers revenue, costs and the plan for the coming year. "
    "Each team lists what it shipped, what slipped and why, and what it needs next. "
) * 120


def counted(request: ModelRequest) -> int:
    """The request's input tokens as the provider counts them."""
    estimate = CharEstimator()
    total = math.ceil(estimate.definitions(request.tools) * ENGLISH_SHARE)
    for message in request.messages:
        share = CHINESE_SHARE if _CJK.search(message.content) else ENGLISH_SHARE
        total += math.ceil(estimate.message(message) * share)
    return total


class CountsLikeO200k(ScriptedModel):
    """Reports its own count as usage and refuses a request whose input and output
    reservation do not fit its window, as OpenAI does."""

    def __init__(self) -> None:
        super().__init__(
            [decide],
            repeat_last=True,
            limits=ModelLimits(context_window=WINDOW, max_output_tokens=4_096),
        )
        self.needed: list[int] = []

    async def _next_step(self, request: ModelRequest) -> Reply | CallTools | Fail:
        needed = counted(request) + request.max_output_tokens
        self.needed.append(needed)
        if needed > WINDOW:
            return Fail(ContextOverflow(f"{needed} tokens > {WINDOW}", provider=self._name))
        return await super()._next_step(request)

    def _respond(self, request: ModelRequest, step: Reply | CallTools) -> ModelResponse:
        response = super()._respond(request, step)
        return dataclasses.replace(response, usage=Usage(counted(request), 5))


@tool("docs.read")
async def read(ctx: ToolContext, path: str) -> str:
    """Read a document."""
    return ENGLISH


def decide(req: ModelRequest) -> Reply | CallTools:
    last = req.messages[-1]
    if last.role == "tool":
        return Reply("Here is the summary.")
    if "report" in last.content:
        return CallTools(*[("docs_read", {"path": f"report{n}.md"}) for n in range(8)])
    return Reply("好的。我明白了。")


async def test_an_english_turn_after_a_chinese_one_is_prepared_to_fit_the_first_time(
    tmp_path: Path,
) -> None:
    model = CountsLikeO200k()
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[read])) as host:
        chinese = await host.turns.run(request(CHINESE))
        state = await host.store.context.read_state(
            session_id=chinese.session_id, turn_id="none", window=1
        )
        english = await host.turns.run(
            request("Please read report0.md to report7.md and summarize the report.")
        )
    assert (chinese.outcome, english.outcome) == ("completed", "completed"), english.error
    assert english.text == "Here is the summary."
    assert [e.status for e in english.effects] == ["succeeded"] * 8
    # No request went over the window, none was refused (three calls: one for each step) ...
    assert max(model.needed) <= WINDOW
    assert len(model.needed) == 3
    # ... since Chinese, counted at a quarter of the estimate, lowered the ratio only to 0.8.
    assert state.calibration is not None
    assert state.calibration.ratio == pytest.approx(0.8)
