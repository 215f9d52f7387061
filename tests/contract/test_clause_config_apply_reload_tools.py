"""Clause: a reload builds the tools of every agent it adds or changes before it installs
the generation; one that cannot be built (a tool module missing, two tools under one
name, a rule only the model's spelling matches) rejects the reload whole, and generation
N keeps serving (docs/generations.md). Only what the reload wrote is held to it: an
agent broken before it, or a discovery that is overdue, does not reject it; and a
shutdown does not wait for the build.

Real Hosts on real files and real tool modules; nothing is faked.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import ConfigError, TurnRejected
from hostkit.host import DefaultToolSource, Host, ReloadOutcome
from hostkit.host._generation import BUILD_CONCURRENCY
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests import hosts
from tests.hosts import request

pytestmark = pytest.mark.anyio

_TOOL = '''from hostkit.effects import ToolContext, tool


@tool("notes.write")
async def {name}(ctx: ToolContext, text: str) -> str:
    """Write a note."""
    return "noted"
'''

CASES = {
    "a module that does not exist": (
        '"no_such_module"',
        'allow = ["*"]',
        "agents.assistant.tool_modules: cannot import tool module 'no_such_module'",
    ),
    "two modules with one tool name": (
        '"notes_a", "notes_b"',
        'allow = ["*"]',
        "two tools collide as effect 'notes.write'",
    ),
    "a rule spelled as the model sees the tool": (
        '"notes_a"',
        'allow = ["*"]\ndeny = ["*_write"]',
        "agents.assistant.policy.deny: the rule '*_write' is a tool's name as the model",
    ),
}


def _write(root: Path, modules: str, policy: str) -> Path:
    path = root / "hostkit.toml"
    path.write_text(
        f"""
[host]
database = "hostkit.db"
workspace = "ws"

[providers.test]
kind = "scripted"
script = [{{ reply = "still here" }}]

[agents.assistant]
provider = "test"
memory = false
tool_path = ["mods"]
tool_modules = [{modules}]

[agents.assistant.policy]
{policy}
"""
    )
    return path


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_reload_whose_tools_cannot_be_built_is_rejected_and_n_serves_on(
    tmp_path: Path, case: str
) -> None:
    modules, policy, named = CASES[case]
    (tmp_path / "mods").mkdir()
    for name in ("notes_a", "notes_b"):
        (tmp_path / "mods" / f"{name}.py").write_text(_TOOL.format(name=name))
    path = _write(tmp_path, "", 'allow = ["*"]')
    async with Host.open(path) as host:
        _write(tmp_path, modules, policy)
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert named in outcome.reason
    assert str(outcome).endswith("; generation 1 keeps serving")
    # Nothing was half-applied: generation 1, with its tools, still answers.
    assert (served.outcome, served.generation, served.text) == ("completed", 1, "still here")


def _agents(root: Path, extra: str, agents: dict[str, str]) -> Path:
    """A configuration with the ``assistant`` and, per name, an agent on ``tool_modules``."""
    path = root / "hostkit.toml"
    tables = "".join(
        f'\n[agents.{name}]\nprovider = "test"\nmemory = false\nsandbox = "none"\n'
        f'tool_path = ["mods"]\ntool_modules = [{modules}]\n'
        f'[agents.{name}.policy]\nallow = ["*"]\n'
        for name, modules in agents.items()
    )
    path.write_text(
        f"""
[host]
database = "hostkit.db"
workspace = "ws"

