"""A server's output schemas are applied by the Host, bounded and off the event loop.

The ``mcp`` SDK would validate each result against the tool's ``outputSchema``
with Python's ``re``, synchronously on the loop: ``^(a+)+$`` and ``"a" * 25 + "!"``
stall every session for seconds (doubling per character), and its ``RuntimeError``
would take the connection down. The Host switches that off, checks each output
schema as it checks input schemas, and fails a non-conforming result alone.

A tool whose output schema fails those checks is left out of the catalog, as one
whose input schema fails them is, and named with its reason where the operator
sees the server's status: offered, it could only be called to be refused.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.builtins.mcp import McpClientConnector
from hostkit.builtins.process import SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.cli._mcp import print_servers
from hostkit.effects import McpConnection, McpServerDeclaration, ToolOutcome
from hostkit.host import Host
from hostkit.inspect import mcp_server_rows
from hostkit.testing import capabilities
from tests.contract.test_clause_mcp_servers import host_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent.parent / "mcp_servers" / "output_server.py"
ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SERVER, root / "output_server.py")
    return root


@pytest.fixture(params=["legacy", "modern"])
def era(request: pytest.FixtureRequest) -> str:
    """The protocol the server speaks: the handshake era, or 2026-07-28 (``server/discover``)."""
    return str(request.param)


@pytest.fixture
async def connection(workspace: Path, era: str) -> AsyncIterator[McpConnection]:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(mode="none"),
        url_policy=UrlPolicy(),
        environ=ENV,
    )
    declaration = McpServerDeclaration(
        name="out", transport="stdio", command=(sys.executable, "output_server.py", era)
    )
    opened = await connector.connect(declaration)
    try:
        await opened.list_tools()
        yield opened
    finally:
        await opened.aclose()


def calls(workspace: Path) -> list[str]:
    log = workspace / "calls.log"
    return log.read_text().split() if log.exists() else []


async def call_watching_the_loop(
    connection: McpConnection, tool: str, arguments: dict[str, object]
) -> tuple[ToolOutcome, float]:
    """The outcome, and the longest the event loop went without running a 10 ms ticker."""
    ticks = [time.monotonic()]

    async def ticker() -> None:
        while True:
            await anyio.sleep(0.01)
            ticks.append(time.monotonic())

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        with anyio.fail_after(5):
            outcome = await connection.call_tool(tool, arguments)
        ticks.append(time.monotonic())
        group.cancel_scope.cancel()
    return outcome, max(b - a for a, b in itertools.pairwise(ticks))


async def test_a_catastrophic_output_pattern_never_stalls_the_loop(
    connection: McpConnection,
) -> None:
    outcome, stall = await call_watching_the_loop(connection, "redos", {})
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s"
    assert outcome.status == "failed"
    assert "does not fit the output schema of 'redos'" in (outcome.error or "")
    assert "pattern" in (outcome.error or "")
    assert "aaaa" not in (outcome.error or ""), "the reason names the rule, not the value"
    assert connection.alive


# Each tool of output_server.py whose output schema the Host refuses, and why.
REFUSED = {
    "chain": "its output schema expands to more than 2,000 subschemas",
    "deep": "its output schema is nested more than 64 levels deep",
    "huge": "its output schema is over 64 KiB",
    "invalid": "its output schema is invalid",
    "lookahead": "its output schema's pattern '^(?=a)a+$' is not supported",
    "remote": "its output schema refers to 'https://example.com/s.json'",
}
# 2026-07-28 allows any root; the Host's bounded validator takes object schemas.
REFUSED_MODERN = {**REFUSED, "listed": "its output schema is not a JSON object schema"}


def refused(era: str) -> dict[str, str]:
    return REFUSED_MODERN if era == "modern" else REFUSED


async def test_a_tool_whose_output_schema_fails_the_hosts_checks_is_listed_refused(
    connection: McpConnection, era: str
) -> None:
    """The connection judges each output schema as it lists the tools, and says why."""
    specs = {spec.name: spec for spec in await connection.list_tools()}
    reasons = {name: spec.refusal for name, spec in specs.items() if spec.refusal is not None}
    assert sorted(reasons) == sorted(refused(era))
    for name, reason in refused(era).items():
        assert (reasons[name] or "").startswith(reason), reasons[name]
        assert len(reasons[name] or "") <= 500
    for usable in ("redos", "typed", "bare", "empty", "input_forever"):
        assert specs[usable].refusal is None


@pytest.mark.parametrize("tool", sorted(REFUSED))
async def test_a_tool_whose_output_schema_fails_the_hosts_checks_is_never_called(
    connection: McpConnection, workspace: Path, tool: str
) -> None:
    """A direct caller (the catalog never offers it) is refused before anything is sent."""
    problem = REFUSED[tool]
    outcome, stall = await call_watching_the_loop(connection, tool, {})
    assert outcome.status == "failed"
    assert "was not called" in (outcome.error or "")
    assert problem in (outcome.error or "")
    assert calls(workspace) == [], "nothing was sent to the server"
    assert stall < 0.5
    assert connection.alive


@pytest.mark.parametrize("era", ["modern"])  # older protocols allow object roots only
async def test_an_output_schema_that_is_no_object_schema_is_refused_unsent(
    connection: McpConnection, workspace: Path
) -> None:
    """2026-07-28 allows any root; the Host's bounded validator takes object schemas."""
    outcome = await connection.call_tool("listed", {})
    assert outcome.status == "failed"
    assert "its output schema is not a JSON object schema" in (outcome.error or "")
    assert calls(workspace) == []


