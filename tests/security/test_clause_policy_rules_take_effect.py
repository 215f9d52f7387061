"""Clause: a policy rule the operator wrote takes effect exactly as written, or is refused.

Never read and then ignored. Every grant the Host builds (``terminal.network``,
``secret.bind:<NAME>``, ``mcp.connect:<server>``, ``mcp.call:<server>``) goes
through the agent's policy: ``deny`` withholds it, ``ask`` on an MCP server's
calls asks before each of its tools, and ``ask`` on ``terminal.network`` holds
it only where every ``terminal.run`` is asked too (held for every run or none, it
is asked through each run; alone it refuses the configuration). A rule
naming an MCP server the agent does not declare, or a tool as the model sees
it (``mcp_git_git_commit``), is refused naming the rule and the right
spelling; on a reload, the reload is rejected and generation N keeps serving.
An ``ask``/``deny`` rule that is a slip from a namespace (``file.*``, a bare
``files``) is warned about, as a rule one typo from a tool is. A
``url_allow_private`` CIDR with host bits set is refused, not widened.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hostkit.cores import effect_policy, load_manifest
from hostkit.effects import EffectPolicy
from hostkit.errors import ConfigError
from hostkit.host import Host, parse_config
from hostkit.host._defaults import sandbox_policy
from hostkit.host._grants import agent_policy
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

SCRIPTED = {"p": {"kind": "scripted", "script": [{"reply": "x"}]}}
GIT = {"git": {"command": ["/bin/true"]}}


def config(agent: dict[str, Any], tmp_path: Path) -> Any:
    document = {"providers": SCRIPTED, "agents": {"a": {"provider": "p", **agent}}}
    return parse_config(document, base_dir=tmp_path)


def refused(agent: dict[str, Any], tmp_path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        config(agent, tmp_path)
    return caught.value


NETWORK = {"builtins": ["terminal.run", "terminal.network"]}


@pytest.mark.parametrize(
    ("policy", "network"),
    [
        ({}, True),
        ({"deny": ["terminal.network"]}, False),
        ({"deny": ["terminal.*"]}, False),
        ({"allow": ["terminal.run"]}, False),  # no rule allows the grant: not held
    ],
)
def test_the_network_grant_is_held_only_where_the_policy_allows_it(
    tmp_path: Path, policy: dict[str, list[str]], network: bool
) -> None:
    parsed = config({**NETWORK, "policy": policy}, tmp_path)
    assert sandbox_policy(parsed, "a").network is network


def test_asking_for_the_network_grant_alone_is_refused_naming_the_rule(tmp_path: Path) -> None:
    """Nobody could be asked: every run holds the grant or none does."""
    error = refused({**NETWORK, "policy": {"ask": ["terminal.network"]}}, tmp_path)
    assert error.key == "agents.a.policy.ask"
    assert "the rule 'terminal.network' asks for terminal.network" in str(error)
    assert "ask for 'terminal.run' too" in str(error)


@pytest.mark.parametrize("rule", ["terminal.*", "*"])
def test_asking_for_the_network_and_every_run_holds_it_and_asks_each_run(
    tmp_path: Path, rule: str
) -> None:
    """Every run, with the network, is a person's yes: the rule takes effect as written."""
    parsed = config({**NETWORK, "policy": {"ask": [rule]}}, tmp_path)
    assert sandbox_policy(parsed, "a").network is True
    assert agent_policy(parsed.agents["a"]).decide("terminal.run") == "ask"


def test_an_agent_yaml_asking_for_the_network_alone_is_refused_at_its_line() -> None:
    text = b"id: notes\nmodel: s\ncapabilities:\n  terminal.run: allow\n  terminal.network: ask\n"
    with pytest.raises(ConfigError) as caught:
        load_manifest(text)
    assert str(caught.value).startswith("agent.yaml line 5: capabilities.terminal.network: ")


def test_an_agent_yaml_asking_for_the_network_and_each_run_is_accepted() -> None:
    text = b"id: notes\nmodel: s\ncapabilities:\n  terminal.run: ask\n  terminal.network: ask\n"
    assert load_manifest(text).capabilities["terminal.network"] == "ask"


