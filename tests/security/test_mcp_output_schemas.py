"""A server's output schemas are applied by the Host, bounded and off the event loop.

The ``mcp`` SDK would validate each result against the tool's ``outputSchema``
with Python's ``re``, synchronously on the loop: ``^(a+)+$`` and ``"a" * 25 + "!"``
stall every session for seconds (doubling per character), and its ``RuntimeError``
would take the connection down. The Host switches that off, checks each output
schema as it checks input schemas, and fails a non-conforming result alone.

A tool whose output schema fails those checks is left out of the catalog, as one
whose input schema fails them is, and named with its reason where the operator
sees the server's status: offered, it could only be called to be refused.

So is a tool whose entry the Host cannot use at all: an input schema that is no
object schema or is over 64 KiB, a name over 128 characters, no name, an entry the
protocol's schema refuses. The SDK parses a listing page as one piece, and the Host
refused such a tool by failing the listing: one tool took down every other tool of
its server. Each is judged alone; its siblings are listed and run.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.builtins.mcp import McpClientConnector, McpProtocolError
from hostkit.builtins.mcp._render import tool_problem
from hostkit.builtins.process import SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.cli._mcp import print_servers
from hostkit.effects import McpConnection, McpServerDeclaration, ToolOutcome
from hostkit.host import Host
from hostkit.inspect import mcp_server_rows
from hostkit.testing import capabilities
from tests.contract.test_clause_mcp_servers import host_config
from tests.hosts import request
from tests.stalls import longest_stall

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
    async with connected(workspace, era) as opened:
        await opened.list_tools()
        yield opened


@asynccontextmanager
async def connected(workspace: Path, *argv: str) -> AsyncIterator[McpConnection]:
    """A connection to ``output_server.py`` run with ``argv``, not yet listed."""
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(mode="none"),
        url_policy=UrlPolicy(),
        environ=ENV,
    )
    declaration = McpServerDeclaration(
        name="out", transport="stdio", command=(sys.executable, "output_server.py", *argv)
    )
    opened = await connector.connect(declaration)
    try:
        yield opened
    finally:
        await opened.aclose()


def calls(workspace: Path) -> list[str]:
    log = workspace / "calls.log"
    return log.read_text().split() if log.exists() else []


async def call_watching_the_loop(
    connection: McpConnection, tool: str, arguments: dict[str, object]
) -> tuple[ToolOutcome, float]:
    """The outcome, and the longest the event loop was held meanwhile (``longest_stall``)."""
    outcomes: list[ToolOutcome] = []

    async def call() -> None:
        with anyio.fail_after(5):
            outcomes.append(await connection.call_tool(tool, arguments))

    stall = await longest_stall(call())
    return outcomes[0], stall


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
    # 2026-07-28 allows any root, older protocols' schema does not: the Host takes objects.
    "listed": "its output schema is not a JSON object schema",
    "lookahead": "its output schema's pattern '^(?=a)a+$' is not supported",
    "remote": "its output schema refers to 'https://example.com/s.json'",
}
# Each tool of output_server.py whose entry the SDK would refuse as a page (shaped,
# garbled) or the Host failed the listing over (wide), and why.
UNUSABLE = {
    "garbled": "its entry does not fit protocol 20",
    "shaped": "its input schema is not a JSON object schema",
    "wide": "its input schema is over 64 KiB",
}
# The server's tools the Host offers and calls.
USABLE = ("redos", "typed", "bare", "empty", "input_forever")


async def test_a_tool_whose_output_schema_fails_the_hosts_checks_is_listed_refused(
    connection: McpConnection, era: str
) -> None:
    """The connection judges each output schema as it lists the tools, and says why."""
    specs = {spec.name: spec for spec in await connection.list_tools()}
    reasons = {name: spec.refusal for name, spec in specs.items() if spec.refusal is not None}
    assert sorted(reasons) == sorted({**REFUSED, **UNUSABLE})
    for name, reason in REFUSED.items():
        assert (reasons[name] or "").startswith(reason), reasons[name]
        assert len(reasons[name] or "") <= 500
    for usable in USABLE:
        assert specs[usable].refusal is None


@pytest.mark.parametrize(
    ("shape", "failure"),
    [("unlisted", "sent a malformed tool list"), ("many", "lists more than 128 tools")],
)
async def test_a_page_malformed_as_a_page_or_too_many_tools_still_fail_the_listing(
    workspace: Path, era: str, shape: str, failure: str
) -> None:
    """Only one tool's entry is judged alone: a page whose tool array is no array, or
    more tools than the Host takes, fails the server's listing."""
    async with connected(workspace, era, "25", shape) as connection:
        with pytest.raises(McpProtocolError, match=failure):
            await connection.list_tools()


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


