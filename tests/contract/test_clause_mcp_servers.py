"""MCP servers through a real Host: the gate, reuse, eviction and no orphans, on real servers.

Clauses (issue 14): connecting is its own effect, gated by capability and
approval **before** any process is spawned (checked with psutil while the
approver is being asked); a later call uses the connection-bound entry;
connections are session-scoped and reused across turns; a declaration
change evicts the stale connection; Host close and a cancelled turn leave no
process behind; MCP results go through the same views (a crash mid-call is
``indeterminate``, a hang ``timed_out``, an error ``failed``). Servers:
``mcp-server-time`` and ``mcp-server-git`` from PyPI, and the FastMCP
servers of ``tests/mcp_servers``.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import hostkit.notebook as hn
from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import capabilities
from tests.hosts import request
from tests.support import git_repository

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = Path(__file__).parent.parent / "mcp_servers" / "bad_server.py"
TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def mcp_processes() -> set[int]:
    """This test process's descendants that run an MCP server (sandboxed or not)."""
    found: set[int] = set()
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "mcp_server_" in line or "bad_server.py" in line:
            found.add(child.pid)
    return found


def settle(deadline_s: float = 10.0) -> set[int]:
    """The MCP processes still alive after giving a closing tree time to go."""
    deadline = time.monotonic() + deadline_s
    while mcp_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mcp_processes()


async def running() -> set[int]:
    return await anyio.to_thread.run_sync(mcp_processes)


async def until(check: Any, deadline_s: float = 15.0) -> bool:
    """Poll ``check`` (off the event loop) until it is true or the deadline passes."""
    for _ in range(int(deadline_s / 0.05)):
        if await anyio.to_thread.run_sync(check):
            return True
        await anyio.sleep(0.05)
    return False


@pytest.fixture
def no_orphans() -> Iterator[None]:
    # An earlier test's closing tree may still be going on a loaded machine: given the
    # same time to go as at the end of a test, it must be gone before this one starts.
    assert settle() == set(), "an MCP server from an earlier test is still running"
    yield
    assert settle() == set(), "an MCP server outlived its Host"


class Approver:
    """Answers every prompt, recording what was running while it was asked."""

    def __init__(self, decision: ApprovalDecision = "approve_once") -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []
        self.running_when_asked: list[set[int]] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(request)
        self.running_when_asked.append(await running())
        return self.decision


def host_config(
    tmp_path: Path, servers: Mapping[str, Any], policy: Mapping[str, Any] | None = None
) -> HostConfig:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    shutil.copy(SERVER, workspace / "bad_server.py")
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": dict(policy or {"allow": ["*"]}),
                    "mcp": dict(servers),
                }
            },
        },
        base_dir=tmp_path,
    )


def opened(config: HostConfig, model: ScriptedModel, approver: Approver) -> Any:
    return Host.open(config, capabilities=capabilities(model, config=config), approver=approver)


async def test_clause_connect_gated_before_any_process(tmp_path: Path, no_orphans: None) -> None:
    config = host_config(tmp_path, {"time": {"command": TIME}})
    ask = CallTools(("mcp_time_get_current_time", {"timezone": "UTC"}))
    model = ScriptedModel([ask, Reply("no clock"), ask, Reply("it is now")])
    approver = Approver("deny")
    async with opened(config, model, approver) as host:
        denied = await host.turns.run(request("what time is it?"))
        assert [a.effect for a in approver.seen] == ["mcp.connect:time"]
        assert approver.running_when_asked == [set()], "a server ran before its approval"
        assert await running() == set()
        # Denied: the model never saw the server's tools, so its call is not_found.
        assert [t.name for t in model.requests[0].tools] == []
        assert [e.status for e in denied.effects] == ["not_found"]

        approver.decision = "approve_session"
        result = await host.turns.run(request("and now?"))
        assert approver.running_when_asked[-1] == set()
        assert "mcp_time_get_current_time" in [t.name for t in model.requests[-2].tools]
        assert [(e.effect, e.status) for e in result.effects] == [
            ("mcp.time.get_current_time", "succeeded")
        ]
        tool_text = [m.content for m in model.requests[-1].messages if m.role == "tool"][-1]
        assert '"timezone": "UTC"' in tool_text or '"timezone":"UTC"' in tool_text
        assert len(await running()) >= 1
        statuses = await host.store.mcp_servers.mcp_statuses("assistant")
        assert [(s.server, s.state) for s in statuses] == [("time", "connected")]
        assert "mcp.time.get_current_time" in [t.effect for t in statuses[0].tools]
    statuses_after = await reopened_statuses(config)
    assert [(s.server, s.state) for s in statuses_after] == [("time", "closed")]


