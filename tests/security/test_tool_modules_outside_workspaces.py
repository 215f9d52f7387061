"""An agent cannot rewrite code the Host runs: no tool module inside a writable workspace.

An authored tool module runs in the Host's own process, with its environment.
Were its file (or a ``tool_path`` directory it is found in) inside a workspace
some agent writes to (``files.write``, ``files.edit``, ``terminal.run``, a stdio
MCP server), that agent could replace it, and the next discovery would accept
the new code. Such a module is refused before anything of it is imported; a
workspace the agents only read keeps working. A module file with a second hard
link is refused too: the other name may be inside such a workspace.

A Python agent (``hostkit run --agent module:attribute``, ``Host.open(agents=
[...])``) is code the Host runs as well, and the next ``--agent`` imports its
module again: a Host none of whose writable workspaces may hold it (its
module, its tools' files, the import path) does not open.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hostkit.errors import ConfigError, TurnRejected
from hostkit.host import Agent, Host, _code_places, load_agent, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.cli import run_cli_async
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


# -- hard links: another name of the module may be inside a writable workspace --------------


async def test_a_tool_module_with_a_second_link_is_refused_unimported(tmp_path: Path) -> None:
    """A hard link is the same file under another name: one in a writable workspace
    rewrites the module, and nothing tells where the other names are. Refused."""
    modules = write_module(tmp_path / "safe", "linked_tools")
    (tmp_path / "ws").mkdir()
    os.link(modules / "linked_tools.py", tmp_path / "ws" / "planted.py")
    config = host_config(
        tmp_path,
        {
            "assistant": {
                "builtins": ["files.write"],
                "tool_modules": ["linked_tools"],
                "tool_path": [str(modules)],
            }
        },
    )
    with pytest.raises(TurnRejected) as refused:
        await first_turn(config)
    message = refused.value.message
    assert "agents.assistant.tool_modules" in message
    assert "linked_tools.py is a file with 2 hard links" in message
    assert "make it a file of its own" in message
    assert not (modules / "imported.txt").exists()


@pytest.mark.parametrize("installed", ["hostkit", "site-packages"])
async def test_a_linked_module_of_an_install_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    """An installer may hard-link hostkit's own files and the interpreter's packages from
    its cache (uv does by default): those stay usable."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    assert purelib in _code_places._INSTALLS  # the exempt places are the real installs
    name = f"installed_tools_{installed.replace('-', '_')}"  # each test imports its own
    install = write_module(tmp_path / "install", name)
    os.link(install / f"{name}.py", tmp_path / "cache-copy.py")
    # hostkit's own directory comes first, then the interpreter's install locations.
    places = [tmp_path / "hostkit", tmp_path / "stdlib"]
    places[0 if installed == "hostkit" else 1] = install
    monkeypatch.setattr(_code_places, "_INSTALLS", tuple(places))
    config = host_config(
        tmp_path,
        {
            "assistant": {
                "builtins": ["files.write"],
                "tool_modules": [name],
                "tool_path": [str(install)],
            }
        },
    )
    result = await first_turn(config)
    assert result.outcome == "completed", result.error


def test_code_reached_through_a_link_inside_a_workspace_is_refused(tmp_path: Path) -> None:
    """The code itself lies elsewhere, but its path as given runs through a link in the
    workspace (an import path entry ``ws/lib`` -> ``/srv/code``): an agent that can write
    there can point the link at its own code before the next import."""
    code = write_module(tmp_path / "code", "linked_code")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "lib").symlink_to(code, target_is_directory=True)
    for place in (workspace / "lib", workspace / "lib" / "linked_code.py"):
        with pytest.raises(ConfigError, match="is inside the workspace of agent 'writer'"):
            _code_places.judge_places(
                [(place, "import path entry")],
                {workspace: "writer"},
                [],
                key="agents.writer",
                advice="keep code outside",
            )
    _code_places.judge_places(  # the same code by its own path is fine
        [(code / "linked_code.py", "import path entry")],
        {workspace: "writer"},
        [],
        key="agents.writer",
        advice="keep code outside",
    )


# -- Python agents: the code a Host runs as the operator, brought as a module ---------------

AGENT_MODULE = '''
import hostkit
from hostkit.testing import Reply, ScriptedModel


@hostkit.tool("notes.count")
async def count() -> int:
    """Count notes."""
    return 1


agent = hostkit.Agent("helper", model=ScriptedModel([Reply("done")]), tools=[count])
'''


