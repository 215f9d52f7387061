"""Clause: a reload builds the tools of every agent it adds or changes before it installs
the generation; one that cannot be built (a tool module missing, two tools under one
name, a rule only the model's spelling matches) rejects the reload whole, and generation
N keeps serving (docs/generations.md).

Real Hosts on real files and real tool modules; nothing is faked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.host import Host
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