async def reopened_statuses(config: HostConfig) -> Any:
    async with Host.open(config, capabilities=capabilities(ScriptedModel([]))) as host:
        return await host.store.mcp_servers.mcp_statuses("assistant")


async def test_clause_connection_reused_then_evicted_on_declaration_change(
    tmp_path: Path, no_orphans: None
) -> None:
    config = host_config(tmp_path, {"bad": {"command": [sys.executable, "bad_server.py"]}})
    model = ScriptedModel([CallTools(("mcp_bad_add", {"a": 2, "b": 3})), Reply("5")])
    approver = Approver("approve_session")
    async with opened(config, model, approver) as host:
        first = await host.turns.run(request("add"))
        assert [e.status for e in first.effects] == ["succeeded"]
        started = await running()
        model._position = 0
        second = await host.turns.run(request("add again"))
        assert [e.status for e in second.effects] == ["succeeded"]
        assert await running() == started, "a second turn of the session restarted the server"
        assert len(approver.seen) == 1

        changed = host_config(
            tmp_path,
            {"bad": {"command": [sys.executable, "bad_server.py"], "env": {"MODE": "b"}}},
        )
        await host.apply_config(changed, capabilities=capabilities(model, config=changed))
        # The old declaration's process is gone as soon as the config applied.
        assert await until(lambda: not mcp_processes() & started)
        model._position = 0
        third = await host.turns.run(request("add once more"))
        assert [e.status for e in third.effects] == ["succeeded"]
        assert await running() - started, "the changed declaration did not start a new server"


async def test_clause_outcomes_of_failing_servers(tmp_path: Path, no_orphans: None) -> None:
    config = host_config(
        tmp_path,
        {
            "bad": {
                "command": [sys.executable, "bad_server.py"],
                "call_timeout_seconds": 1,
            },
            "gone": {"command": [sys.executable, "bad_server.py", "exit_at_start"]},
        },
    )
    # A call that times out, breaks the stream or kills the server leaves its connection
    # unusable: each such call ends a turn, and the next turn reconnects.
    model = ScriptedModel(
        [
            CallTools(("mcp_bad_fail", {"reason": "disk on fire"})),
            CallTools(("mcp_bad_sleep", {"seconds": 30})),
            Reply("slow"),
            CallTools(("mcp_bad_huge", {"megabytes": 10})),
            Reply("big"),
            CallTools(("mcp_bad_crash", {})),
            Reply("gone"),
            CallTools(("mcp_bad_add", {"a": 1, "b": 1})),
            Reply("2"),
        ]
    )
    approver = Approver("approve_session")
    async with opened(config, model, approver) as host:
        results = [await host.turns.run(request(f"try {n}")) for n in range(4)]
        statuses = {s.server: s for s in await host.store.mcp_servers.mcp_statuses()}
    effects = [effect for result in results for effect in result.effects]
    assert [e.status for e in effects] == [
        "failed",
        "timed_out",
        "failed",
        "indeterminate",
        "succeeded",
    ]
    assert "disk on fire" in effects[0].summary
    assert "4 MiB" in effects[2].summary
    assert not any(e.summary.endswith("null") for e in effects[:4]), "no output is not null"
    assert len(approver.seen) == 2, "reconnecting in the same session asks again only per server"
    assert statuses["gone"].state == "failing"
    assert statuses["gone"].failing_until is not None
    assert statuses["bad"].state == "connected"


async def test_clause_cancelled_turn_and_close_leave_no_process(
    tmp_path: Path, no_orphans: None
) -> None:
    config = host_config(tmp_path, {"bad": {"command": [sys.executable, "bad_server.py"]}})
    model = ScriptedModel([CallTools(("mcp_bad_sleep", {"seconds": 60})), Reply("late")])
    approver = Approver("approve_session")
    async with opened(config, model, approver) as host:
        with anyio.move_on_after(8):
            async with anyio.create_task_group() as group:

                async def run() -> None:
                    await host.turns.run(request("sleep"))

                group.start_soon(run)
                # Connected and discovered: the turn is in its call now.
                assert await until(lambda: host.mcp.connections())
                await anyio.sleep(0.5)
                group.cancel_scope.cancel()
        assert await running(), "the server should still be connected to its session"
    # Host close ends every server; no_orphans checks none outlived it.


