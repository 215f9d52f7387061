"""Clause: a core grants only what it names, and the MCP review judges the compiled policy.

A tool-name glob whose first segment is a wildcard (``*``, ``m*``, ``*.x``)
or one of the Host's namespaces (``mcp.*``, ``memory.*``) would match the
Host's own effects (an MCP connect, a file write) without naming them, so
``agent.yaml`` refuses it with its line; an MCP server's tools are granted
as ``mcp.<server>.<glob>`` of a declared server. The security diff compares
the effective decisions of the compiled policy (the connect, the rules that
reach the server's tools) and, for stdio servers, the sandbox: a change of
any of them needs the review token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.cores import CoreManifest, effect_policy, load_manifest, mcp_security_diff
from hostkit.errors import ConfigError, PromotionRefused
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_registry, live_of, make_core, manifest_text

pytestmark = pytest.mark.anyio

SERVER = {"docs": {"command": ["docs-server", "--stdio"]}}
BASE: dict[str, Any] = {"id": "notes", "model": "test", "memory": False, "mcp": SERVER}


@pytest.mark.parametrize(
    "rule",
    ["*", "m*", "*.x", "?otes.x", "mcp.*", "mcp.*.*", "mcp.nope.*", "memory.*", "host.files"],
)
def test_a_glob_reaching_the_hosts_effects_is_refused_with_its_line(rule: str) -> None:
    text = manifest_text({**BASE, "capabilities": {"notes.*": "allow", rule: "allow"}})
    line = next(n for n, row in enumerate(text.splitlines(), 1) if row.strip(" '").startswith(rule))
    with pytest.raises(ConfigError) as refused:
        load_manifest(text.encode())
    assert f"agent.yaml line {line}: capabilities.{rule}:" in refused.value.message


def test_server_tool_rules_and_literal_tool_globs_still_work() -> None:
    manifest = load_manifest(
        manifest_text(
            {
                **BASE,
                "capabilities": {
                    "mcp.docs.*": "allow",
                    "mcp.docs.drop_*": "deny",
                    "notes.*": "ask",
                },
            }
        ).encode()
    )
    policy = effect_policy(manifest)
    assert policy.decide("mcp.docs.search") == "allow"
    assert policy.decide("mcp.docs.drop_all") == "deny"
    assert policy.decide("notes.add") == "ask"
    # No rule names the connect, and no glob reaches it or any other Host effect.
    for effect in ("mcp.connect:docs", "files.write", "terminal.run", "memory.store"):
        assert policy.decide(effect) == "deny"


def test_the_diff_compares_effective_decisions_not_rule_text() -> None:
    declared = CoreManifest.model_validate(BASE)
    denied = CoreManifest.model_validate({**BASE, "capabilities": {"mcp.connect:docs": "deny"}})
    # No rule and an explicit deny are the same authority: nothing to review.
    assert mcp_security_diff(declared, denied) == {}
    # A glob that slipped past the schema (an old manifest, a bug) still counts: the diff
    # reads the compiled policy, where "m*" would make the connect asked.
    starred = CoreManifest.model_construct(**{**declared.__dict__, "capabilities": {"m*": "allow"}})
    diff = mcp_security_diff(declared, starred)["servers"]["docs"]
    assert (diff["before"]["connect"], diff["after"]["connect"]) == ("deny", "ask")
    assert diff["after"]["tools"] == {"m*": "allow"}
    assert diff["fields"] == ["connect", "tools"]


async def test_a_tool_rule_change_needs_the_token_and_a_star_never_lands(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest_text(BASE))
    registry = core_registry(tmp_path, store, {"notes": path})
    starred = commit(
        path, {"agent.yaml": manifest_text({**BASE, "capabilities": {"m*": "allow"}})}, "star"
    )
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", starred, actor="ops")
    assert not {g.gate: g for g in refused.value.gates}["manifest"].passed
    assert live_of(path) == first

    tools = commit(
        path,
        {"agent.yaml": manifest_text({**BASE, "capabilities": {"mcp.docs.*": "allow"}})},
        "tools",
    )
    diff = await registry.diff("notes", target=tools)
    docs = diff.security_diff["servers"]["docs"]
    assert list(docs["fields"]) == ["tools"]
    assert (docs["before"]["tools"], docs["after"]["tools"]) == ({}, {"mcp.docs.*": "allow"})
    with pytest.raises(PromotionRefused) as missing:
        await registry.promote("notes", tools, actor="ops")
    assert missing.value.review == diff.review
    assert live_of(path) == first
    event = await registry.promote("notes", tools, actor="ops", review=diff.review)
    assert event.action == "promote"
    assert live_of(path) == tools


async def test_a_sandbox_change_needs_the_token_when_stdio_servers_run(
    tmp_path: Path, store: RuntimeStore
) -> None:
    granted = {**BASE, "capabilities": {"mcp.connect:docs": "ask"}}
    path, first = make_core(tmp_path, "notes", manifest=manifest_text(granted))
    registry = core_registry(tmp_path, store, {"notes": path})
    unsandboxed = commit(
        path, {"agent.yaml": manifest_text({**granted, "sandbox": "none"})}, "none"
    )
    diff = await registry.diff("notes", target=unsandboxed)
    docs = diff.security_diff["servers"]["docs"]
    assert list(docs["fields"]) == ["sandbox"]
    assert (docs["before"]["sandbox"], docs["after"]["sandbox"]) == ("bubblewrap", "none")
    with pytest.raises(PromotionRefused) as missing:
        await registry.promote("notes", unsandboxed, actor="ops")
    assert missing.value.review == diff.review
    assert live_of(path) == first

    # Only HTTP servers: the sandbox isolates no server, so there is nothing to review.
    http = {**granted, "mcp": {"docs": {"url": "https://docs.example/mcp"}}}
    plain = CoreManifest.model_validate(http)
    assert mcp_security_diff(plain, plain.model_copy(update={"sandbox": "none"})) == {}
