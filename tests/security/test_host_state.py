"""The Host's own state is never inside a workspace, and never reachable from one.

A real Host on a real SQLite file whose operator configured ``workspace =
"."`` — the database, its WAL (written by a real turn), the artifact root
and the config all inside the agent's workspace. Another owner's agent tries
every spelling through ``files.*``; each is ``denied`` and the first owner's
words reach it zero times. The starter layout keeps the state outside.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.host import Host, HostConfig, load_config
from hostkit.host._config import state_overlaps
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest, TurnResult
from tests.hosts import request

pytestmark = pytest.mark.anyio

MARKER = "ALICE-PRIVATE-5f1c9e"
FILES = ["files.read", "files.list", "files.write", "files.edit"]
OVERLAPPING = f"""
[host]
database = "hostkit.db"
workspace = "."

[providers.test]
kind = "scripted"

[agents.assistant]
provider = "test"
memory = false
builtins = {FILES!r}
"""


Plan = list[Sequence[tuple[str, dict[str, Any]]]]


def agent(plan: Plan) -> ScriptedModel:
    """A model that makes the calls queued in ``plan``, then echoes what every tool answered."""

    def step(request: ModelRequest) -> Reply | CallTools:
        if request.messages[-1].role == "tool":
            tools = [m.content for m in request.messages if m.role == "tool"]
            return Reply("seen: " + " | ".join(tools))
        return CallTools(*plan.pop(0)) if plan else Reply("noted")

    return ScriptedModel([step], repeat_last=True)


async def open_overlapping(tmp_path: Path, plan: Plan) -> tuple[Host, HostConfig, ScriptedModel]:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(OVERLAPPING)
    config = await anyio.to_thread.run_sync(load_config, tmp_path / "hostkit.toml")
    model = agent(plan)
    host = await Host.open(config, capabilities=capabilities(model, config=config))
    return host, config, model


def everything_seen(first: TurnResult, second: TurnResult, requests: Sequence[ModelRequest]) -> str:
    """All two turns gave back and all their model was shown (every effect's model view)."""
    shown = [m.content for req in requests for m in req.messages]
    parts = [first.text, second.text, *(repr(e) for e in (*first.effects, *second.effects))]
    return "\n".join([*parts, *shown])


async def test_an_overlapping_workspace_never_yields_another_owners_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan: Plan = []
    with caplog.at_level(logging.WARNING, logger="hostkit.host"):
        host, config, model = await open_overlapping(tmp_path, plan)
    try:
        assert len(host.warnings) == 1
        assert "overlaps the Host's own state (hostkit.db" in host.warnings[0]
        assert host.warnings[0] in caplog.text
        alice = await host.turns.run(request(f"remember {MARKER}", principal="alice"))
        assert alice.outcome == "completed"
        wal = anyio.Path(tmp_path / "hostkit.db-wal")
        # The attack is real: the other owner's words sit in the WAL inside the workspace.
        assert MARKER.encode() in await wal.read_bytes()
        alice_requests = len(model.requests)

        artifacts = anyio.Path(config.artifact_root / "ses_other")
        await artifacts.mkdir(parents=True)
        await (artifacts / "stdout").write_text(f"another run printed {MARKER}\n")
        await anyio.Path(tmp_path / "sub").mkdir()
        await anyio.Path(tmp_path / "sub" / "link-wal").symlink_to("../hostkit.db-wal")
        await anyio.Path(tmp_path / "abs-db").symlink_to(tmp_path / "hostkit.db")
        await anyio.Path(tmp_path / "link-arts").symlink_to(config.artifact_root)
        await anyio.to_thread.run_sync(os.link, tmp_path / "hostkit.db", tmp_path / "sub" / "h.db")
        reads = [
            "hostkit.db",
            "hostkit.db-wal",
            "sub/../hostkit.db-wal",
            "sub/link-wal",
            "abs-db",
            ".hostkit-artifacts/ses_other/stdout",
            "link-arts/ses_other/stdout",
            "sub/h.db",
            "hostkit.toml",
            str(tmp_path / "hostkit.db-wal"),
        ]
        plan.append([("files_read", {"path": path}) for path in reads])
        plan.append(
            [
                ("files_list", {"path": "."}),
                ("files_list", {"path": ".hostkit-artifacts"}),
                ("files_write", {"path": "hostkit.db-journal", "content": "forged"}),
                ("files_edit", {"path": "hostkit.toml", "old": "[host]", "new": "[x]"}),
            ]
        )
        bob = await host.turns.run(request("look around", principal="bob", conversation="b"))
        again = await host.turns.run(request("once more", principal="bob", conversation="b"))
    finally:
        await host.aclose()

    assert bob.outcome == again.outcome == "completed"
    statuses = [e.status for e in bob.effects]
    assert statuses == ["denied"] * len(reads), [(e.status, e.summary) for e in bob.effects]
    assert all("Host's own state" in e.summary for e in bob.effects[:-1])
    assert "absolute paths are refused" in bob.effects[-1].summary
    listed, arts, journal, edit = again.effects
    assert listed.status == "succeeded"
    for hidden in ("hostkit.db", ".hostkit-artifacts", "hostkit.toml"):
        assert hidden not in listed.summary
    assert "sub/" in listed.summary
    assert [arts.status, journal.status, edit.status] == ["denied"] * 3
    assert not await anyio.Path(tmp_path / "hostkit.db-journal").exists()
    assert "[host]" in await anyio.Path(tmp_path / "hostkit.toml").read_text()
    # Cross-owner reads: the first owner's words reached the second owner zero times.
    assert everything_seen(bob, again, model.requests[alice_requests:]).count(MARKER) == 0


async def test_the_default_layout_keeps_state_outside_the_workspace(tmp_path: Path) -> None:
    config_text = OVERLAPPING.replace('workspace = "."\n', "")
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config_text)
    config = await anyio.to_thread.run_sync(load_config, tmp_path / "hostkit.toml")
    assert config.workspace_of("assistant") == tmp_path / "workspace"
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        assert host.warnings == ()
        assert (await host.turns.run(request("hi"))).outcome == "completed"
    workspace = tmp_path / "workspace"
    assert await anyio.Path(workspace).is_dir()
    for state in config.state_paths():
        assert workspace not in state.parents
        assert state != workspace


@pytest.mark.parametrize(
    ("mcp", "warned"),
    [
        # A stdio server's working directory and writable bind is the workspace.
        ('command = ["python3", "server.py"]', True),
        # An HTTP server is reached over the network: the workspace is not its.
        ('url = "https://mcp.example/mcp"', False),
    ],
)
def test_a_stdio_mcp_server_in_a_workspace_over_host_state_is_warned_of(
    tmp_path: Path, mcp: str, warned: bool
) -> None:
    (tmp_path / "hostkit.toml").write_text(
        OVERLAPPING.replace(f"builtins = {FILES!r}\n", "builtins = []\n")
        + f"\n[agents.assistant.mcp.docs]\n{mcp}\n"
    )
    config = load_config(tmp_path / "hostkit.toml")
    lines = state_overlaps(config)
    if warned:
        (line,) = lines
        assert "(agent 'assistant') overlaps the Host's own state (hostkit.db" in line
    else:
        assert lines == ()
