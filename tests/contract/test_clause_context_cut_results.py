"""Clause: a step's tool results that do not fit the window together are cut, not the turn.

Eight calls at once, each returning 2 MB: every result is cut to the model
view's limit, and together they still exceed the scripted model's 8,192-token
window. The turn used to end ``failed`` (``current_input_too_large``) after
all eight effects had run, the model never seeing their results. Now the
model sees each result's beginning with a note of how much it shows, and
answers.

The same holds for the model's own text: a step that writes 200,000 characters
beside its call used to have the call refused and the next request overflow.
Now the call runs and that request sends the text's beginning with the same
note; the transcript keeps it whole.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.context import CharEstimator
from hostkit.effects import ToolContext, tool
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelLimits, ModelMessage, ModelRequest
from tests.hosts import config, request

pytestmark = pytest.mark.anyio


@tool("probe.big")
async def big(ctx: ToolContext, n: int) -> str:
    """Returns two megabytes."""
    return f"part {n}: " + "y" * 2_000_000


def decide(req: ModelRequest) -> Reply | CallTools:
    if req.messages[-1].role == "tool":
        return Reply("read all eight")
    return CallTools(*[("probe_big", {"n": n}) for n in range(8)])


async def test_eight_results_too_long_together_reach_the_model_cut(tmp_path: Path) -> None:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([decide], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, tools=[big])) as host:
        result = await host.turns.run(request("fetch all eight"))
    assert (result.outcome, result.text) == ("completed", "read all eight"), result.error
    assert [e.status for e in result.effects] == ["succeeded"] * 8
    last = model.requests[-1]
    results = [m for m in last.messages if m.role == "tool"]
    assert len(results) == 8
    for n, message in enumerate(results):
        assert message.content.startswith(f"part {n}: yyy")
        assert "[cut to fit the model's context window: the first " in message.content


# -- the turn's own assistant text ------------------------------------------------------------

# Several times the scripted model's 8,192-token window, in one step's text.
LONG_TEXT = 200_000
CUT_NOTE = "[cut to fit the model's context window: the first "


@tool("probe.small")
async def small(ctx: ToolContext, n: int) -> str:
    """Returns a short line."""
    return f"small result {n}"


def fits_the_window(req: ModelRequest, limits: ModelLimits) -> bool:
    """The request as sent, counted by the scripted model's estimator, fits its window."""
    return CharEstimator().request(req.messages, req.tools) <= limits.context_window


async def transcript(host: Host, session_id: str) -> list[ModelMessage]:
    state = await host.store.context.read_state(session_id=session_id, turn_id="none", window=64)
    return [row.message for row in state.rows]


async def test_a_steps_long_text_is_cut_in_the_next_request_and_its_call_runs(
    tmp_path: Path,
) -> None:
    """A step answers with 200,000 characters of text and a call: the call runs, the next
    request holds the text's beginning with a note and fits the window, and the turn
    completes; the transcript keeps the whole text."""
    text = "a" + "t" * (LONG_TEXT - 1)
    model = ScriptedModel(
        [CallTools(("probe_small", {"n": 1}), text=text), Reply("done")], repeat_last=True
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[small])) as host:
        with anyio.fail_after(30):
            result = await host.turns.run(request("think out loud, then probe"))
        stored = await transcript(host, result.session_id)
    assert (result.outcome, result.error, result.text) == ("completed", None, "done")
    assert [e.status for e in result.effects] == ["succeeded"]
    last = model.requests[-1]
    assert fits_the_window(last, model.limits)
    [sent] = [m for m in last.messages if m.role == "assistant" and m.tool_calls]
    assert sent.content.startswith("attt")
    assert sent.content.endswith(f" of {LONG_TEXT:,} characters]")
    assert CUT_NOTE in sent.content
    [answer] = [m for m in last.messages if m.role == "tool"]
    assert answer.content == "small result 1"  # the call/result pair stays whole
    # Only the request was cut: the transcript keeps every character the model wrote.
    assert [m.content for m in stored if m.tool_calls] == [text]