@pytest.mark.parametrize(
    ("rules", "rule"),
    [
        ("ask", "mcp.gti.git_commit"),
        ("deny", "mcp.gti.*"),
        ("deny", "mcp.call:gti"),
        ("allow", "mcp.connect:gti"),
    ],
)
def test_a_rule_naming_an_undeclared_mcp_server_is_refused(
    tmp_path: Path, rules: str, rule: str
) -> None:
    error = refused({"mcp": GIT, "policy": {"allow": ["*"], rules: [rule]}}, tmp_path)
    assert error.key == f"agents.a.policy.{rules}"
    assert f"the rule {rule!r} names the MCP server 'gti'" in str(error)
    assert "(declared: git)" in str(error)


@pytest.mark.parametrize(
    ("rule", "meant"),
    [
        ("mcp_git_git_commit", "mcp.git.git_commit"),
        ("mcp_git_*", "mcp.git.*"),
        ("files_write", "files.write"),
        ("terminal_run", "terminal.run"),
    ],
)
def test_a_rule_spelled_as_the_model_sees_a_tool_is_refused_naming_its_effect_name(
    tmp_path: Path, rule: str, meant: str
) -> None:
    error = refused({"mcp": GIT, "policy": {"ask": [rule]}}, tmp_path)
    assert error.key == "agents.a.policy.ask"
    assert f"did you mean {meant!r}?" in str(error)


def test_globs_that_match_effects_as_written_are_no_provider_spelling(tmp_path: Path) -> None:
    parsed = config(
        {"mcp": GIT, "policy": {"allow": ["*", "mcp.connect:*"], "ask": ["mcp.*.push*"]}},
        tmp_path,
    )
    assert parsed.agents["a"].policy.allow == ("*", "mcp.connect:*")


def test_an_agent_yaml_rule_in_the_models_spelling_is_refused() -> None:
    text = (
        b"id: notes\nmodel: s\nmcp:\n  git:\n    command: [/bin/true]\n"
        b"capabilities:\n  mcp.connect:git: allow\n  mcp_git_git_commit: ask\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_manifest(text)
    assert "did you mean mcp.git.git_commit?" in str(caught.value)
    assert "line 8" in str(caught.value)


def with_agent(tmp_path: Path, keys: str, tables: str) -> Path:
    """``write_config``'s file with ``keys`` in ``[agents.assistant]`` and ``tables`` after."""
    path = write_config(tmp_path, reply="still here", times=2, extra=tables)
    path.write_text(path.read_text().replace("memory = false", f"memory = false\n{keys}"))
    return path


async def test_a_live_edit_with_such_a_rule_is_rejected_and_generation_n_keeps_serving(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, reply="still here", times=2)
    async with Host.open(path) as host:
        with_agent(
            tmp_path,
            'builtins = ["terminal.run", "terminal.network"]',
            '[agents.assistant.policy]\nask = ["terminal.network"]',
        )
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.reason is not None
    assert outcome.reason.startswith("agents.assistant.policy.ask: the rule 'terminal.network'")
    assert (served.generation, served.text) == (1, "still here")


SECRET = "s3cr3t-value-123456"
SECRET_TURN = """
[host]
database = "h.db"
[providers.s]
kind = "scripted"
[[providers.s.script]]
tool = "terminal.run"
arguments = {argv = ["/usr/bin/printenv", "DEPLOY_TOKEN"], secrets = ["DEPLOY_TOKEN"]}
[[providers.s.script]]
reply = "done"
[secrets.DEPLOY_TOKEN]
programs = ["/usr/bin/printenv"]
[agents.a]
provider = "s"
memory = false
sandbox = "none"
builtins = ["terminal.run"]
secrets = ["DEPLOY_TOKEN"]
[agents.a.policy]
allow = ["*"]
DENY
"""


class Approves:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def decide(self, request: Any) -> str:
        self.asked.append(request.effect)
        return "approve_once"


@pytest.mark.parametrize("deny", ['["secret.bind:DEPLOY_TOKEN"]', '["secret.*"]'])
async def test_a_denied_secret_grant_is_never_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deny: str
) -> None:
    monkeypatch.setitem(os.environ, "DEPLOY_TOKEN", SECRET)
    path = tmp_path / "hostkit.toml"
    path.write_text(SECRET_TURN.replace("DENY", f"deny = {deny}"))
    approver = Approves()
    async with Host.open(path, approver=approver) as host:
        assert (await host.run_turn("a", "go")) == "done"
    messages = await _tool_messages(tmp_path / "h.db")
    assert approver.asked == []
    assert messages == ["[denied] no secret.bind:DEPLOY_TOKEN capability for this agent"]


