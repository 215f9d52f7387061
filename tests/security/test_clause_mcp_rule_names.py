"""Clause: a policy rule names an MCP tool by its effect name; the server's spelling is refused.

An MCP tool becomes the effect ``mcp.<server>.<tool>`` with its name spelled
as effect names are: lower-cased, every other character an underscore
(``Delete-Repo`` → ``delete_repo``, ``deleteRepo`` → ``deleterepo``). A rule
is taken exactly as written: one in the server's own spelling
(``ask = ["mcp.git.Delete-Repo"]``), which no effect name can match, is a
``ConfigError`` naming the rule and the effect spelling to write instead
(``mcp.git.delete_repo``), whether it names the server or not
(``mcp.*Delete*``). A rule for a server's tools
that matches none of them, but is one typo from one, is named in the
server's discovery and logged.
"""

from __future__ import annotations

import logging

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.effects import EffectPolicy, McpServer, mcp_effect_name
from hostkit.errors import ConfigError
from hostkit.types import EffectRequest
from tests.contract.test_clause_mcp_connections import RecordingConnector, declared, rig

pytestmark = pytest.mark.anyio

TOOLS = ("deleteRepo", "Delete-Repo", "delete.repo", "DELETE REPO")


def test_a_tool_name_is_spelled_as_effect_names_are() -> None:
    assert [mcp_effect_name("git", tool) for tool in TOOLS] == [
        "mcp.git.deleterepo",
        "mcp.git.delete_repo",
        "mcp.git.delete_repo",
        "mcp.git.delete_repo",
    ]


@pytest.mark.parametrize(
    ("rule", "fixed"),
    [
        ("mcp.git.getHTTPStatus", "mcp.git.gethttpstatus"),
        ("mcp.git.Delete-Repo", "mcp.git.delete_repo"),
        ("mcp.git.delete-repo", "mcp.git.delete_repo"),
        ("mcp.git.DELETE REPO", "mcp.git.delete_repo"),
        ("mcp.git.Drop Table", "mcp.git.drop_table"),
        ("mcp.git.Delete*", "mcp.git.delete*"),
        ("mcp.git.[A-Z]x?", "mcp.git.[a-z]x?"),
        ("mcp.*.Push.Force*", "mcp.*.push_force*"),
        ("mcp.*Delete*", "mcp.*delete*"),
        ("*Delete*", "*delete*"),
        ("mcp.connect:Git", "mcp.connect:git"),
    ],
)
@pytest.mark.parametrize("kind", ["allow", "ask", "deny"])
def test_a_rule_in_the_servers_spelling_is_refused_naming_the_effect_spelling(
    kind: str, rule: str, fixed: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        EffectPolicy(**{kind: (rule,)})
    assert caught.value.key == f"policy.{kind}"
    assert f"the rule {rule!r} can never match: " in str(caught.value)
    assert str(caught.value).endswith(f"; write {fixed!r}")
    # What it says to write is taken as written.
    assert getattr(EffectPolicy(**{kind: (fixed,)}), kind) == (fixed,)


@pytest.mark.parametrize("tool", TOOLS)
async def test_an_ask_rule_in_the_effect_spelling_asks_before_the_tool_runs(
    authority: AuthorityResolver, tool: str
) -> None:
    connector = RecordingConnector(tools=(tool,))
    effect = mcp_effect_name("git", tool)
    assert effect is not None
    policy = EffectPolicy(allow=("*", "mcp.connect:git"), ask=(effect,))
    r = await rig(
        authority, [McpServer(declared("git"), connector)], decision="deny", policy=policy
    )
    catalog, context = await r.turn()
    ref = catalog.resolve(effect.replace(".", "_"))
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert [a.effect for a in r.approver.seen] == [effect]
    assert result.status == "denied"
    assert connector.calls == [], "the tool ran although its rule says ask"
    await r.finish()


@pytest.mark.parametrize("rule", ["delete_repo", "delete_*", "[a-d]*", "*repo"])
async def test_a_deny_rule_in_the_effect_spelling_or_a_glob_keeps_the_tool_out(
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
