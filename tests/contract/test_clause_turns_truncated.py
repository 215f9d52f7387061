"""A turn whose final answer hit the output limit says so: ``TurnResult.truncated``, stored with
the result, from every adapter's normalised finish reason (OpenAI ``length``, Anthropic
``max_tokens``, a script's ``length``); and ``hostkit run`` prints one line about it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hostkit.errors import ConfigError
from hostkit.host import Host, parse_config
from hostkit.types import Usage
from tests.cli import run_cli_async
from tests.hosts import open_host, request
from tests.wire import openai_chat as wire_openai
from tests.wire.rigs import build_rig
from tests.wire.scenario import Answer
from tests.wire.server import WireServer, serve_wire, sse_reply

pytestmark = pytest.mark.anyio

TRUNCATED_LINE = "truncated: the answer hit the output limit"


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


@pytest.mark.parametrize("kind", ["openai", "anthropic", "scripted"])
@pytest.mark.parametrize("finish", ["length", "stop"])
async def test_truncated_follows_the_final_answers_finish_reason(
    tmp_path: Path, wire: WireServer, kind: str, finish: str
) -> None:
    rig = build_rig(kind, wire=wire, local=None)
    try:
        rig.expect(
            Answer(deltas=("The list goes on: one, two",), finish=finish, usage=Usage(30, 8)),  # type: ignore[arg-type]
            stream=True,
        )
        async with open_host(tmp_path, rig.provider) as host:
            result = await host.turns.run(request("List everything."))
            scope = await host.authority.for_conversation(request().principal)
            state = await host.store.turns.state(scope, result.turn_id)
    finally:
        await rig.aclose()

    assert result.outcome == "completed"
    assert result.truncated is (finish == "length")
    assert state.result is not None
    assert state.result.truncated is result.truncated


@pytest.mark.sqlite_only("the hostkit CLI child opens the project's SQLite file")
async def test_hostkit_run_prints_that_the_answer_was_truncated(
    tmp_path: Path, wire: WireServer
) -> None:
    config = f"""
[host]
database = "state/hostkit.db"

[providers.model]
kind = "openai"
base_url = "{wire.base_url}/v1"
model = "gpt-4o"

[agents.assistant]
provider = "model"
memory = false
"""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    cut = [
        wire_openai.chunk(role="assistant"),
        wire_openai.chunk(content="The list goes on: one, two"),
        wire_openai.chunk(finish_reason="length"),
        wire_openai.chunk(usage_block=wire_openai.usage(20, 5)),
    ]
    whole = [*cut[:2], wire_openai.chunk(finish_reason="stop"), cut[3]]
    wire.script(sse_reply(wire_openai.sse(cut)), sse_reply(wire_openai.sse(whole)))

    outputs = []
    for message in ("List everything.", "Again, briefly."):
        done = await run_cli_async(
            "run",
            message,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200", "OPENAI_API_KEY": "sk-test"},
        )
        assert done.returncode == 0, done.stderr.decode()
        outputs.append(done.stderr.decode())

    assert "outcome: completed" in outputs[0]
    assert TRUNCATED_LINE in outputs[0].splitlines()
    assert TRUNCATED_LINE not in outputs[1]


async def test_a_configured_script_plays_an_answer_cut_at_the_limit(tmp_path: Path) -> None:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {
                "demo": {
                    "kind": "scripted",
                    "script": [
                        {"reply": "cut short", "finish_reason": "length"},
                        {"reply": "whole"},
                    ],
                }
            },
            "agents": {"assistant": {"provider": "demo", "memory": False}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        cut = await host.turns.run(request("First."))
        whole = await host.turns.run(request("Second."))
    assert (cut.text, cut.truncated) == ("cut short", True)
    assert (whole.text, whole.truncated) == ("whole", False)
    with pytest.raises(ConfigError):
        parse_config(
            {
                "providers": {
                    "demo": {"kind": "scripted", "script": [{"reply": "x", "finish_reason": "odd"}]}
                },
                "agents": {"assistant": {"provider": "demo"}},
            },
            base_dir=tmp_path,
        )
