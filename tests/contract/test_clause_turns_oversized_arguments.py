"""Clause: a call whose arguments the context window cannot keep is refused, never run.

A step is sent back to the model with every later step of its turn and is never
cut. One call with a 1 MB string argument (inside the 4 MiB response bound) used
to run its tool, then fail the turn at the next step (``context overflow
(current_input_too_large)``): the effect happened and the user got no answer.
Now, when a step is accepted, a call whose arguments the turn's next request
could not hold is kept as ``OversizedArguments`` (a bounded marker) and refused
``invalid`` before anything runs; the model reads why and answers, the turn
completes, and the next turn works. Of many calls that together are too large,
the ones that fit in order run and the rest are refused. Large arguments that
fit run as before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.context import CharEstimator
from hostkit.effects import ToolContext, tool
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import (
    MalformedArguments,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    OversizedArguments,
    Usage,
)
from tests.hosts import config, request
from tests.wire.rigs import WireRig, openai_rig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

# The scripted model's window is 8,192 tokens: this is several times what it holds.
HUGE = 200_000
TOLD = "[invalid] the arguments are too large to keep in the context window ("
SMALLER = "send a smaller call, e.g. write long content in parts"


class Writer:
    """A tool with an observable side effect: what it wrote."""

    def __init__(self) -> None:
        self.wrote: list[tuple[str, int]] = []

        @tool("files.put")
        async def put(ctx: ToolContext, path: str, content: str) -> str:
            """Write a file."""
            self.wrote.append((path, len(content)))
            return f"wrote {len(content)} characters to {path}"

        self.tool = put


def results(message_list: tuple[ModelMessage, ...]) -> dict[str, str]:
    return {m.tool_call_id or "": m.content for m in message_list if m.role == "tool"}


def calls_sent(message_list: tuple[ModelMessage, ...]) -> list[Any]:
    return [call for m in message_list for call in m.tool_calls]


async def test_a_call_too_large_for_the_window_is_refused_and_the_turn_completes(
    tmp_path: Path,
) -> None:
    writer = Writer()
    huge = {"path": "big.txt", "content": "x" * HUGE}
    model = ScriptedModel(
        [
            CallTools(("files_put", huge)),
            Reply("that was too large; I will write it in parts"),
            Reply("hello again"),
        ]
    )
    async with Host.open(
        config(tmp_path), capabilities=capabilities(model, tools=[writer.tool])
    ) as host:
        with anyio.fail_after(30):
            first = await host.turns.run(request("write the big file"))
            second = await host.turns.run(request("and now?"))
        state = await host.store.context.read_state(
            session_id=first.session_id, turn_id="none", window=16
        )
    assert (first.outcome, first.error) == ("completed", None)
    assert first.text == "that was too large; I will write it in parts"
    assert writer.wrote == []  # the tool never ran
    assert [e.status for e in first.effects] == ["invalid"]
    # The model read the refusal, and its call as a bounded marker, not the megabyte.
    answered = model.requests[1].messages
    [call] = calls_sent(answered)
    assert isinstance(call.arguments, OversizedArguments)
    assert call.arguments.text.startswith('{"path": "big.txt", "content": "xxx')
    assert len(call.arguments.text) <= 200
    told = results(answered)[call.call_id]
    assert told.startswith(TOLD + f"{len(json.dumps(huge)):,} characters; about "), told
    assert SMALLER in told
    # The transcript keeps the marker, never the arguments; it is replayed as malformed.
    [stored] = [c for row in state.rows for c in row.message.tool_calls]
    assert isinstance(stored.arguments, MalformedArguments)
    assert stored.arguments.text == call.arguments.text
    assert sum(len(json.dumps(row.message.to_json())) for row in state.rows) < 10_000
    assert (second.outcome, second.text) == ("completed", "hello again")


async def test_large_arguments_that_fit_still_run(tmp_path: Path) -> None:
    writer = Writer()
    model = ScriptedModel(
        [CallTools(("files_put", {"path": "a.txt", "content": "y" * 12_000})), Reply("done")]
    )
    async with Host.open(
        config(tmp_path), capabilities=capabilities(model, tools=[writer.tool])
    ) as host:
        result = await host.turns.run(request("write it"))
    assert (result.outcome, result.text) == ("completed", "done")
    assert writer.wrote == [("a.txt", 12_000)]
    [call] = calls_sent(model.requests[1].messages)
    assert not isinstance(call.arguments, MalformedArguments)
    assert call.arguments["content"] == "y" * 12_000


async def test_a_call_that_fits_once_earlier_results_are_cut_runs(tmp_path: Path) -> None:
    """The turn's earlier result (2 MB, at the model view's limit) and the next step's
    large call do not fit together, but do once that result is cut, as the next step
    cuts it: the call runs, not refused for room the cutting gives back."""
    writer = Writer()

    @tool("files.get")
    async def get(ctx: ToolContext, path: str) -> str:
        """Read a file."""
        return "r" * 2_000_000

    model = ScriptedModel(
        [
            CallTools(("files_get", {"path": "in.txt"})),
            CallTools(("files_put", {"path": "out.txt", "content": "y" * 15_000})),
            Reply("copied the start"),
        ]
    )
    caps = capabilities(model, tools=[writer.tool, get])
    async with Host.open(config(tmp_path), capabilities=caps) as host:
        result = await host.turns.run(request("copy the start"))
    assert (result.outcome, result.text) == ("completed", "copied the start"), result.error
    assert [e.status for e in result.effects] == ["succeeded", "succeeded"]
    assert writer.wrote == [("out.txt", 15_000)]


async def test_calls_too_large_together_run_while_they_fit_and_the_rest_are_refused(
    tmp_path: Path,
) -> None:
    """Five calls, each fitting alone, together several times the window: the first run,
    the later ones are refused without running, and the next step fits."""
    writer = Writer()
    calls = [("files_put", {"path": f"{n}.txt", "content": "z" * 9_000}) for n in range(5)]
    model = ScriptedModel([CallTools(*calls), Reply("some were too large")])
    async with Host.open(
        config(tmp_path), capabilities=capabilities(model, tools=[writer.tool])
    ) as host:
        result = await host.turns.run(request("write five"))
    assert (result.outcome, result.text) == ("completed", "some were too large"), result.error
    statuses = [e.status for e in result.effects]
    ran = statuses.count("succeeded")
    assert 1 <= ran < 5
    assert statuses == ["succeeded"] * ran + ["invalid"] * (5 - ran)
    assert writer.wrote == [(f"{n}.txt", 9_000) for n in range(ran)]
    sent = model.requests[1]
    told = results(sent.messages)
    for call in calls_sent(sent.messages)[ran:]:
        assert isinstance(call.arguments, OversizedArguments)
        assert told[call.call_id].startswith(TOLD + "9,")


async def test_secret_named_arguments_never_reach_the_marker(tmp_path: Path) -> None:
    writer = Writer()

    @tool("net.upload")
    async def upload(ctx: ToolContext, api_key: str, body: str) -> str:
        """Upload a body."""
        writer.wrote.append(("upload", len(body)))
        return "uploaded"

    secret = "sk-live-0123456789abcdefghij"
    model = ScriptedModel(
        [CallTools(("net_upload", {"api_key": secret, "body": "b" * HUGE})), Reply("no")]
    )
    async with Host.open(
        config(tmp_path), capabilities=capabilities(model, tools=[upload])
    ) as host:
        result = await host.turns.run(request("upload"))
        rows = await host.store.read(lambda c: c.execute("SELECT content FROM messages").fetchall())
    assert result.outcome == "completed"
    assert writer.wrote == []
    [call] = calls_sent(model.requests[1].messages)
    assert isinstance(call.arguments, OversizedArguments)
    assert secret not in call.arguments.text
    assert all(secret not in str(row) for row in rows)


@pytest.fixture
async def rig() -> AsyncIterator[WireRig]:
    """The OpenAI-compatible adapter against the loopback server."""
    async with openai_rig() as built:
        yield built


async def test_over_the_openai_compatible_wire_the_call_is_refused_and_sent_back_small(
    tmp_path: Path, rig: WireRig
) -> None:
    """The repro: 1 MB of arguments from an OpenAI-compatible server (its window 128k)."""
    writer = Writer()
    arguments = json.dumps({"path": "big.txt", "content": "x" * 1_000_000})
    rig.expect(
        Answer(calls=(Call("c1", "files_put", (arguments,)),), finish="tool_calls"), stream=True
    )
    rig.expect(Answer(deltas=("too large, sorry",)), stream=True)
    rig.expect(Answer(deltas=("hello again",)), stream=True)
    caps = capabilities(rig.provider, tools=[writer.tool])
    async with Host.open(config(tmp_path), capabilities=caps) as host:
        with anyio.fail_after(60):
            first = await host.turns.run(request("write the big file"))
            second = await host.turns.run(request("and now?"))
    assert (first.outcome, first.text) == ("completed", "too large, sorry"), first.error
    assert writer.wrote == []
    assert (second.outcome, second.text) == ("completed", "hello again")
    body = rig.wire.requests[1].body
    assert len(json.dumps(body)) < 20_000
    [sent] = [c for m in body["messages"] if m["role"] == "assistant" for c in m["tool_calls"]]
    assert json.loads(sent["function"]["arguments"]) == {"_raw": arguments[:200]}
    [told] = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert told.startswith(TOLD + "1,000,0"), told


@pytest.mark.parametrize("chars", [18_000, 20_000, 22_000])
async def test_a_call_the_window_holds_only_until_a_large_result_is_cut_is_refused_too(
    tmp_path: Path, chars: int
) -> None:
    """The next request cuts the turn's results into three quarters of the room: a call
    that fits the whole room but not that share beside its result at its floor would run,
    then fail the turn once its result came back large. It is refused before it runs."""
    ran: list[int] = []

    @tool("files.put")
    async def put(ctx: ToolContext, path: str, content: str) -> str:
        """Write a file."""
        ran.append(len(content))
        return "r" * 200_000

    model = ScriptedModel(
        [CallTools(("files_put", {"path": "a", "content": "w " * (chars // 2)})), Reply("done")]
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[put])) as host:
        result = await host.turns.run(request("go"))
    assert (result.outcome, [e.status for e in result.effects], ran) == (
        "completed",
        ["invalid"],
        [],
    )


async def test_small_calls_run_while_their_results_fit_at_their_floor_and_else_none_does(
    tmp_path: Path,
) -> None:
    """Each result is reserved its floor (a bounded number of tokens, whatever the tool
    returns), and a refused call still goes back with the turn as its marker and its
    refusal, reserved the same. Twenty small calls fit so on the 8,192-token window: all
    run. Forty do not, even all refused: none runs (had some run and returned much, the
    next step would fail with their effects done)."""

    @tool("work.quick")
    async def quick(ctx: ToolContext) -> str:
        """Answer at once."""
        return "ok"

    outcomes = []
    for count in (20, 40):
        model = ScriptedModel([CallTools(*[("work_quick", {})] * count), Reply("done")])
        caps = capabilities(model, tools=[quick])
        async with Host.open(config(tmp_path / str(count)), capabilities=caps) as host:
            result = await host.turns.run(request("go"))
        outcomes.append((count, [effect.status for effect in result.effects]))
    assert outcomes == [(20, ["succeeded"] * 20), (40, ["invalid"] * 40)]


# -- the calibration the step's own usage moves ----------------------------------------------


class CountsDouble(ScriptedModel):
    """Reports twice what CharEstimator counts as its input usage: a tokenizer that much
    denser than the estimate on this session's text."""

    def _respond(self, request: ModelRequest, step: Reply | CallTools) -> ModelResponse:
        response = super()._respond(request, step)
        counted = 2 * CharEstimator().request(request.messages, request.tools)
        return dataclasses.replace(response, usage=Usage(counted, 5))


