"""Tool-call arguments that are no JSON object are a fact about the call, refused first.

A model cut off at its output limit sends truncated JSON; others send an array, a
string, ``null``, a number, ``NaN``, ``1e400`` or nesting no tool takes. Such a call
is ``MalformedArguments`` (never an ordinary ``{"_raw": text}`` mapping a schema with
no ``required`` would accept): the effect runtime refuses it as ``invalid`` before
validation, policy or approval, and tells the model why and what to send instead. It
keeps its type through the transcript (stored, read back, continued after another
call's approval) and is sent back to the model as the text it sent. A well-formed
object with a property that happens to be named ``_raw`` is an ordinary call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import SchemaTool, ToolContext, tool
from hostkit.freeze import FrozenMap
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import MalformedArguments, ModelMessage, ToolCall
from tests.contract._store_adapters import ADAPTERS
from tests.hosts import request
from tests.wire import WireServer
from tests.wire.rigs import WireRig, openai_rig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

CLEANUP_SCHEMA = {
    "type": "object",
    "properties": {"dry_run": {"type": "boolean", "default": True}, "_raw": {"type": "string"}},
}
TRUNCATED = '{"dry_run": false, "branch": "feat'
# (arguments as the model sent them, what the model is told they were)
MALFORMED = {
    "truncated": (TRUNCATED, "they are cut off before their JSON ends (Unterminated string"),
    "not_json": ('{"dry_run": tru}', "they are not valid JSON (Expecting value at character"),
    "array": ("[true]", "they are a JSON array, not an object"),
    "string": ('"dry"', "they are a JSON string, not an object"),
    "null": ("null", "they are JSON null, not an object"),
    "number": ("5", "they are a JSON number, not an object"),
    "nan": ('{"dry_run": NaN}', "they hold the number nan, which JSON cannot carry (at dry_run)"),
    "infinite": ('{"n": 1e400}', "they hold the number inf, which JSON cannot carry (at n)"),
    "deep": ('{"a": ' + "[" * 70 + "]" * 70 + "}", "they nest deeper than 64 levels (at a[0]"),
    "unreadably_deep": ("[" * 10_000 + "]" * 10_000, "they nest too deeply to be read"),
    "huge_integer": ('{"n": ' + "9" * 5000 + "}", "they hold a number too long to be read"),
}
RESEND = "send the call again with its arguments as one complete JSON object"


class Cleanup:
    """A schema tool (the kind MCP tools are) that records what it ran with."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

        async def call(ctx: ToolContext, **arguments: Any) -> str:
            self.ran.append(arguments)
            return f"cleaned with {sorted(arguments)}"

        self.tool = SchemaTool(
            "repo.cleanup",
            call,
            description="Delete stale branches.",
            parameters=CLEANUP_SCHEMA,
            timeout_s=5,
        )