async def _tool_messages(database: Path) -> list[str]:
    with closing(sqlite3.connect(database)) as db, db:
        rows = db.execute("select content from messages where role = 'tool'").fetchall()
    return [json.loads(content)["text"] for (content,) in rows]


@pytest.mark.parametrize(
    ("policy", "held"),
    [
        ({}, ["mcp.call:git", "mcp.connect:git"]),
        ({"deny": ["mcp.call:git"]}, []),
        ({"deny": ["mcp.connect:git"]}, []),
        ({"deny": ["mcp.call:*"]}, []),
    ],
)
async def test_the_mcp_grants_a_generation_pins_go_through_the_policy(
    tmp_path: Path, policy: dict[str, list[str]], held: list[str]
) -> None:
    rules = {"allow": ["*", "mcp.connect:git"], **policy}
    lines = "".join(f"{kind} = {json.dumps(value)}\n" for kind, value in rules.items())
    path = with_agent(
        tmp_path,
        'sandbox = "none"',
        f'[agents.assistant.mcp.git]\ncommand = ["/bin/true"]\n[agents.assistant.policy]\n{lines}',
    )
    async with Host.open(path) as host:
        tools = await host._generation.agent_tools("assistant")
    assert [name for name in tools.effect_names if name.startswith("mcp.")] == held


def test_ask_on_an_mcp_servers_calls_asks_before_each_of_its_tools() -> None:
    policy = EffectPolicy(allow=("*",), ask=("mcp.call:git",), deny=("mcp.call:docs",))
    assert policy.decide_call("mcp.git.git_commit", "mcp.call:git") == "ask"
    assert policy.decide_call("mcp.docs.search", "mcp.call:docs") == "deny"
    assert policy.decide_call("mcp.web.fetch", "mcp.call:web") == "allow"
    assert (
        EffectPolicy(allow=("*",), deny=("mcp.git.*",)).decide_call("mcp.git.x", "mcp.call:git")
        == "deny"
    )


def test_an_agent_yaml_secret_rule_is_part_of_the_compiled_policy() -> None:
    text = (
        b"id: notes\nmodel: s\ncapabilities:\n  terminal.run: allow\n"
        b"  secret.bind:DEPLOY_TOKEN: ask\n  secret.bind:OTHER: deny\n"
    )
    manifest = load_manifest(text)
    policy = effect_policy(manifest)
    assert policy.decide("secret.bind:DEPLOY_TOKEN") == "ask"
    assert policy.decide("secret.bind:OTHER") == "deny"
    assert manifest.secrets() == ("DEPLOY_TOKEN",)


TOOLS = ("files.read", "files.write", "terminal.run", "notes.add")


@pytest.mark.parametrize(
    ("rule", "meant"),
    [
        ("file.*", "files.*"),
        ("fils.write", "files.write"),
        ("files", "files.*"),
        ("file", "files.*"),
        ("termnal.*", "terminal.*"),
        ("notes_add", "notes.add"),
        ("file.write", "files.write"),
    ],
)
def test_a_rule_that_is_a_slip_from_a_namespace_is_a_near_miss(rule: str, meant: str) -> None:
    policy = EffectPolicy(ask=(rule,), deny=(rule,))
    assert policy.near_misses(TOOLS) == (("ask", rule, meant), ("deny", rule, meant))