async def test_one_tools_unusable_entry_is_listed_refused_and_its_siblings_run(
    connection: McpConnection, workspace: Path, era: str
) -> None:
    """An input schema that is no object schema, one over 64 KiB, an entry the protocol's
    schema refuses: that tool is listed refused with why (the listing no longer fails),
    a direct call of it is refused unsent, and a sibling runs."""
    specs = {spec.name: spec for spec in await connection.list_tools()}
    for name, reason in UNUSABLE.items():
        assert (specs[name].refusal or "").startswith(reason), specs[name].refusal
        outcome = await connection.call_tool(name, {})
        assert outcome.status == "failed"
        assert f"tool {name!r} was not called: {reason}" in (outcome.error or "")
    assert "at annotations" in (specs["garbled"].refusal or ""), "where, never the value"
    assert "read-only" not in (specs["garbled"].refusal or "")
    assert calls(workspace) == [], "nothing was sent to the server"
    right = await connection.call_tool("typed", {"n": 7})
    assert (right.status, right.output) == ("succeeded", {"n": 7})
    assert calls(workspace) == ["typed"]
    assert connection.alive


async def test_a_tool_with_no_usable_name_is_listed_refused_not_the_listing(
    workspace: Path, era: str
) -> None:
    """A name over 128 characters, or none, is that entry's problem alone."""
    async with connected(workspace, era, "25", "entries") as connection:
        specs = await connection.list_tools()
        refused = {spec.name: spec.refusal for spec in specs if spec.refusal is not None}
        (long,) = (name for name in refused if name.startswith("n"))
        assert len(long) <= 128
        assert refused[long] == "its name is over 128 characters"
        assert refused[""] == "it has no name"
        assert sorted(spec.name for spec in specs if spec.refusal is None) == ["typed"]
        right = await connection.call_tool("typed", {"n": 7})
        assert right.status == "succeeded"


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
    left_out = sorted({**REFUSED, **UNUSABLE})
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


async def test_a_tool_whose_entry_is_unusable_is_left_out_named_and_its_sibling_runs(
    tmp_path: Path, era: str
) -> None:
    """Through a Host on the real server: one tool's input schema (no object schema, over
    64 KiB), entry or name no longer fails the server (``failing``, none of its tools
    offered); that tool is left out, named with its reason, and its sibling runs."""
    argv = [sys.executable, "output_server.py", era, "25", "entries"]
    config = host_config(tmp_path, {"out": {"command": argv}}, {"allow": ["*", "mcp.connect:*"]})
    workspace = tmp_path / "ws"
    shutil.copy(SERVER, workspace / "output_server.py")
    model = ScriptedModel([CallTools(("mcp_out_typed", {"n": 7})), Reply("seven")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        with anyio.fail_after(60):
            result = await host.turns.run(request("what is seven?"))
        statuses = await host.store.mcp_servers.mcp_statuses("assistant")
    assert {t.name for t in model.requests[0].tools if t.name.startswith("mcp_")} == {
        "mcp_out_typed"
    }
    assert [e.status for e in result.effects] == ["succeeded"]
    assert calls(workspace) == ["typed"]

    (status,) = statuses
    assert status.state == "connected", status.detail
    assert [row.name for row in status.tools] == ["typed"]
    assert status.detail.startswith(
        "tools left out (no usable name or schema): a tool with no name, nnnnnnnn"
    ), status.detail
    assert ", garbled, shaped, wide; garbled: its entry does not fit protocol 20" in (status.detail)
    assert "; shaped: its input schema is not a JSON object schema" in status.detail
    assert len(status.detail) <= 300


def test_an_input_schema_holding_a_lone_surrogate_makes_its_tool_unusable() -> None:
    """A schema is sent with every request of a turn that offers its tool: a lone
    surrogate in it (a JSON ``"\\ud800"`` escape, valid JSON) failed each one."""
    text = {"type": "string", "description": "caf\ud800"}
    schema = {"type": "object", "properties": {"q": text}}
    assert tool_problem("search", schema, None) == (
        "its input schema holds text that is not valid (a lone surrogate)"
    )
    assert tool_problem("search", {**schema, "properties": {"q": {"type": "string"}}}, None) is None
