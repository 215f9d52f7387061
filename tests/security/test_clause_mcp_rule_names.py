"""Clause: a policy rule names an MCP tool as its server does, and still matches it.

An MCP tool becomes the effect ``mcp.<server>.<tool>`` with its name spelled
as effect names are: lower-cased, every other character an underscore
(``Delete-Repo`` → ``delete_repo``, ``deleteRepo`` → ``deleterepo``). A rule
written with the server's own spelling (``ask = ["mcp.git.Delete-Repo"]``)
is spelled the same way when the policy is built, its wildcards and bracket
expressions kept: otherwise it would match nothing, and the tool it was
written to guard would run unasked. A rule for a server's tools that matches
none of them, but is one typo from one, is named in the server's discovery
and logged.
"""

from __future__ import annotations

import logging

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.effects import EffectPolicy, McpServer, mcp_effect_name
from hostkit.types import EffectRequest
from tests.contract.test_clause_mcp_connections import RecordingConnector, declared, rig

pytestmark = pytest.mark.anyio

TOOLS = ("deleteRepo", "Delete-Repo", "delete.repo", "DELETE REPO")
# Each tool's name as a rule may spell it: as the server does, or in another case.
PAIRS = [
    (tool, spelling)
    for tool in TOOLS
    for spelling in sorted({tool, tool.lower(), tool.upper(), tool.swapcase()})
]


def test_a_tool_name_is_spelled_as_effect_names_are() -> None:
    assert [mcp_effect_name("git", tool) for tool in TOOLS] == [
        "mcp.git.deleterepo",
        "mcp.git.delete_repo",
        "mcp.git.delete_repo",
        "mcp.git.delete_repo",
    ]


def test_rules_for_mcp_tools_are_spelled_as_effects_and_others_are_kept() -> None:
    policy = EffectPolicy(
        allow=("*", "mcp.connect:git", "mcp.git.getHTTPStatus"),
        ask=("mcp.git.Delete-Repo", "mcp.*.Push.Force*", "files.write"),
        deny=("mcp.git.Drop Table", "mcp.git.[A-Z]x?"),
    )
    assert policy.allow == ("*", "mcp.connect:git", "mcp.git.gethttpstatus")
    assert policy.ask == ("mcp.git.delete_repo", "mcp.*.push_force*", "files.write")
    # A bracket expression is kept whole (lower-cased, as the names it matches are).
    assert policy.deny == ("mcp.git.drop_table", "mcp.git.[a-z]x?")


@pytest.mark.parametrize(("tool", "rule"), PAIRS)
async def test_an_ask_rule_in_the_servers_spelling_asks_before_the_tool_runs(
    authority: AuthorityResolver, tool: str, rule: str
) -> None:
    connector = RecordingConnector(tools=(tool,))
    policy = EffectPolicy(allow=("*", "mcp.connect:git"), ask=(f"mcp.git.{rule}",))
    r = await rig(
        authority, [McpServer(declared("git"), connector)], decision="deny", policy=policy
    )
    catalog, context = await r.turn()
    effect = mcp_effect_name("git", tool)
    assert effect is not None
    ref = catalog.resolve(effect.replace(".", "_"))
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert [a.effect for a in r.approver.seen] == [effect]
    assert result.status == "denied"
    assert connector.calls == [], "the tool ran although its rule says ask"
    await r.finish()


@pytest.mark.parametrize(
    "rule", ["Delete-Repo", "delete-repo", "DELETE_REPO", "delete_*", "[a-d]*", "*repo"]
)
async def test_a_deny_rule_in_the_servers_spelling_or_a_glob_keeps_the_tool_out(
    authority: AuthorityResolver, rule: str
) -> None:
    connector = RecordingConnector(tools=("Delete-Repo", "get_time"))
    policy = EffectPolicy(allow=("*", "mcp.connect:git"), deny=(f"mcp.git.{rule}",))
    r = await rig(authority, [McpServer(declared("git"), connector)], policy=policy)
    catalog, _ = await r.turn()
    assert [d.name for d in catalog.definitions] == ["mcp_git_get_time"]
    await r.finish()


async def test_a_rule_one_typo_from_a_tool_is_named_in_the_discovery_and_logged(
    authority: AuthorityResolver, caplog: pytest.LogCaptureFixture
) -> None:
    connector = RecordingConnector(tools=("Delete-Repo", "get_time"))
    policy = EffectPolicy(
        allow=("*", "mcp.connect:git"),
        ask=("mcp.git.delete_rep", "mcp.git.nothing_like_it", "mcp.other.delete_rep"),
    )
    r = await rig(authority, [McpServer(declared("git"), connector)], policy=policy)
    with caplog.at_level(logging.WARNING):
        catalog, _ = await r.turn()
    (discovery,) = catalog.discoveries
    assert "ask rule mcp.git.delete_rep matches none of its tools" in discovery.detail
    assert "did you mean mcp.git.delete_repo?" in discovery.detail
    assert "nothing_like_it" not in discovery.detail  # far from every tool: kept quiet
    assert "mcp.other" not in discovery.detail  # another server's rule
    warned = [rec.getMessage() for rec in caplog.records if "delete_rep " in rec.getMessage()]
    assert len(warned) == 1
    # A later turn reusing the connection says it in the discovery, and logs nothing more.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again, _ = await r.turn()
    assert "did you mean mcp.git.delete_repo?" in again.discoveries[0].detail
    assert not [rec for rec in caplog.records if "delete_rep " in rec.getMessage()]
    await r.finish()


@pytest.mark.parametrize("rule", ["mcp.call:git", "mcp.call:*"])
async def test_ask_on_a_servers_call_grant_asks_before_each_of_its_tools(
    authority: AuthorityResolver, rule: str
) -> None:
    """``ask = ["mcp.call:git"]`` is no rule read and then ignored: every tool of ``git``
    runs only after an approval, as ``ask = ["mcp.git.*"]`` would."""
    connector = RecordingConnector(tools=("git_commit",))
    policy = EffectPolicy(allow=("*", "mcp.connect:git"), ask=(rule,))
    r = await rig(
        authority, [McpServer(declared("git"), connector)], decision="deny", policy=policy
    )
    catalog, context = await r.turn()
    ref = catalog.resolve("mcp_git_git_commit")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert [a.effect for a in r.approver.seen] == ["mcp.git.git_commit"]
    assert result.status == "denied"
    assert connector.calls == [], "the tool ran although its server's calls are asked"
    await r.finish()