@pytest.mark.parametrize(
    "rule", ["web.*", "files.delete", "memory", "mcp.git.*", "x*", "shell.*", "files.*"]
)
def test_a_rule_for_something_the_agent_lacks_or_has_is_no_near_miss(rule: str) -> None:
    assert EffectPolicy(ask=(rule,)).near_misses(TOOLS) == ()


async def test_a_typod_glob_is_warned_about_when_the_agents_tools_are_built(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = with_agent(
        tmp_path,
        'builtins = ["files.write"]',
        '[agents.assistant.policy]\nask = ["file.*", "files"]',
    )
    with caplog.at_level(logging.WARNING, logger="hostkit.host"):
        async with Host.open(path) as host:
            await host._generation.agent_tools("assistant")
    said = caplog.text
    assert (
        "the policy's ask rule 'file.*' matches none of its tools; did you mean 'files.*'?" in said
    )
    assert (
        "the policy's ask rule 'files' matches none of its tools; did you mean 'files.*'?" in said
    )


@pytest.mark.parametrize(
    ("entry", "hint"),
    [
        ("10.1.2.3/8", "did you mean 10.0.0.0/8 or 10.1.2.3/32?"),
        ("192.168.7.9/0", "did you mean 0.0.0.0/0 or 192.168.7.9/32?"),
        ("fd00::1/8", "did you mean fd00::/8 or fd00::1/128?"),
    ],
)
def test_a_private_allowance_with_host_bits_is_refused_not_widened(
    tmp_path: Path, entry: str, hint: str
) -> None:
    error = refused({"url_allow_private": [entry]}, tmp_path)
    assert error.key == "agents.a.url_allow_private"
    assert f"{entry!r} has host bits set; {hint}" in str(error)


def test_a_network_or_one_address_is_still_accepted(tmp_path: Path) -> None:
    entries = ["10.0.0.0/8", "10.1.2.3", "10.1.2.3/32", "fd00::/8", "db.internal"]
    parsed = config({"url_allow_private": entries}, tmp_path)
    assert parsed.agents["a"].url_allow_private == tuple(entries)


@pytest.mark.parametrize(("connect", "held"), [("allow", True), ("ask", True), ("deny", False)])
def test_a_cores_mcp_server_brings_its_call_grant_with_its_connect(
    connect: str, held: bool
) -> None:
    """A core cannot name ``mcp.call:`` itself: its connect rule brings it, and each tool
    is then decided by the core's ``mcp.<server>.<glob>`` rules."""
    text = (
        "id: notes\nmodel: s\nmcp:\n  docs:\n    command: [docs-mcp, --stdio]\n"
        f"capabilities:\n  mcp.connect:docs: {connect}\n  mcp.docs.search: allow\n"
    ).encode()
    policy = effect_policy(load_manifest(text))
    assert (policy.decide("mcp.call:docs") != "deny") is held
    if held:
        assert policy.decide_call("mcp.docs.search", "mcp.call:docs") == "allow"
        assert policy.decide_call("mcp.docs.delete", "mcp.call:docs") == "deny"


@pytest.mark.parametrize("rule", ["*_write", "notes_*", "*_list"])
def test_a_glob_over_a_tool_modules_undotted_effects_is_accepted(tmp_path: Path, rule: str) -> None:
    """Only an exact provider spelling (``files_write``) is refused: a glob may match a
    tool module's effects (``notes_write``), which parsing cannot know yet."""
    parsed = config({"policy": {"ask": [rule]}}, tmp_path)
    assert parsed.agents["a"].policy.ask == (rule,)
    policy = agent_policy(parsed.agents["a"])
    # Kept and in effect: it asks for the effects it matches, and only those.
    expected = "ask" if fnmatch.fnmatchcase("notes_write", rule) else "allow"
    assert policy.decide("notes_write") == expected
    assert policy.decide("notes_read") == ("ask" if rule == "notes_*" else "allow")
