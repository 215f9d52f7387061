"""An agent cannot rewrite code the Host runs: no tool module inside a writable workspace.

An authored tool module runs in the Host's own process, with its environment.
Were its file (or a ``tool_path`` directory it is found in) inside a workspace
some agent writes to (``files.write``, ``files.edit``, ``terminal.run``, a stdio
MCP server), that agent could replace it, and the next discovery would accept
the new code. Such a module is refused before anything of it is imported; a
workspace the agents only read keeps working.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import TurnRejected
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def import_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HK_TEST_IMPORT_MARK", "1")


MODULE = '''
import os
import sys
from pathlib import Path

from hostkit.effects import tool

# Set in the Host's process only: the discovery child gets no environment.
if os.environ.get("HK_TEST_IMPORT_MARK"):
    Path(__file__).with_name("imported.txt").write_text("imported")


@tool("notes.count")
async def count() -> int:
    """Count notes."""
    return 1
'''


def write_module(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(MODULE)
    return directory


def host_config(tmp_path: Path, agents: dict[str, dict[str, Any]]) -> Any:
    state = tmp_path / "state"
    return parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(tmp_path / "ws"),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                name: {"provider": "test", "memory": False, "policy": {"allow": ["*"]}, **agent}
                for name, agent in agents.items()
            },
        },
        base_dir=tmp_path,
    )


async def first_turn(config: Any, agent: str = "assistant") -> Any:
    model = ScriptedModel([CallTools(("notes_count", {})), Reply("done")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        return await host.turns.run(request("count", core_id=agent))


@pytest.mark.parametrize("builtin", ["files.write", "files.edit", "terminal.run"])
async def test_a_module_in_a_workspace_its_agent_writes_is_refused_unimported(
    tmp_path: Path, builtin: str
) -> None:
    modules = write_module(tmp_path / "ws", "ws_tools_" + builtin.replace(".", "_"))
    config = host_config(
        tmp_path,
        {
            "assistant": {
                "builtins": [builtin],
                "tool_modules": ["ws_tools_" + builtin.replace(".", "_")],
                "tool_path": [str(modules)],
            }
        },
    )
    with pytest.raises(TurnRejected) as refused:
        await first_turn(config)
    message = refused.value.message
    assert "agents.assistant.tool_modules" in message
    assert "inside the workspace of agent 'assistant'" in message
    assert not (modules / "imported.txt").exists()


async def test_a_tool_path_inside_another_agents_writable_workspace_is_refused(
    tmp_path: Path,
) -> None:
    # The module's directory is a link out of the workspace's reach... and back into it.
    inside = write_module(tmp_path / "writer-ws" / "lib", "cross_tools")
    link = tmp_path / "lib-link"
    os.symlink(inside, link)
    config = host_config(
        tmp_path,
        {
            "assistant": {"tool_modules": ["cross_tools"], "tool_path": [str(link)]},
            "writer": {"builtins": ["files.write"], "workspace": str(tmp_path / "writer-ws")},
        },
    )
    with pytest.raises(TurnRejected, match="inside the workspace of agent 'writer'"):
        await first_turn(config)
    assert not (inside / "imported.txt").exists()


async def test_a_workspace_the_agents_only_read_may_hold_the_module(tmp_path: Path) -> None:
    modules = write_module(tmp_path / "ws", "read_only_tools")
    config = host_config(
        tmp_path,
        {
            "assistant": {
                "builtins": ["files.read", "files.list"],
                "tool_modules": ["read_only_tools"],
                "tool_path": [str(modules)],
            }
        },
    )
    result = await first_turn(config)
    assert result.outcome == "completed", result.error
    assert [(e.effect, e.status) for e in result.effects] == [("notes.count", "succeeded")]
    assert (modules / "imported.txt").read_text() == "imported"  # the mark does show an import


async def test_a_module_in_host_state_inside_a_workspace_is_kept(tmp_path: Path) -> None:
    """An Agent Core's revision lives under the cores root, Host state that ``files.*``
    refuse and sandboxes hide: a workspace overlapping it (``workspace = "."``, warned
    about at start-up) cannot reach it, so its tools still run."""
    modules = write_module(tmp_path / ".hostkit-cores" / "lib", "state_tools")
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": "."},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"]},
                    "builtins": ["files.write"],
                    "tool_modules": ["state_tools"],
                    "tool_path": [str(modules)],
                }
            },
        },
        base_dir=tmp_path,
    )
    result = await first_turn(config)
    assert result.outcome == "completed", result.error
    assert [(e.effect, e.status) for e in result.effects] == [("notes.count", "succeeded")]


async def test_the_hosts_import_path_inside_a_writable_workspace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module's own imports come from the Host's import path: ``python -m hostkit`` run
    in the workspace puts it there (as the working directory), and an agent could plant
    a module the tool module imports. Refused, naming the import path entry."""
    modules = write_module(tmp_path / "safe", "path_tools")
    monkeypatch.syspath_prepend(str(tmp_path / "ws"))
    config = host_config(
        tmp_path,
        {
            "assistant": {
                "builtins": ["files.write"],
                "tool_modules": ["path_tools"],
                "tool_path": [str(modules)],
            }
        },
    )
    (tmp_path / "ws").mkdir(exist_ok=True)
    with pytest.raises(TurnRejected, match=r"the import path entry .* is inside the workspace"):
        await first_turn(config)
    assert not (modules / "imported.txt").exists()


async def test_a_module_the_host_imported_already_is_judged_by_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module already imported (an earlier generation ran one of its tools) is not
    discovered again: its file is still judged, so a later generation that lets an agent
    write where it lives does not keep running it."""
    modules = write_module(tmp_path / "ws", "loaded_tools")
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.delitem(sys.modules, "loaded_tools", raising=False)
    __import__("loaded_tools")  # what an earlier call did, in this process
    config = host_config(
        tmp_path,
        {"assistant": {"builtins": ["files.write"], "tool_modules": ["loaded_tools"]}},
    )
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(modules)])
    with pytest.raises(TurnRejected, match=r"the tool module .*loaded_tools\.py is inside"):
        await first_turn(config)