async def test_two_steps_of_long_text_are_both_cut_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    """Two steps each too long for the window with their text: every later request holds
    both, cut by the same share, the calls and results whole, and fits."""
    first, second = "1" + "f" * (LONG_TEXT - 1), "2" + "s" * (LONG_TEXT - 1)
    model = ScriptedModel(
        [
            CallTools(("probe_small", {"n": 1}), text=first),
            CallTools(("probe_small", {"n": 2}), text=second),
            Reply("done"),
        ]
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[small])) as host:
        with anyio.fail_after(30):
            result = await host.turns.run(request("think twice"))
        stored = await transcript(host, result.session_id)
    assert (result.outcome, result.error, result.text) == ("completed", None, "done")
    assert [e.status for e in result.effects] == ["succeeded", "succeeded"]
    assert len(model.requests) == 3
    for req in model.requests[1:]:
        assert fits_the_window(req, model.limits)
    last = model.requests[-1].messages
    steps = [m for m in last if m.role == "assistant" and m.tool_calls]
    assert [m.content[:3] for m in steps] == ["1ff", "2ss"]
    assert all(CUT_NOTE in m.content for m in steps)
    assert len({len(m.content) for m in steps}) == 1, "both cut by the same share"
    assert [m.content for m in last if m.role == "tool"] == ["small result 1", "small result 2"]
    assert [m.content for m in stored if m.tool_calls] == [first, second]


# -- results the estimate counts densely ------------------------------------------------------

DENSE = {
    "chinese": "中文是一种非常美丽的语言有着悠久的历史" * 60,
    "emoji": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 200,
}


@pytest.mark.parametrize(
    ("kind", "calls", "window", "output"),
    [
        ("chinese", 4, 8_192, 1_024),
        ("emoji", 6, 8_192, 1_024),
        ("chinese", 1, 2_048, 512),  # the local model's window
        ("chinese", 3, 2_048, 512),
        ("emoji", 3, 2_048, 512),
    ],
)
async def test_dense_results_are_cut_to_a_floor_in_tokens_and_the_turn_completes(
    tmp_path: Path, kind: str, calls: int, window: int, output: int
) -> None:
    """A result's floor was 400 characters: of Chinese or emoji about ten times the tokens
    ``kept_calls`` reserved for it, so the calls ran and the next step failed
    (``current_input_too_large``), even one call on a 2,048-token window. The floor is a
    number of tokens now: the calls run, their results reach the model cut, and it answers."""
    ran: list[int] = []

    @tool("probe.read")
    async def read(ctx: ToolContext, n: int) -> str:
        """Reads a document."""
        ran.append(n)
        return DENSE[kind]

    model = ScriptedModel(
        [CallTools(*[("probe_read", {"n": n}) for n in range(calls)]), Reply("read them")],
        limits=ModelLimits(context_window=window, max_output_tokens=output),
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[read])) as host:
        result = await host.turns.run(request("read the documents"))
    assert (result.outcome, result.error, result.text) == ("completed", None, "read them")
    assert [e.status for e in result.effects] == ["succeeded"] * calls
    assert ran == list(range(calls))
    last = model.requests[-1]
    assert CharEstimator().request(last.messages, last.tools) <= window - output
    for message in [m for m in last.messages if m.role == "tool"]:
        assert message.content.startswith(DENSE[kind][:1])
        assert CUT_NOTE in message.content


async def test_dense_calls_a_small_window_cannot_answer_are_refused_before_any_runs(
    tmp_path: Path,
) -> None:
    """Six calls on a 2,048-token window: even refused, each goes back with the turn (its
    marker, its refusal), and their results at their floor could not all be held. None
    runs; the model reads the refusals and answers."""
    ran: list[int] = []

    @tool("probe.read")
    async def read(ctx: ToolContext, n: int) -> str:
        """Reads a document."""
        ran.append(n)
        return DENSE["chinese"]

    model = ScriptedModel(
        [CallTools(*[("probe_read", {"n": n}) for n in range(6)]), Reply("fewer, then")],
        limits=ModelLimits(context_window=2_048, max_output_tokens=512),
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[read])) as host:
        result = await host.turns.run(request("read the documents"))
    assert (result.outcome, result.error, result.text) == ("completed", None, "fewer, then")
    assert ([e.status for e in result.effects], ran) == (["invalid"] * 6, [])
