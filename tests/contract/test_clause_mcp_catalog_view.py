"""Clause: the catalog view shows each tool's real source and each unconnected server's state.

``Host.tool_catalog(agent, session_id=...)`` (and its view-model
``hostkit.inspect.catalog_view``, drawn by the notebook's
``CatalogInspector``) lists the agent's static tools with their provenance
(``builtin:files``, ``module:<name>``), the tools of the session's live MCP
connections (``mcp:<server>``), and one row per declared server the session
holds no connection to, with its last stored state. Policy-denied tools are
not listed; reading the catalog connects nothing. Real Host, real FastMCP
server (``tests/mcp_servers/bad_server.py``) and a server that exits at start.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.errors import InvalidValue
from hostkit.host import Host, HostConfig, parse_config
from hostkit.inspect import CatalogRow, CatalogView, catalog_view
from hostkit.notebook import CatalogInspector
from hostkit.testing import capabilities
from tests.contract.test_clause_effects_tool_provenance import module_with
from tests.contract.test_clause_mcp_servers import (
    SERVER,
    Approver,
    mcp_processes,
    running,
    settle,
)
from tests.hosts import request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BAD = [sys.executable, "bad_server.py"]
POLICY = {
    "allow": ["*"],
    "deny": ["files.write", "mcp.bad.crash", "mcp.connect:blocked"],
    "ask": ["mcp.bad.sleep"],
}


SERVERS = {
    "bad": {"command": BAD},
    "blocked": {"command": BAD},
    "gone": {"command": [*BAD, "exit_at_start"]},
}


@pytest.fixture
def no_orphans() -> Iterator[None]:
    assert mcp_processes() == set(), "an MCP server from an earlier test is still running"
    yield
    assert settle() == set(), "an MCP server outlived its Host"


def host_config(tmp_path: Path, servers: dict[str, Any], **agent: Any) -> HostConfig:
    """One agent declaring ``servers`` (the FastMCP server copied into its workspace)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    shutil.copy(SERVER, workspace / "bad_server.py")
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False, "mcp": servers, **agent}},
        },
        base_dir=tmp_path,
    )


def states(view: CatalogView) -> dict[str, str]:
    return {row.source: row.state for row in view.servers}


async def test_catalog_shows_sources_and_server_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_orphans: None
) -> None:
    module = module_with(tmp_path, monkeypatch, "hk_catalog_notes", "notes.write")
    config = host_config(
        tmp_path,
        SERVERS,
        policy=POLICY,
        builtins=["files.read", "files.write"],
        tool_modules=[module],
    )
    model = ScriptedModel([CallTools(("mcp_bad_add", {"a": 2, "b": 3})), Reply("5")])
    approver = Approver("approve_session")
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=approver
    ) as host:
        before = await catalog_view(host, "assistant")
        assert [(r.effect, r.source, r.state) for r in before.tools] == [
            ("files.read", "builtin:files", "allowed"),
            ("notes.write", f"module:{module}", "allowed"),
        ]
        assert states(before) == {
            "mcp:bad": "never connected",
            "mcp:blocked": "denied",
            "mcp:gone": "never connected",
        }
        assert await running() == set(), "reading the catalog started a server"

        result = await host.turns.run(request("add"))
        assert [e.status for e in result.effects] == ["succeeded"]
        view = await catalog_view(host, "assistant", session_id=result.session_id)
        mcp = {r.effect: r for r in view.tools if r.source.startswith("mcp:")}
        assert set(mcp) == {
            "mcp.bad.add",
            "mcp.bad.echo_env",
            "mcp.bad.fail",
            "mcp.bad.huge",
            "mcp.bad.server_error",
            "mcp.bad.sleep",
            "mcp.bad.whoami",
        }, "the denied mcp.bad.crash is listed, or a tool is missing"
        assert {r.source for r in mcp.values()} == {"mcp:bad"}
        assert (mcp["mcp.bad.add"].provider_name, mcp["mcp.bad.add"].state) == (
            "mcp_bad_add",
            "allowed",
        )
        assert mcp["mcp.bad.add"].description == "Add two integers."
        assert mcp["mcp.bad.sleep"].state == "asks first"
        assert "files.write" not in {r.effect for r in view.tools}
        assert states(view) == {"mcp:blocked": "denied", "mcp:gone": "failing"}
        gone = next(r for r in view.servers if r.source == "mcp:gone")
        assert gone.failing_until is not None
        assert "did not start (exit code 3)" in gone.description

        # Another session (or none) holds no connection: the server is connected elsewhere.
        other = await catalog_view(host, "assistant", session_id="ses_elsewhere")
        assert states(other)["mcp:bad"] == "connected elsewhere"
        assert not [r for r in other.tools if r.source == "mcp:bad"]
        unscoped = await host.tool_catalog("assistant")
        assert unscoped.session_id is None
        assert [t.source for t in unscoped.tools] == ["builtin:files", f"module:{module}"]

        inspector = CatalogInspector(view)
        text = inspector.text()
        lines = [line.split() for line in text.splitlines()]
        assert ["mcp.bad.add", "mcp:bad", "allowed"] in lines
        assert ["mcp.bad.sleep", "mcp:bad", "asks", "first"] in lines
        assert ["files.read", "builtin:files", "allowed"] in lines
        assert "failing until" in text
        assert "<td>mcp.bad.add</td><td>mcp_bad_add</td><td>mcp:bad</td>" in inspector.html()

    async with Host.open(
        config, capabilities=capabilities(ScriptedModel([]), config=config)
    ) as host:
        closed = await catalog_view(host, "assistant", session_id=result.session_id)
    assert states(closed)["mcp:bad"] == "closed", "the live connection did not outlive its Host"


async def test_catalog_of_an_unknown_agent_is_refused(tmp_path: Path) -> None:
    config = host_config(tmp_path, {"bad": {"command": BAD}}, policy={"allow": ["*"]})
    async with Host.open(
        config, capabilities=capabilities(ScriptedModel([]), config=config)
    ) as host:
        with pytest.raises(InvalidValue) as raised:
            await host.tool_catalog("nobody" * 200)
        assert "assistant" in raised.value.message
        assert len(raised.value.message) <= 400
        # The Host is unharmed: the known agent's catalog still reads.
        assert [r.source for r in (await catalog_view(host, "assistant")).servers] == ["mcp:bad"]


def test_catalog_inspector_escapes_what_a_server_wrote() -> None:
    hostile = "<script>alert(1)</script>"
    view = CatalogView(
        "assistant",
        "ses_x",
        1,
        (
            CatalogRow("mcp.evil.run", "mcp_evil_run", "mcp:evil", hostile, "allowed"),
            CatalogRow("", "", "mcp:down", hostile, "failing", failing_until=0.0),
        ),
    )
    html = CatalogInspector(view).html()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