def import_from(
    directory: Path, name: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> ModuleType:
    """Import ``name`` written in ``directory``, then take the directory off the import
    path again: the module's own file is what is judged, not the path entry."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(directory)])
    return module


def writer_config(tmp_path: Path, writes: Path) -> Any:
    """A Host whose TOML agent ``writer`` can write files in ``writes``."""
    writes.mkdir(parents=True, exist_ok=True)
    return host_config(
        tmp_path, {"writer": {"builtins": ["files.write"], "workspace": str(writes)}}
    )


def helper_from_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Agent, str]:
    import_from(tmp_path / "ws", "ws_agent", AGENT_MODULE, monkeypatch)
    return load_agent("ws_agent:agent"), "ws_agent.py"


def helper_from_a_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Agent, str]:
    """``--agent ws_factory:make`` whose factory (safe) builds the Agent: the module named
    on the command line is the one the next run imports again."""
    import_from(tmp_path / "safe", "safe_agents", AGENT_MODULE, monkeypatch)
    source = "from safe_agents import agent as built\n\n\ndef make():\n    return built\n"
    import_from(tmp_path / "ws", "ws_factory", source, monkeypatch)
    return load_agent("ws_factory:make"), "ws_factory.py"


def helper_with_a_tool_from_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Agent, str]:
    tools = import_from(tmp_path / "ws", "ws_agent_tools", AGENT_MODULE, monkeypatch)
    return Agent("helper", model=ScriptedModel([Reply("done")]), tools=[tools.count]), (
        "ws_agent_tools.py"
    )


@pytest.mark.parametrize(
    "build",
    [helper_from_module, helper_from_a_factory, helper_with_a_tool_from_the_workspace],
    ids=["agent-module", "factory-module", "tool-module"],
)
async def test_a_python_agents_code_in_a_writable_workspace_keeps_the_host_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: Any
) -> None:
    """``hostkit run --agent ws_agent:agent`` imports the module as the operator: were it
    in a workspace an agent writes, a model could rewrite it for the next run. No agent of
    such a Host runs a turn: it does not open."""
    agent, file = build(tmp_path, monkeypatch)
    config = writer_config(tmp_path, tmp_path / "ws")
    with pytest.raises(ConfigError) as refused:
        async with Host.open(config, agents=[agent]):
            pass
    message = refused.value.message
    assert refused.value.key == "agents.helper"
    assert f"{file} is inside the workspace of agent 'writer'" in message
    assert "outside every writable workspace" in message
    assert len(message) <= 700


async def test_a_python_agents_module_with_a_second_link_keeps_the_host_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_from(tmp_path / "safe", "linked_agent", AGENT_MODULE, monkeypatch)
    writes = tmp_path / "ws"
    writes.mkdir()
    os.link(tmp_path / "safe" / "linked_agent.py", writes / "innocent.py")
    agent = load_agent("linked_agent:agent")
    with pytest.raises(ConfigError, match=r"linked_agent\.py is a file with 2 hard links"):
        async with Host.open(writer_config(tmp_path, writes), agents=[agent]):
            pass


async def test_a_python_agent_outside_the_writable_workspaces_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safe layout: the module beside the configuration, the agents writing in a
    workspace of their own."""
    import_from(tmp_path / "project", "safe_helper", AGENT_MODULE, monkeypatch)
    agent = load_agent("safe_helper:agent")
    config = writer_config(tmp_path, tmp_path / "project" / "workspace")
    async with Host.open(config, agents=[agent]) as host:
        result = await host.turns.run(request("hi", core_id="helper"))
    assert result.outcome == "completed", result.error


async def test_a_configuration_letting_an_agent_write_a_python_agents_module_is_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import_from(tmp_path / "lib", "applied_helper", AGENT_MODULE, monkeypatch)
    agent = load_agent("applied_helper:agent")
    async with Host.open(writer_config(tmp_path, tmp_path / "ws"), agents=[agent]) as host:
        before = host.config
        with pytest.raises(ConfigError, match=r"applied_helper\.py is inside the workspace"):
            await host.apply_config(writer_config(tmp_path, tmp_path / "lib"))
        assert host.config is before


LAYOUT_AGENT = """
import hostkit
from hostkit.testing import Reply, ScriptedModel

agent = hostkit.Agent("helper", model=ScriptedModel([Reply("done")]))
"""


@pytest.mark.parametrize("workspace", [".", "workspace"])
async def test_hostkit_run_agent_refuses_a_project_that_is_its_own_workspace(
    tmp_path: Path, workspace: str
) -> None:
    """The documented layout (``my_agents.py`` beside ``hostkit.toml``, the agents writing
    in ``workspace/``) runs; ``workspace = "."`` makes the module (and the working
    directory on the import path) the writer's to rewrite: one line saying what to do,
    exit status 2, no turn."""
    (tmp_path / "my_agents.py").write_text(LAYOUT_AGENT)
    (tmp_path / "hostkit.toml").write_text(
        f'[host]\nworkspace = "{workspace}"\n\n[providers.test]\nkind = "scripted"\n\n'
        '[agents.writer]\nprovider = "test"\nbuiltins = ["files.write"]\n'
    )
    result = await run_cli_async(
        "run",
        "--agent",
        "my_agents:agent",
        "hi",
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )
    err = result.stderr.decode()
    if workspace == "workspace":
        assert result.returncode == 0, err
        assert "done" in result.stdout.decode()
        return
    assert result.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip() and "warning" not in line]
    assert len(lines) == 1, err
    assert "agents.helper" in lines[0]
    assert "my_agents.py is inside the workspace of agent 'writer'" in lines[0]
    assert 'workspace = "workspace"' in lines[0]
    assert not (tmp_path / "hostkit.db").exists()  # refused before the database is made