async def test_clause_git_server_through_the_host(tmp_path: Path, no_orphans: None) -> None:
    repo = await anyio.to_thread.run_sync(
        lambda: git_repository(
            tmp_path / "ws" / "repo", message="seed", files={"notes.md": "one\n"}
        )
    )
    config = host_config(
        tmp_path,
        {"git": {"command": [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]}},
        policy={"allow": ["*", "mcp.connect:git"], "ask": ["mcp.git.git_commit"]},
    )
    model = ScriptedModel(
        [CallTools(("mcp_git_git_log", {"repo_path": str(repo)})), Reply("one commit")]
    )
    approver = Approver()
    async with opened(config, model, approver) as host:
        result = await host.turns.run(request("show the log"))
    assert approver.seen == [], "an explicit allow rule for the connect asks nobody"
    assert [(e.effect, e.status) for e in result.effects] == [("mcp.git.git_log", "succeeded")]
    assert "seed" in [m.content for m in model.requests[-1].messages if m.role == "tool"][-1]


async def test_clause_an_mcp_call_approval_answered_by_another_host_runs_once(
    tmp_path: Path, no_orphans: None
) -> None:
    """A durable approval of an MCP call, answered from a Host that never connected: the
    answer is accepted, the continuation reconnects, checks the tool is still the one
    asked about, and runs it once."""
    config = host_config(
        tmp_path,
        {"bad": {"command": [sys.executable, "bad_server.py"]}},
        policy={"allow": ["*", "mcp.connect:bad"], "ask": ["mcp.bad.add"]},
    )
    model = ScriptedModel([CallTools(("mcp_bad_add", {"a": 20, "b": 22})), Reply("42")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as first:
        paused = await first.turns.run(request("add"))
        assert paused.outcome == "needs_user"
        approval_id = paused.pending_approval
        assert approval_id is not None
    assert await running() == set()
    async with Host.open(config, capabilities=capabilities(model, config=config)) as second:
        operator = await second.operator("ops", reason="approve the MCP call")
        done = await second.approvals.answer(approval_id, "approve_once", by=operator)
        assert done.outcome == "completed"
        assert [(e.effect, e.status) for e in done.effects] == [("mcp.bad.add", "succeeded")]
        tool_text = [m.content for m in model.requests[-1].messages if m.role == "tool"][-1]
        assert "42" in tool_text
        approval = await second.approvals.get(operator, approval_id)
        assert approval.status == "executed"


async def test_clause_a_missing_server_is_announced_to_the_turn(
    tmp_path: Path, no_orphans: None
) -> None:
    """A declared server that gives the turn no tools is an ``mcp.unavailable`` event with
    its state and bounded reason (what `hostkit run` prints), before the model is asked."""
    config = host_config(
        tmp_path,
        {"gone": {"command": [sys.executable, "bad_server.py", "exit_at_start"]}},
        policy={"allow": ["*", "mcp.connect:gone"]},
    )
    model = ScriptedModel([Reply("no tools today")])
    async with opened(config, model, Approver()) as host:
        seen: list[tuple[str, dict[str, Any]]] = []
        async with host.events.subscribe(lambda event: True) as events:
            result = await host.turns.run(request("hello"))
            while True:
                try:
                    event = events.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
                seen.append((event.kind, dict(event.data)))
    assert result.outcome == "completed"
    kinds = [kind for kind, _ in seen]
    assert kinds.index("mcp.unavailable") < kinds.index("provider.started")
    data = next(data for kind, data in seen if kind == "mcp.unavailable")
    assert data["server"] == "gone"
    assert data["state"] == "failing"
    assert "exit code 3" in data["detail"]
    assert data["failing_until"] > 0


async def test_clause_the_notebook_panel_says_a_server_is_unavailable(
    tmp_path: Path, no_orphans: None
) -> None:
    config = host_config(
        tmp_path,
        {"gone": {"command": [sys.executable, "bad_server.py", "exit_at_start"]}},
        policy={"allow": ["*", "mcp.connect:gone"]},
    )
    model = ScriptedModel([Reply("no tools today")])
    nb = await hn.start(config, capabilities=capabilities(model, config=config))
    try:
        view = nb.chat("hello")
        result = await view
        assert result.outcome == "completed"
        assert "• MCP server gone unavailable:" in view.text()
        assert "exit code 3" in view.text()
    finally:
        await nb.aclose()
