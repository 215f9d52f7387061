"""A file name that is not valid UTF-8 never makes a session unusable.

``scandir`` hands such a name to Python with lone surrogates, which no JSON
encoder, provider SDK or SQLite text column accepts. ``files.list`` shows it
escaped (``\\xNN``) with a visible marker; ``files.*`` refuse a path holding
lone surrogates (``invalid_path``), and the escaped spelling names a
different file (``not_found``): no files tool opens such a name. Then a real
OpenAI-compatible adapter on a loopback server runs a turn that lists the
directory and a later turn, and every request body it sent is valid JSON in
UTF-8; the store kept the transcript.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

# Imported here: the Host imports the SDK adapters lazily, on the event loop, and
# importing an SDK reads files, which blockbuster would flag inside the turn.
import hostkit.adapters.anthropic_messages
import hostkit.adapters.openai_chat  # noqa: F401
from hostkit.builtins.files import WorkspaceError, WorkspaceScope
from hostkit.host import Host, parse_config
from tests.hosts import request
from tests.wire import Reply, WireServer, serve_wire, sse_reply
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

RAW_NAME = b"report-\xff\xfe.txt"
SHOWN = "report-\\xff\\xfe.txt"
MARK = "[name not UTF-8, shown escaped; files tools cannot open it]"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    fd = os.open(os.fsencode(root) + b"/" + RAW_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"quarterly numbers\n")
    os.close(fd)
    (root / "plain.txt").write_text("plain\n")
    return root


async def test_list_escapes_the_name_and_marks_it(workspace: Path) -> None:
    listing = await WorkspaceScope(workspace).list(".")
    odd = next(entry for entry in listing.entries if entry.escaped)
    assert odd.name == SHOWN
    assert odd.name.encode("utf-8")  # safe at the boundary
    assert [e.name for e in listing.entries if not e.escaped] == ["plain.txt"]
    assert listing.total == 2


@pytest.mark.parametrize("op", ["read", "write", "edit"])
async def test_the_raw_name_is_refused_and_the_escaped_spelling_is_another_file(
    workspace: Path, op: str
) -> None:
    scope = WorkspaceScope(workspace)
    surrogate = os.fsdecode(RAW_NAME)

    async def attempt(path: str) -> Any:
        if op == "read":
            return await scope.read(path)
        if op == "write":
            return await scope.write(path, "new\n")
        return await scope.edit(path, "quarterly", "annual")

    with pytest.raises(WorkspaceError) as caught:
        await attempt(surrogate)
    assert caught.value.reason == "invalid_path"
    if op != "write":
        with pytest.raises(WorkspaceError) as missing:
            await attempt(SHOWN)
        assert missing.value.reason == "not_found"
    raw = await anyio.Path(os.fsdecode(os.fsencode(workspace) + b"/" + RAW_NAME)).read_bytes()
    assert raw == b"quarterly numbers\n"


def streamed(*payloads: dict[str, Any]) -> Reply:
    return sse_reply(
        wire_openai.sse(
            [
                wire_openai.chunk(role="assistant"),
                *payloads,
                wire_openai.chunk(usage_block=wire_openai.usage(30, 8)),
            ]
        )
    )


def list_call() -> Reply:
    delta = wire_openai.tool_call_delta(
        0, call_id="call_ls", name="files_list", arguments=json.dumps({"path": "."})
    )
    return streamed(
        wire_openai.chunk(tool_calls=[delta]), wire_openai.chunk(finish_reason="tool_calls")
    )


def answer(text: str) -> Reply:
    return streamed(wire_openai.chunk(content=text), wire_openai.chunk(finish_reason="stop"))


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


async def test_later_turns_with_a_real_provider_still_work(
    tmp_path: Path, workspace: Path, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTKIT_TEST_KEY", "sk-test")
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {
                "real": {
                    "kind": "openai",
                    "base_url": f"{wire.base_url}/v1",
                    "model": "m",
                    "api_key_env": "HOSTKIT_TEST_KEY",
                }
            },
            "agents": {"assistant": {"provider": "real", "builtins": ["files.list"]}},
        },
        base_dir=tmp_path,
    )
    wire.script(list_call(), answer("There is a report."), answer("Still here."))
    async with Host.open(config) as host:
        first = await host.turns.run(request("what is here?"))
        second = await host.turns.run(request("and now?"))
        rows = await host.store.read(
            lambda c: c.execute(
                "SELECT content FROM messages WHERE session_id = ?", [first.session_id]
            ).fetchall()
        )
    assert (first.outcome, second.outcome) == ("completed", "completed"), first.error
    assert [e.status for e in first.effects] == ["succeeded"]
    bodies = [seen.body for seen in wire.requests]
    # The server records undecodable or non-JSON bodies as raw bytes: each must be a dict.
    assert len(bodies) == 3
    assert all(isinstance(body, dict) for body in bodies)
    tool_views = [
        m["content"] for body in bodies[1:] for m in body["messages"] if m["role"] == "tool"
    ]
    assert tool_views
    for view in tool_views:
        assert f"{SHOWN} (18 bytes) {MARK}" in json.loads(view)["entries"]
    # The store kept the transcript: the tool message is stored as the provider saw it.
    stored = [json.loads(row[0]).get("text") for row in rows]
    assert tool_views[0] in stored
