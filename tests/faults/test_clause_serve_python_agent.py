"""Clause: ``hostkit serve --agent module:attribute`` serves a Python agent a channel names.

The README's promise, run the very same agent as a service: a channel table
in hostkit.toml names ``calc``, which only ``my_agents.py`` defines. A real
``hostkit serve`` process on loopback takes a signed webhook for that channel
and the Python agent answers it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.faults._serve_proc import HOOK, eventually, hook_event, post_hook, query, serving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENTS = """\
import hostkit

agent = hostkit.Agent(
    "calc", model=hostkit.ScriptedModel([hostkit.Reply("42, said calc")], repeat_last=True)
)
"""
CONFIG = f"""
[host]
database = "{{root}}/hostkit.db"
workspace = "{{root}}/ws"

[channels.{HOOK}]
kind = "webhook"
secret_env = "E2E_HOOK_SECRET"
agent = "calc"
"""


async def test_a_channel_naming_a_python_agent_is_answered_by_it(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENTS)
    config = tmp_path / "hostkit.toml"
    config.write_text(CONFIG.format(root=tmp_path))
    database = tmp_path / "hostkit.db"
    async with (
        serving(config, args=["--agent", "my_agents:agent"], cwd=tmp_path) as served,
        httpx.AsyncClient(timeout=10) as client,
    ):
        answer = await post_hook(client, served.url, hook_event("ev-1", "six times seven?"))
        assert answer.status_code == 200, answer.text

        async def completed() -> bool:
            rows = await query(database, "SELECT state FROM inbox")
            return rows == [("completed",)]

        await eventually(completed, what="the inbound answered")
    turns = await query(database, "SELECT core_id, status FROM turns")
    assert turns == [("calc", "completed")]
