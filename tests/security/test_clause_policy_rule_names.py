"""Clause: a policy rule that can never match an effect or grant name is refused, not ignored.

Effect names are dotted lower-case ASCII words; the grants are
``terminal.network``, ``secret.bind:<NAME>``, ``mcp.connect:<server>`` and
``mcp.call:<server>``, and only a secret's ``<NAME>`` has capitals (matched
case-sensitively, as the environment names it). A rule in capitals outside
that name (``FILES.*``, ``*Delete*``), with a space or a non-ASCII letter,
or of a shape no name has (``files..write``) is a ``ConfigError`` naming the
rule's list, the rule and what to write instead: in ``hostkit.toml``, in a
Python ``Agent(policy=...)`` (when it is built) and in an ``EffectPolicy``.
So is a glob written as the model sees a tool: when parsing (``files_*``,
``terminal_ru?``: it starts as the model sees a Host namespace) and, for a
glob parsing must accept (``*_write`` may be for a tool module's
``notes_write``), when the agent's tools are built and it matches only how
the model sees them; the turn is refused and the tool never runs (read and
ignored, each would let the effect it was written to deny or ask for run
unasked under ``allow = ["*"]``).
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest

from hostkit.effects import (
    AuthoredTool,
    EffectPolicy,
    ToolContext,
    mcp_call_grant,
    mcp_connect_grant,
    rule_problem,
    secret_grant,
)
from hostkit.errors import ConfigError, TurnRejected
from hostkit.host import Agent, Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request
from tests.security.test_clause_policy_rules_take_effect import config, refused, with_agent

pytestmark = pytest.mark.anyio

FILES = {"builtins": ["files.write", "files.read"]}


@pytest.mark.parametrize(
    ("rule", "why", "fixed"),
    [
        ("FILES.WRITE", "effect names are lower case", "files.write"),
        ("Files.*", "effect names are lower case", "files.*"),
        ("TERMINAL.*", "effect names are lower case", "terminal.*"),
        ("*Delete*", "effect names are lower case", "*delete*"),
        ("*TOKEN", "effect names are lower case", "*token"),
        ("mcp.*Delete*", "effect names are lower case", "mcp.*delete*"),
        ("SECRET.BIND:DEPLOY_TOKEN", "effect names are lower case", "secret.bind:DEPLOY_TOKEN"),
        ("files.write ", "names have no spaces", "files.write"),
        ("\tfiles.*", "names have no spaces", "files.*"),
    ],
)
@pytest.mark.parametrize("kind", ["allow", "ask", "deny"])
def test_a_rule_no_name_can_match_is_refused_naming_what_to_write(
    tmp_path: Path, kind: str, rule: str, why: str, fixed: str
) -> None:
    error = refused({**FILES, "policy": {"allow": ["*"], kind: [rule]}}, tmp_path)
    assert error.key == f"agents.a.policy.{kind}"
    assert str(error) == (
        f"agents.a.policy.{kind}: the rule {rule!r} can never match: {why}"
        + (" (capitals only follow secret.bind:)" if "lower case" in why else "")
        + f"; write {fixed!r}"
    )
    # What it says to write is taken as written.
    assert config({**FILES, "policy": {"allow": ["*"], kind: [fixed]}}, tmp_path)


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("fïles.*", "names are ASCII"),
        ("\uff46\uff49\uff4c\uff45\uff53.write", "names are ASCII"),  # fullwidth
        ("files .write", "names have no spaces"),
        ("files..write", "no effect or grant name has its shape"),
        ("files.", "no effect or grant name has its shape"),
        ("files-write", "no effect or grant name has its shape"),
        ("[", "no effect or grant name has its shape"),
        ("Files..write", "effect names are lower case"),
    ],
)
def test_a_rule_with_no_simple_fix_says_what_names_look_like(
    tmp_path: Path, rule: str, why: str
) -> None:
    error = refused({**FILES, "policy": {"deny": [rule]}}, tmp_path)
    assert error.key == "agents.a.policy.deny"
    assert f"the rule {rule!r} can never match: {why}" in str(error)
    assert "effect names are dotted words of a-z, 0-9 and _ ('files.write'" in str(error)


@pytest.mark.parametrize(
    ("rule", "meant"),
    [
        ("files_*", "files.*"),
        ("files_w*", "files.w*"),
        ("terminal_ru?", "terminal.ru?"),
        ("memory_*", "memory.*"),
        ("web_[e]xtract", "web.[e]xtract"),
    ],
)
def test_a_glob_written_as_the_model_sees_a_host_namespace_is_refused(
    tmp_path: Path, rule: str, meant: str
) -> None:
    error = refused({**FILES, "policy": {"allow": ["*"], "ask": [rule]}}, tmp_path)
    assert error.key == "agents.a.policy.ask"
    assert str(error) == (
        f"agents.a.policy.ask: the rule {rule!r} is a tool's name as the model sees it; "
        f"policy rules match effect names: did you mean {meant!r}?"
    )


@pytest.mark.parametrize(
    "name",
    [
        "files.write",
        "mcp.git.delete_repo",
        "memory",
        "terminal.network",
        secret_grant("DEPLOY_TOKEN"),
        secret_grant("_lower_and_UPPER9"),
        mcp_connect_grant("git"),
        mcp_call_grant("my_server2"),
    ],
)
def test_every_effect_and_grant_name_is_a_rule_that_matches_itself(name: str) -> None:
    assert rule_problem(name) is None
    assert EffectPolicy(allow=(), deny=(name,)).decide(name) == "deny"


@pytest.mark.parametrize(
    "rule",
    ["*", "files.*", "secret.*", "secret.bind:*TOKEN", "mcp.connect:*", "*:*", "files.[!a]*"],
)
def test_globs_that_can_match_a_name_are_kept_as_written(rule: str) -> None:
    assert rule_problem(rule) is None
    assert EffectPolicy(ask=(rule,)).ask == (rule,)


def test_a_secrets_name_stays_case_sensitive() -> None:
    policy = EffectPolicy(allow=("*",), deny=("secret.bind:DEPLOY_TOKEN",))
    assert policy.decide(secret_grant("DEPLOY_TOKEN")) == "deny"
    assert policy.decide(secret_grant("deploy_token")) == "allow"


def test_a_python_agents_rule_is_refused_when_the_agent_is_built() -> None:
    with pytest.raises(ConfigError) as caught:
        Agent("helper", policy={"allow": ["*"], "deny": ["FILES.*"]})
    assert caught.value.key == "agents.helper.policy.deny"
    assert "the rule 'FILES.*' can never match: effect names are lower case" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        Agent("helper", policy={"ask": ["files_*"]})
    assert caught.value.key == "agents.helper.policy.ask"
    assert "did you mean 'files.*'?" in str(caught.value)


def test_an_effect_policy_refuses_such_a_rule_itself() -> None:
    with pytest.raises(ConfigError) as caught:
        EffectPolicy(allow=("*",), deny=("FILES.*",))
    assert caught.value.key == "policy.deny"
    assert str(caught.value).endswith("; write 'files.*'")


POLICY = '[agents.assistant.policy]\nallow = ["*"]\n{kind} = [{rule}]'


@pytest.mark.parametrize(
    ("kind", "rule", "said"),
    [
        ("deny", "FILES.*", "can never match: effect names are lower case"),
        ("ask", "FILES.*", "can never match: effect names are lower case"),
        ("deny", "Files.write", "can never match: effect names are lower case"),
        ("deny", "files_*", "is a tool's name as the model sees it"),
    ],
)
async def test_a_host_with_such_a_rule_is_refused(
    tmp_path: Path, kind: str, rule: str, said: str
) -> None:
    path = with_agent(
        tmp_path,
        'builtins = ["files.write"]',
        POLICY.format(kind=kind, rule=json.dumps(rule)),
    )
    with pytest.raises(ConfigError) as caught:
        async with Host.open(path):
            pass
    assert caught.value.key == f"agents.assistant.policy.{kind}"
    assert f"the rule {rule!r} {said}" in str(caught.value)


async def test_a_live_edit_with_a_rule_in_capitals_is_rejected_and_generation_n_serves(
    tmp_path: Path,
) -> None:
    path = with_agent(tmp_path, 'builtins = ["files.write"]', "")
    async with Host.open(path) as host:
        with_agent(
            tmp_path,
            'builtins = ["files.write"]',
            POLICY.format(kind="deny", rule='"FILES.*"'),
        )
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.reason is not None
    assert outcome.reason.startswith("agents.assistant.policy.deny: the rule 'FILES.*' can")
    assert (served.generation, served.text) == (1, "still here")


async def _note(ctx: ToolContext, text: str) -> str:
    """Write a note."""
    return "noted"


def files_host(tmp_path: Path, deny: str, tools: list[AuthoredTool], *steps: Any) -> Host:
    """A Host whose agent has ``files.write`` and ``tools``, denies ``deny`` and whose model
    takes ``steps``."""
    parsed = parse_config(
        {
            "host": {"database": str(tmp_path / "h.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "builtins": ["files.write"],
                    "policy": {"allow": ["*"], "deny": [deny]},
                }
            },
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel(list(steps))
    return Host.open(parsed, capabilities=capabilities(model, tools=tools, config=parsed))


WRITE = CallTools(("files_write", {"path": "pwned.txt", "content": "x"}))


async def test_a_glob_matching_only_how_the_model_sees_a_tool_refuses_the_agents_turns(
    tmp_path: Path,
) -> None:
    """``*_write`` parses (a tool module may have ``notes_write``); this agent's tools are
    ``files.write`` and ``notes.write``, which it matches only as the model sees them."""
    tools = [AuthoredTool("notes.write", _note)]
    async with files_host(tmp_path, "*_write", tools, WRITE, Reply("done")) as host:
        with pytest.raises(TurnRejected) as caught:
            await host.turns.run(request())
    said = str(caught.value)
    assert "agents.assistant.policy.deny: the rule '*_write' is a tool's name as the model " in said
    assert "did you mean '*.write'?" in said
    assert not (tmp_path / "pwned.txt").exists()


async def test_a_glob_over_a_tool_modules_undotted_effect_takes_effect(tmp_path: Path) -> None:
    """The same rule, for an agent with an undotted ``notes_write``: it denies that tool,
    and only that one."""
    tools = [AuthoredTool("notes_write", _note)]
    note = CallTools(("notes_write", {"text": "x"}))
    async with files_host(tmp_path, "*_write", tools, note, WRITE, Reply("done")) as host:
        result = await host.turns.run(request())
    assert [(e.effect, e.status) for e in result.effects] == [
        ("_unknown", "not_found"),
        ("files.write", "succeeded"),
    ]


@pytest.mark.parametrize(
    ("rules", "effects", "servers", "found"),
    [
        ({"deny": ("*_write",)}, ["files.write"], [], [("deny", "*_write", "*.write")]),
        (
            {"allow": ("files_*",)},
            ["files.write", "files.read"],
            [],
            [("allow", "files_*", "files.*")],
        ),
        ({"ask": ("notes_a?d",)}, ["notes.add"], [], [("ask", "notes_a?d", "notes.a?d")]),
        ({"deny": ("*_write",)}, ["files.write", "notes_write"], [], []),
        # An MCP server's tools are listed per session: ``mcp.git.git_write`` may be one.
        ({"deny": ("*_write",)}, ["files.write", "mcp.call:git"], ["git"], []),
        ({"deny": ("*_write", "x*")}, ["web.extract"], [], []),
    ],
)
def test_model_spellings_are_rules_that_match_only_how_the_model_sees_a_tool(
    rules: dict[str, Any], effects: list[str], servers: list[str], found: list[Any]
) -> None:
    policy = EffectPolicy(**rules)
    assert list(policy.model_spellings(effects, mcp_servers=servers)) == found
    for _, rule, meant in found:
        assert not any(fnmatch.fnmatchcase(effect, rule) for effect in effects)
        assert any(fnmatch.fnmatchcase(effect, meant) for effect in effects)