class Approver:
    """Approves every prompt, recording it."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def decide(self, req: Any) -> str:
        self.seen.append(req)
        return "approve_once"


@pytest.fixture
async def rig() -> AsyncIterator[WireRig]:
    """The OpenAI-compatible adapter against the loopback server."""
    async with openai_rig() as built:
        yield built


def host_config(tmp_path: Path, policy: dict[str, Any]) -> Any:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False, "policy": policy}},
        },
        base_dir=tmp_path,
    )


def sent_calls(wire: WireServer, index: int = -1) -> list[tuple[str, str]]:
    """(call id, argument text) of every assistant tool call in request ``index``."""
    messages = wire.requests[index].body["messages"]
    return [
        (call["id"], call["function"]["arguments"])
        for message in messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    ]


def tool_messages(wire: WireServer, index: int = -1) -> dict[str, str]:
    """call id -> the tool result the model read, in request ``index``."""
    messages = wire.requests[index].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_call_is_refused_invalid_with_a_reason_the_model_can_act_on(
    tmp_path: Path, rig: WireRig, kind: str
) -> None:
    """The tool (whose schema takes any object) never runs, nobody is asked, and the model
    reads what was wrong, never the internal key, with the way to correct it."""
    text, said = MALFORMED[kind]
    cleanup = Cleanup()
    approver = Approver()
    rig.expect(Answer(calls=(Call("c1", "repo_cleanup", (text,)),), finish="length"), stream=True)
    rig.expect(Answer(deltas=("sorry",)), stream=True)
    config = host_config(tmp_path, {"allow": ["*"], "ask": ["repo.cleanup"]})
    caps = capabilities(rig.provider, tools=[cleanup.tool])
    async with Host.open(config, capabilities=caps, approver=approver) as host:
        with anyio.fail_after(30):
            result = await host.turns.run(request("clean up"))
    assert result.outcome == "completed"
    assert [e.status for e in result.effects] == ["invalid"]
    assert cleanup.ran == []
    assert approver.seen == []
    told = tool_messages(rig.wire)["c1"]
    assert told.startswith("[invalid] the arguments were not one JSON object: " + said), told
    assert told.endswith(RESEND)
    assert "_raw" not in told
    assert len(told) < 600


async def test_a_well_formed_property_named_raw_is_an_ordinary_argument(
    tmp_path: Path, rig: WireRig
) -> None:
    cleanup = Cleanup()
    call = Call("c1", "repo_cleanup", ('{"_raw": "main", "dry_run": true}',))
    rig.expect(Answer(calls=(call,), finish="tool_calls"), stream=True)
    rig.expect(Answer(deltas=("cleaned",)), stream=True)
    caps = capabilities(rig.provider, tools=[cleanup.tool])
    async with Host.open(host_config(tmp_path, {"allow": ["*"]}), capabilities=caps) as host:
        result = await host.turns.run(request("clean up"))
    assert [e.status for e in result.effects] == ["succeeded"]
    assert cleanup.ran == [{"_raw": "main", "dry_run": True}]
    assert sent_calls(rig.wire) == [("c1", json.dumps({"_raw": "main", "dry_run": True}))]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_stored_malformed_call_survives_a_pause_and_is_sent_back_as_the_model_sent_it(
    tmp_path: Path, rig: WireRig, adapter: str
) -> None:
    """One step: a truncated call, then a call that waits for approval. The turn pauses;
    the store reads the malformed call back as such; a new Host runs the approved call,
    and the next request carries the malformed call as the text the model sent, with
    its refusal."""
    cleanup = Cleanup()
    stamped: list[str] = []

    @tool("files.stamp")
    async def stamp(ctx: ToolContext, label: str) -> str:
        """Stamp a label."""
        stamped.append(label)
        return f"stamped {label}"

    calls = (
        Call("c1", "repo_cleanup", (TRUNCATED[:9], TRUNCATED[9:])),
        Call("c2", "files_stamp", ('{"label": "one"}',)),
    )
    rig.expect(Answer(calls=calls, finish="tool_calls"), stream=True)
    config = host_config(tmp_path, {"allow": ["*"], "ask": ["files.stamp"]})
    caps = capabilities(rig.provider, tools=[cleanup.tool, stamp])
    async with Host.open(config, capabilities=caps) as host:
        paused = await host.turns.run(request("clean up and stamp"))
        state = await host.store.context.read_state(
            session_id=paused.session_id, turn_id="none", window=16
        )
    assert paused.outcome == "needs_user"
    assert paused.pending_approval is not None
    [stored, _] = [call for row in state.rows for call in row.message.tool_calls]
    assert isinstance(stored.arguments, MalformedArguments)
    assert stored.arguments.text == TRUNCATED
    assert stored.arguments.reason.startswith("are cut off before their JSON ends")

    rig.expect(Answer(deltas=("done",)), stream=True)
    async with Host.open(config, capabilities=caps) as host:
        operator = await host.operator("ops", reason="answer approvals")
        result = await host.approvals.answer(paused.pending_approval, "approve_once", by=operator)
    assert (result.outcome, result.text) == ("completed", "done")
    assert (cleanup.ran, stamped) == ([], ["one"])
    assert sent_calls(rig.wire) == [
        ("c1", json.dumps({"_raw": TRUNCATED})),
        ("c2", json.dumps({"label": "one"})),
    ]
    told = tool_messages(rig.wire)
    assert told["c1"].startswith("[invalid] the arguments were not one JSON object: they are cut")
    assert told["c2"] == "stamped one"


async def test_a_scripted_malformed_call_is_refused_as_any_adapters_is(tmp_path: Path) -> None:
    cleanup = Cleanup()
    malformed = MalformedArguments("[true]", "are a JSON array, not an object")
    model = ScriptedModel([CallTools(("repo_cleanup", malformed)), Reply("sorry")])
    caps = capabilities(model, tools=[cleanup.tool])
    async with Host.open(host_config(tmp_path, {"allow": ["*"]}), capabilities=caps) as host:
        result = await host.turns.run(request("clean up"))
    assert [e.status for e in result.effects] == ["invalid"]
    assert cleanup.ran == []
    [assistant] = [m for m in model.requests[-1].messages if m.tool_calls]
    assert assistant.tool_calls[0].arguments == malformed


def test_malformed_arguments_keep_their_type_through_the_transcript() -> None:
    arguments = MalformedArguments("[true]", "are a JSON array, not an object")
    message = ModelMessage("assistant", "", (ToolCall("c1", "t", arguments),))
    stored = json.loads(json.dumps(message.to_json()))
    [call] = ModelMessage.from_json("assistant", stored).tool_calls
    assert isinstance(call.arguments, MalformedArguments)
    assert call.arguments == arguments
    assert (call.arguments.text, call.arguments.reason) == ("[true]", arguments.reason)


def test_malformed_arguments_never_equal_a_well_formed_object() -> None:
    arguments = MalformedArguments("x", "are not valid JSON")
    assert dict(arguments) == {"_raw": "x"}  # the form sent back to the model
    plain = FrozenMap({"_raw": "x"})
    assert arguments != plain
    assert plain != arguments
    assert arguments != {"_raw": "x"}
    assert ToolCall("c1", "t", {"_raw": "x"}) != ToolCall("c1", "t", arguments)


def test_a_bare_raw_mapping_an_older_version_stored_is_read_back_as_it_is() -> None:
    """Older versions stored malformed arguments as ``{"_raw": text}``, as this one stores a
    well-formed call with one ``_raw`` property: read back as the mapping (a stored call
    is only replayed to the model, in the same form either way, never run again)."""
    body = {"tool_calls": [{"call_id": "c1", "name": "t", "arguments": {"_raw": '{"a": '}}]}
    [call] = ModelMessage.from_json("assistant", body).tool_calls
    assert not isinstance(call.arguments, MalformedArguments)
    assert dict(call.arguments) == {"_raw": '{"a": '}
