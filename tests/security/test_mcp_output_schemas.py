"""A server's output schemas are applied by the Host, bounded and off the event loop.

The ``mcp`` SDK would validate each result against the tool's ``outputSchema``
with Python's ``re``, synchronously on the loop: ``^(a+)+$`` and ``"a" * 25 + "!"``
stall every session for seconds (doubling per character), and its ``RuntimeError``
would take the connection down. The Host switches that off, checks each output
schema as it checks input schemas, and fails a non-conforming result alone.
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

from hostkit.builtins.mcp import McpClientConnector
from hostkit.builtins.process import SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import McpConnection, McpServerDeclaration, ToolOutcome

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


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        ("chain", "expands to more than 2,000 subschemas"),
        ("lookahead", "is not supported"),
    ],
)
async def test_a_tool_whose_output_schema_fails_the_hosts_checks_is_never_called(
    connection: McpConnection, workspace: Path, tool: str, problem: str
) -> None:
    outcome, stall = await call_watching_the_loop(connection, tool, {})
    assert outcome.status == "failed"
    assert "was not called" in (outcome.error or "")
    assert problem in (outcome.error or "")
    assert "output schema" in (outcome.error or "")
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
