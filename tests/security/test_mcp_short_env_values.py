"""A declared MCP ``env`` value is masked by one rule in every view: from six characters.

Results mask a held value only from ``MIN_SECRET_CHARS`` (6) characters: a
shorter one cannot be told from ordinary text. The stderr tail a failed
connect quotes once masked from four, so a 4-5 character value looked hidden
there while the server's own results showed it to the model; now both views
follow the same threshold, and docs/effects.md says a shorter value is not
masked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.effects import MIN_SECRET_CHARS
from hostkit.host import Host
from hostkit.testing import capabilities
from tests.contract.test_clause_mcp_servers import host_config
from tests.hosts import request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("value", ["Qz7#k", "Qz7#kW"], ids=["5 chars", "6 chars"])
async def test_a_declared_value_is_masked_alike_in_results_and_the_stderr_tail(
    tmp_path: Path, value: str
) -> None:
    env = {"MCP_TOKEN": value}
    config = host_config(
        tmp_path,
        {
            "up": {"command": [sys.executable, "bad_server.py"], "env": env},
            # Writes a line naming MCP_TOKEN's value to stderr and exits 3.
            "gone": {"command": [sys.executable, "bad_server.py", "exit_at_start"], "env": env},
        },
        {"allow": ["*", "mcp.connect:*"]},
    )
    model = ScriptedModel([CallTools(("mcp_up_echo_env", {"names": ["MCP_TOKEN"]})), Reply("ok")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("which token?"))
        statuses = {s.server: s for s in await host.store.mcp_servers.mcp_statuses("assistant")}
    assert [e.status for e in result.effects] == ["succeeded"]
    seen = [m.content for m in model.requests[-1].messages if m.role == "tool"][-1]
    tail = statuses["gone"].detail
    assert "cannot start: token" in tail, tail
    masked = len(value) >= MIN_SECRET_CHARS
    assert (value not in seen) is masked, seen
    assert (value not in tail) is masked, tail
    if masked:
        assert "[redacted:mcp.up.MCP_TOKEN]" in seen
        assert "[redacted]" in tail