[providers.test]
kind = "scripted"
script = [{{ reply = "still here" }}]
{extra}
[agents.assistant]
provider = "test"
memory = false
{tables}"""
    )
    return path


async def test_an_agent_broken_at_open_does_not_reject_a_reload_outside_it(
    tmp_path: Path,
) -> None:
    """Its tools did not build at open (lazily: not available). A reload that adds a
    provider rebuilds every agent (their authority may change) but did not write this
    one: it is applied, the broken agent stays unavailable with its reason."""
    (tmp_path / "mods").mkdir()
    path = _agents(tmp_path, "", {"legacy": '"gone"'})
    async with Host.open(path) as host:
        _agents(tmp_path, '[providers.other]\nkind = "scripted"\n', {"legacy": '"gone"'})
        outcome = await host.reload()
        served = await host.turns.run(request())
        with pytest.raises(TurnRejected) as refused:
            await host.turns.run(request(core_id="legacy"))
    assert outcome.applied, outcome
    assert (served.outcome, served.generation) == ("completed", 2)
    assert "cannot import tool module 'gone'" in refused.value.message


async def test_a_discovery_that_times_out_does_not_reject_the_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overdue is the machine's failure, not the configuration's: the reload applies and
    the agent's turns build again (a retryable refusal until one finishes)."""
    monkeypatch.setattr(DefaultToolSource.__init__, "__kwdefaults__", {"discovery_timeout_s": 0.3})
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "slow.py").write_text("import time\ntime.sleep(2)\n")
    path = _agents(tmp_path, "", {})
    async with Host.open(path) as host:
        _agents(tmp_path, "", {"slow": '"slow"'})
        outcome = await host.reload()
        with pytest.raises(TurnRejected) as refused:
            await host.turns.run(request(core_id="slow"))
    assert outcome.applied, outcome
    assert "did not finish within 0.3s" in refused.value.message
    assert refused.value.retryable


async def test_aclose_cancels_the_tools_build_of_a_reload_and_installs_nothing(
    tmp_path: Path,
) -> None:
    """Discovering the new agents' modules (each import takes 2 s) is not waited for: the
    Host closes at once, the reload is rejected, no generation is installed, and no agent
    starts its discovery after the close began."""
    (tmp_path / "mods").mkdir()
    started = tmp_path / "started"
    started.mkdir()
    (tmp_path / "mods" / "slow.py").write_text(
        "import os, pathlib, time\n"
        f"pathlib.Path({str(started)!r}, str(os.getpid())).touch()\n"
        "time.sleep(2)\n"
    )
    path = _agents(tmp_path, "", {})
    outcomes: list[ReloadOutcome] = []
    async with Host.open(path) as host:
        _agents(tmp_path, "", {f"slow{n}": '"slow"' for n in range(6)})

        async def reload() -> None:
            outcomes.append(await host.reload())

        async with anyio.create_task_group() as group:
            group.start_soon(reload)
            with anyio.fail_after(10):
                while not any(started.iterdir()):  # noqa: ASYNC110 (a child process writes it)
                    await anyio.sleep(0.02)
            began = len(list(started.iterdir()))
            with anyio.fail_after(1.5):
                await host.aclose()
    assert [(o.rejected, o.generation) for o in outcomes] == [(True, 1)], outcomes
    assert host.generation == 1
    await anyio.sleep(0.3)
    assert began <= len(list(started.iterdir())) <= BUILD_CONCURRENCY


@tool("notes.write")
async def _note(ctx: ToolContext, text: str) -> str:
    return "ok"


@tool("notes.write")
async def _note_again(ctx: ToolContext, text: str) -> str:
    return "ok"


async def test_an_apply_whose_new_sources_break_a_serving_agent_is_rejected(
    tmp_path: Path,
) -> None:
    """New capability sources rebuild every agent without changing any: one that served
    before and cannot now (its tools collide) rejects the apply, and generation N serves
    on, instead of being installed unavailable."""
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    opened = capabilities(model, tools=[_note])
    async with Host.open(hosts.config(tmp_path), capabilities=opened) as host:
        before = host.generation
        colliding = capabilities(model, tools=[_note, _note_again])
        with pytest.raises(ConfigError, match=r"two tools collide as effect 'notes\.write'"):
            await host.apply_config(hosts.config(tmp_path), capabilities=colliding)
        assert host.generation == before
        assert (await host.turns.run(request("hello", conversation="c"))).outcome == "completed"