async def test_a_result_that_does_not_fit_fails_alone_and_keeps_the_connection(
    connection: McpConnection, workspace: Path
) -> None:
    wrong = await connection.call_tool("typed", {"n": "seven"})
    assert wrong.status == "failed"
    assert "n: must satisfy type" in (wrong.error or "")
    assert connection.alive
    missing = await connection.call_tool("bare", {})
    assert missing.status == "failed"
    assert "no structured content" in (missing.error or "")
    empty = await connection.call_tool("empty", {})
    assert "the structured content: 'n' is a required property" in (empty.error or "")
    assert connection.alive
    right = await connection.call_tool("typed", {"n": 7})
    assert (right.status, right.output) == ("succeeded", {"n": 7})
    assert calls(workspace) == ["typed", "bare", "empty", "typed"]


@pytest.mark.parametrize("era", ["modern"])  # only a 2026-07-28 client reads input_required
async def test_a_server_that_keeps_asking_for_input_fails_the_call_alone(
    connection: McpConnection,
) -> None:
    with anyio.fail_after(30):
        outcome = await connection.call_tool("input_forever", {})
    assert outcome.status == "failed"
    assert "kept asking for input" in (outcome.error or "")
    assert connection.alive


async def test_a_refused_output_schema_leaves_its_tool_out_named_and_its_siblings_run(
    tmp_path: Path, era: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Through a Host on the real server: the model is never offered a tool whose output
    schema the Host refuses; ``hostkit mcp list`` (the stored status) and the log name it
    with its reason; the server's other tools run."""
    config = host_config(
        tmp_path,
        {"out": {"command": [sys.executable, "output_server.py", era]}},
        {"allow": ["*", "mcp.connect:*"]},
    )
    workspace = tmp_path / "ws"
    shutil.copy(SERVER, workspace / "output_server.py")
    model = ScriptedModel([CallTools(("mcp_out_typed", {"n": 7})), Reply("seven")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        with anyio.fail_after(60):
            result = await host.turns.run(request("what is seven?"))
        statuses = await host.store.mcp_servers.mcp_statuses("assistant")
    offered = {t.name for t in model.requests[0].tools}
    left_out = sorted(refused(era))
    for name in left_out:
        assert f"mcp_out_{name}" not in offered
    assert {"mcp_out_typed", "mcp_out_redos", "mcp_out_bare"} <= offered
    assert [e.status for e in result.effects] == ["succeeded"]
    seen = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert seen == ['{"n": 7}'], seen
    assert calls(workspace) == ["typed"]

    (status,) = statuses
    assert status.state == "connected"
    assert status.detail.startswith(
        "tools left out (no usable name or schema): " + ", ".join(left_out) + "; "
    ), status.detail
    assert f"chain: {REFUSED['chain']}" in status.detail
    assert len(status.detail) <= 300
    assert not {row.name for row in status.tools} & set(left_out)
    out = Console(record=True, width=400)
    print_servers(out, mcp_server_rows(config, statuses))
    assert f"out: tools left out (no usable name or schema): {', '.join(left_out)}" in (
        out.export_text()
    )
    logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(line.startswith("MCP server out: tools left out") for line in logged), logged
