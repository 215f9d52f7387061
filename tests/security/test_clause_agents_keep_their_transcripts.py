"""Clause: two agents of one Host never read each other's transcript by default.

A conversation binds one session, and a session's history is every turn of
it, whichever agent ran it. The CLI keeps agents apart (``terminal`` for the
default agent, ``terminal/<agent>`` for another); ``host.run_turn`` and the
notebook's ``chat`` do the same (``default/<agent>``, ``notebook/<agent>``).
Otherwise what a person told one agent ("my password is swordfish") is in
the prompt of the next agent they talk to, with other instructions and other
tools. A caller that names one conversation for both still shares it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import hostkit.notebook as hn
from hostkit.host import Host, parse_config
from hostkit.testing import Reply, ScriptedModel, capabilities

pytestmark = pytest.mark.anyio

SECRET = "my password is swordfish"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the notebook runs on a kernel's asyncio loop


def two_agents(tmp_path: Path) -> Any:
    agent = {"provider": "test", "memory": False, "policy": {"allow": ["*"]}}
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"alpha": dict(agent), "beta": dict(agent)},
        },
        base_dir=tmp_path,
    )


def prompts(model: ScriptedModel) -> list[str]:
    return [" | ".join(m.content for m in request.messages) for request in model.requests]


async def test_run_turn_gives_each_agent_its_own_conversation(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with Host.open(two_agents(tmp_path), capabilities=capabilities(model)) as host:
        await host.run_turn("alpha", SECRET)
        await host.run_turn("beta", "hi")
        await host.run_turn("alpha", "again")
        await host.run_turn("beta", "shared", conversation="room")
        await host.run_turn("alpha", "in the room", conversation="room")
    alpha_1, beta_1, alpha_2, _, alpha_room = prompts(model)
    assert SECRET in alpha_1
    assert SECRET not in beta_1
    assert SECRET in alpha_2, "an agent still continues its own conversation"
    assert "shared" in alpha_room, "one conversation named for both is still shared"


async def test_notebook_chat_gives_each_agent_its_own_conversation(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    nb = await hn.start(two_agents(tmp_path), capabilities=capabilities(model))
    try:
        first = await nb.chat(SECRET)  # the default agent: alpha, the first configured
        other = await nb.chat("hi", agent="beta")
        back = await nb.chat("again", agent="alpha")
        assert first.session_id == back.session_id
        assert other.session_id != first.session_id
        beta_scope = await nb.scope(agent="beta")
        assert beta_scope.session_id == other.session_id
        assert (await nb.scope()).session_id == first.session_id
        assert (await nb.budget_inspector(agent="beta")).model.session_id == other.session_id
    finally:
        await nb.aclose()
    alpha_1, beta_1, alpha_2 = prompts(model)
    assert SECRET in alpha_1
    assert SECRET not in beta_1
    assert SECRET in alpha_2


async def test_talking_to_another_agent_opens_no_session_for_the_default_one(
    tmp_path: Path,
) -> None:
    """The notebook reads a turn's cancellation token in the conversation the turn ran in:
    a cell that talked to ``beta`` leaves no (empty) session behind for ``alpha``."""
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    nb = await hn.start(two_agents(tmp_path), capabilities=capabilities(model))
    try:
        beta = await nb.chat("hi", agent="beta")
        operator = await nb.host.operator("test", reason="count the sessions")
        sessions = await nb.host.store.inspect.recent_sessions(operator)
    finally:
        await nb.aclose()
    assert [(s.session.session_id, s.turns) for s in sessions] == [(beta.session_id, 1)]