PASTE = "The list holds the names of every file the build touched last night. " * 340
CONTENT = "The report covers the quarterly numbers and the plan for the next year. " * 340


async def test_a_call_the_next_request_holds_only_by_the_old_calibration_is_refused(
    tmp_path: Path,
) -> None:
    """The step's usage, committed with the step after its calls are checked, doubles the
    calibration: the paste and the call fit the next request by the old ratio, not by
    the one that request is counted with. The call used to run, then the next step failed
    (``current_input_too_large``) with the file written. It is refused before it runs."""
    wrote: list[int] = []

    @tool("files.put")
    async def put(ctx: ToolContext, path: str, content: str) -> str:
        """Write a file."""
        wrote.append(len(content))
        return "written"

    model = CountsDouble(
        [CallTools(("files_put", {"path": "list.txt", "content": CONTENT})), Reply("too large")],
        limits=ModelLimits(context_window=32_768, max_output_tokens=4_096),
    )
    async with Host.open(config(tmp_path), capabilities=capabilities(model, tools=[put])) as host:
        result = await host.turns.run(request("Save this list to a file:\n" + PASTE))
        calibration = (
            await host.store.context.read_state(
                session_id=result.session_id, turn_id="none", window=1
            )
        ).calibration
    assert (result.outcome, result.error, result.text) == ("completed", None, "too large")
    assert ([e.status for e in result.effects], wrote) == (["invalid"], [])
    assert calibration is not None
    assert calibration.ratio == pytest.approx(2.0, rel=0.01)
    for sent in model.requests:  # each fit the window as the provider counts it
        counted = 2 * CharEstimator().request(sent.messages, sent.tools)
        assert counted + sent.max_output_tokens <= 32_768
