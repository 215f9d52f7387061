"""Clause: a core's tool module is discovered in the sandbox whatever ``sys.path`` holds,
seeing its own revision and none of the Host's other state.

``python -m hostkit`` (and ``--agent module:attr``) puts the project folder on
``sys.path``, a Jupyter kernel its working folder (``''``): the discovery
child binds that folder read-only with the Host's state in it masked, so
``.hostkit-cores`` is an empty read-only mask there. The materialized revision
the child must import sits inside that mask; it is shown at a path of its own
instead, and the discovered module, trying to read the rest of the state
(every other revision, the database, the artifacts, the configuration),
finds only the masks.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.builtins.process import SandboxPolicy, probe_bubblewrap
from hostkit.errors import ConfigError
from hostkit.host import DefaultToolSource, Host, HostConfig, NoChannels, RuntimeCapabilities
from hostkit.host._tool_modules import ToolModules
from hostkit.testing import InMemoryMemorySource, StaticProviderSource
from tests.cores_support import core_host_config, make_core
from tests.hosts import request
from tests.parts import missing

pytestmark = pytest.mark.anyio

# The module's top level (run only by the discovery child) reports in its tool's
# description what it could read of the Host's state.
SEER = """
import json
import os
from pathlib import Path

from hostkit.effects import ToolContext, tool


def _seen(path: str) -> object:
    target = Path(path)
    try:
        return sorted(os.listdir(target)) if target.is_dir() else len(target.read_bytes())
    except OSError as exc:
        return type(exc).__name__


_OWN = len(Path(__file__).read_bytes())
_STATE = {{name: _seen(path) for name, path in {paths!r}.items()}}


@tool("seer.look", description=json.dumps({{"own": _OWN, **_STATE}}, separators=(",", ":")))
async def look(ctx: ToolContext) -> str:
    return "looked"
"""


def state_of(tmp_path: Path, config: HostConfig) -> dict[str, str]:
    return {
        "cores": str(config.cores_root),
        "db": str(config.database_path),
        "artifacts": str(config.artifact_root),
        "toml": str(tmp_path / "hostkit.toml"),
    }


async def discovered_view(tmp_path: Path, *, plain_tool_path: bool = False) -> dict[str, object]:
    """Run a turn of a core whose tool module reports what discovery let it see
    (``plain_tool_path``: of a plain agent importing it from ``tool_path = ["."]``)."""
    if not (probe := await anyio.to_thread.run_sync(probe_bubblewrap)).ok:
        missing("sandbox", probe.reason)
    (tmp_path / "hostkit.toml").write_text("# the Host's configuration\n", encoding="utf-8")
    config = core_host_config(tmp_path, {})
    source = SEER.format(paths=state_of(tmp_path, config))
    if plain_tool_path:
        (tmp_path / "seermod.py").write_text(source, encoding="utf-8")
        (config.cores_root / "other").mkdir(parents=True)  # another core's revisions
        agent = {
            "provider": "test",
            "tool_modules": ["seermod"],
            "tool_path": ["."],
            "policy": {"allow": ["seer.*"]},
        }
        config = core_host_config(tmp_path, {}, agents={"seer": agent})
    else:
        manifest = {"model": "test", "capabilities": {"seer.*": "allow"}, "tools": ["tools"]}
        path, _ = make_core(tmp_path, "seer", manifest=manifest, files={"agent/tools.py": source})
        config = core_host_config(tmp_path, {"seer": path})
    model = ScriptedModel([Reply("done")])
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    )
    async with Host.open(config, capabilities=capabilities) as host:
        result = await host.turns.run(request(core_id="seer"))
    assert result.outcome == "completed", result
    (offered,) = [t for t in model.requests[0].tools if t.name.startswith("seer")]
    view: dict[str, object] = json.loads(offered.description)
    return view


def assert_only_masks(view: dict[str, object], *, project_bound: bool = True) -> None:
    """The child saw its own revision; of the state, masks (the project folder bound
    as an import root) or nothing at all (not bound)."""
    assert isinstance(view["own"], int)
    assert view["own"] > 0
    absent = "FileNotFoundError"
    assert view["cores"] == ([] if project_bound else absent)  # no revision at its real place
    # A masked file is /dev/null bound without device access: unreadable.
    assert view["db"] == ("PermissionError" if project_bound else absent)
    assert view["toml"] == ("PermissionError" if project_bound else absent)
    assert view["artifacts"] in ([], absent)


async def test_project_folder_on_sys_path_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    assert_only_masks(await discovered_view(tmp_path))


async def test_working_folder_on_sys_path_notebook_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")
    assert_only_masks(await discovered_view(tmp_path))


async def test_host_state_stays_hidden_without_the_project_on_sys_path(tmp_path: Path) -> None:
    assert_only_masks(await discovered_view(tmp_path), project_bound=False)


async def test_a_tool_path_holding_host_state_shows_only_masks(tmp_path: Path) -> None:
    """A plain agent's ``tool_path`` entry is an import root like the rest: the Host
    state inside it stays masked (it is not bound again over the masks)."""
    assert_only_masks(await discovered_view(tmp_path, plain_tool_path=True))


async def test_a_tool_path_inside_host_state_holding_more_state_is_refused(tmp_path: Path) -> None:
    """Shown at a path of its own, such a directory would bring the state inside it
    along, unmasked: discovery refuses it (a typed error naming the key) and
    starts no process."""
    state = tmp_path / ".hostkit-cores"
    (state / "pkg_nested").mkdir(parents=True)
    (state / "pkg_nested" / "__init__.py").write_text("", encoding="utf-8")
    (state / "pkg_nested" / "mod.py").write_text(SEER, encoding="utf-8")
    (state / "artifacts").mkdir()
    policy = SandboxPolicy(hidden=(state, state / "artifacts"))
    with pytest.raises(ConfigError) as caught:
        await ToolModules().tools("pkg_nested.mod", agent="a", sandbox=policy, search=[state])
    assert caught.value.key == "agents.a.tool_modules"
    assert "holds Host state of its own" in str(caught.value)
