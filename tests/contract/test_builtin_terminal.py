"""terminal.* as configured builtins of a real Host: opt-in, approvals, secrets, Host close."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request
from tests.security.test_process_tree import TREE, TREE_SIZE, Record, survivors, wait_marks

pytestmark = pytest.mark.anyio

TOKEN = "tok-terminal-5b7e9c"


class Approver:
    def __init__(self, decision: ApprovalDecision) -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return self.decision


# The program the operator lets each held secret go to ([secrets.<NAME>] programs).
PRINTENV = shutil.which("printenv") or "/usr/bin/printenv"


def terminal_config(tmp_path: Path, **agent: Any) -> Any:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(workspace),
                "artifacts": str(tmp_path / "artifacts"),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "builtins": ["terminal.run", "terminal.status", "terminal.stop"],
                    **agent,
                }
            },
            # The one program the operator lets each held secret go to.
            "secrets": {name: {"programs": [PRINTENV]} for name in agent.get("secrets", [])},
        },
        base_dir=tmp_path,
    )


def run_call(**arguments: Any) -> CallTools:
    return CallTools(("terminal_run", arguments))


def tool_output(model: ScriptedModel) -> dict[str, Any]:
    (message,) = [m for m in model.requests[-1].messages if m.role == "tool"][-1:]
    text = message.content
    return json.loads(text[text.index("{") :])


async def test_terminal_asks_first_then_runs_in_the_workspace(tmp_path: Path) -> None:
    model = ScriptedModel([run_call(argv=["pwd"]), Reply("done")])
    approver = Approver("approve_once")
    config = terminal_config(tmp_path, policy={"allow": ["*"], "ask": ["terminal.run"]})
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=approver
    ) as host:
        result = await host.turns.run(request("where am I?"))
    assert result.outcome == "completed"
    assert [e.status for e in result.effects] == ["succeeded"]
    assert approver.seen[0].view["arguments"]["argv"] == ("pwd",)
    out = tool_output(model)
    assert out["exit_code"] == 0
    assert out["stdout"]["tail"].strip() == str(tmp_path / "ws")
    # The model sees an artifact reference, never the opaque per-session directory.
    assert str(tmp_path / "artifacts") not in json.dumps(out)


async def test_an_unanswered_terminal_call_spawns_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ws" / "ran"
    model = ScriptedModel([run_call(argv=["touch", "ran"]), Reply("done")])
    config = terminal_config(tmp_path, policy={"allow": ["*"], "ask": ["terminal.*"]})
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("touch it"))
        assert result.outcome == "needs_user"
        assert not marker.exists()
        operator = await host.operator("ops", reason="approve terminal")
        assert result.pending_approval
        done = await host.approvals.answer(result.pending_approval, "approve_once", by=operator)
    assert done.outcome == "completed"
    assert marker.exists()


async def test_a_granted_secret_reaches_the_child_and_never_the_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_DEPLOY_TOKEN", TOKEN)
    model = ScriptedModel(
        [run_call(argv=["printenv", "HK_DEPLOY_TOKEN"], secrets=["HK_DEPLOY_TOKEN"]), Reply("ok")]
    )
    approver = Approver("approve_session")
    config = terminal_config(tmp_path, secrets=["HK_DEPLOY_TOKEN"])
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=approver
    ) as host:
        result = await host.turns.run(request("deploy"))
        rows = await host.store.read(lambda c: c.execute("SELECT content FROM messages").fetchall())
    assert result.outcome == "completed"
    assert [e.status for e in result.effects] == ["succeeded"]
    assert len(approver.seen) == 1  # a secret binding is asked even under "allow"
    out = tool_output(model)
    assert out["stdout"]["tail"].strip() == "[redacted:HK_DEPLOY_TOKEN]"
    # The full streams could hold the value: a secret-bound run keeps no artifact files.
    assert out["stdout"]["artifact"] is None
    leftovers = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file() and p.name != ".key"]
    assert leftovers == []
    assert all(TOKEN not in row[0] for row in rows)
    assert TOKEN not in repr(result)


async def test_an_ungranted_secret_is_denied_before_anyone_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_DEPLOY_TOKEN", TOKEN)
    model = ScriptedModel(
        [run_call(argv=["printenv", "HK_DEPLOY_TOKEN"], secrets=["HK_DEPLOY_TOKEN"]), Reply("ok")]
    )
    approver = Approver("approve_once")
    config = terminal_config(tmp_path)
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=approver
    ) as host:
        result = await host.turns.run(request("deploy"))
    assert [e.status for e in result.effects] == ["denied"]
    assert approver.seen == []


async def test_host_close_ends_every_background_tree(tmp_path: Path, reaper: list[Record]) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    model = ScriptedModel(
        [
            run_call(argv=[sys.executable, "-c", TREE, str(marks)], background=True),
            Reply("started"),
        ]
    )
    # The tree's pid files name host pids: unsandboxed (tests/security/test_escape.py runs
    # the same close with bubblewrap, checked by argv marker).
    config = terminal_config(tmp_path, sandbox="none")
    host = await Host.open(config, capabilities=capabilities(model, config=config))
    try:
        result = await host.turns.run(request("start the tree"))
        assert result.outcome == "completed"
        assert result.effects[0].status == "succeeded"
        records = await wait_marks(marks, TREE_SIZE)
        reaper.extend(records)
        assert len(survivors(records)) == TREE_SIZE
    finally:
        await host.aclose()
    assert survivors(records) == []


async def test_a_background_run_survives_a_configuration_reload(tmp_path: Path) -> None:
    model = ScriptedModel(
        [run_call(argv=["sleep", "30"], background=True), Reply("started")], repeat_last=True
    )
    config = terminal_config(tmp_path)
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        started = await host.turns.run(request("start"))
        assert started.effects[0].status == "succeeded"
        run_id = tool_output(model)["run_id"]
        await host.apply_config(
            config,
            capabilities=capabilities(
                ScriptedModel([CallTools(("terminal_stop", {"run_id": run_id})), Reply("stopped")]),
                config=config,
            ),
        )
        stopped = await host.turns.run(request("stop it"))
    assert [e.status for e in stopped.effects] == ["cancelled"]


async def test_a_sessions_artifacts_stay_in_one_opaque_directory_across_restarts(
    tmp_path: Path,
) -> None:
    config = terminal_config(tmp_path)
    for _ in range(2):
        model = ScriptedModel([run_call(argv=["echo", "hi"]), Reply("ok")])
        async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
            result = await host.turns.run(request("echo"))
        assert result.effects[0].status == "succeeded"
    root = anyio.Path(tmp_path / "artifacts")
    entries = sorted([p.name async for p in root.iterdir()])
    assert len(entries) == 2  # the key and one session directory
    assert ".key" in entries
    key_mode = (await (root / ".key").stat()).st_mode & 0o777
    assert key_mode == 0o600
