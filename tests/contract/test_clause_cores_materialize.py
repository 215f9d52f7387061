"""Clause: a revision is materialized read-only from its commit, under a package name of its own.

The tree is extracted from the commit (never the work tree) into the Host's
state (outside every workspace, refused by files.*), read-only; ``agent/``
becomes ``hkcore_<id>_<sha12>`` so two revisions' same-named modules coexist
in one process; a tree with a symlink or a ``..`` entry is refused whole.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.cores import CoreLocation, CoreRepository, load_core, package_name
from hostkit.effects import provider_name
from hostkit.errors import ConfigError, InvalidValue
from hostkit.host import DefaultToolSource, Host, NoChannels, RuntimeCapabilities
from hostkit.testing import InMemoryMemorySource, StaticProviderSource
from tests.cores_support import IDENTITY, commit, core_host_config, make_core, set_live
from tests.hosts import request

pytestmark = pytest.mark.anyio

TOOLS = '''
from hostkit.effects import ToolContext, tool

from . import version


@tool("probe.version")
async def which(ctx: ToolContext) -> str:
    """Say which revision's code runs."""
    return version.NAME
'''
MANIFEST = {"model": "test", "capabilities": {"probe.*": "allow"}, "tools": ["tools"]}


def location(path: Path, core_id: str) -> CoreLocation:
    return CoreLocation(core_id, path, "refs/hostkit/live")


def sources(config: object, model: ScriptedModel) -> RuntimeCapabilities:
    return RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),  # type: ignore[arg-type]
        channels=NoChannels(),
    )


async def test_two_revisions_same_named_modules_coexist_in_one_process(tmp_path: Path) -> None:
    files = {"agent/tools.py": TOOLS, "agent/version.py": "NAME = 'first'\n"}
    path, first = make_core(tmp_path, "probe", manifest={**MANIFEST, "memory": False}, files=files)
    config = core_host_config(tmp_path, {"probe": path})
    call = CallTools((provider_name("probe.version"), {}))
    model = ScriptedModel([call, Reply("one"), call, Reply("two")])
    one = package_name("probe", first)
    async with Host.open(config, capabilities=sources(config, model)) as host:
        before = await host.turns.run(request(core_id="probe"))
        old_version = sys.modules[f"{one}.version"]
        second = commit(path, {"agent/version.py": "NAME = 'second'\n"}, "second")
        set_live(path, second)
        await host.apply_config(host.declared_config, capabilities=sources(config, model))
        two = package_name("probe", second)
        after = await host.turns.run(request(core_id="probe"))
        new_version = sys.modules[f"{two}.version"]
        # The retired revision's modules left sys.modules with its generation.
        assert f"{one}.version" not in sys.modules
    answers = [m.content for r in (model.requests[1], model.requests[3]) for m in r.messages[-1:]]
    assert (before.core_revision, after.core_revision) == (first, second)
    assert "first" in answers[0]
    assert "second" in answers[1]
    assert (old_version.NAME, new_version.NAME) == ("first", "second")
    assert "version" not in sys.modules or not hasattr(sys.modules["version"], "NAME")
    assert not [name for name in sys.modules if name.startswith((one, two))]


async def test_the_materialized_revision_is_read_only_host_state_outside_the_workspace(
    tmp_path: Path,
) -> None:
    path, sha = make_core(
        tmp_path,
        "reader",
        manifest={
            "model": "test",
            "capabilities": {"fs.read": "allow"},
            "memory": False,
            "workspace": ".",
        },
    )
    config = core_host_config(tmp_path, {"reader": path})
    loaded = await load_core(location(path, "reader"), sha, cores_root=config.cores_root)
    assert loaded.root == config.cores_root / "reader" / sha
    assert loaded.root.is_relative_to(config.cores_root)
    assert config.cores_root in config.state_paths()
    assert not loaded.root.is_relative_to(config.resolve(config.host.workspace))
    for where, _dirs, names in os.walk(loaded.root):
        for entry in (where, *(os.path.join(where, name) for name in names)):
            assert stat.S_IMODE(os.stat(entry).st_mode) & 0o222 == 0, entry
    # The core's workspace is the folder holding the Host's state: files.* still refuse it.
    target = f".hostkit-cores/reader/{sha}/agent.yaml"
    model = ScriptedModel([CallTools((provider_name("files.read"), {"path": target})), Reply("x")])
    async with Host.open(config, capabilities=sources(config, model)) as host:
        result = await host.turns.run(request(core_id="reader"))
    (effect,) = result.effects
    assert (effect.effect, effect.status) != ("files.read", "succeeded")
    assert "model: test" not in model.requests[1].messages[-1].content


async def test_a_tree_with_a_symlink_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    path, _ = make_core(tmp_path, "linky", manifest={"model": "test"}, live=False)
    (path / "agent").mkdir()
    os.symlink("/etc/passwd", path / "agent" / "passwd")
    sha = commit(path, {"agent/tools.py": "X = 1\n"}, "a link", extra=["agent/passwd"])
    with pytest.raises(ConfigError, match="symbolic link at 'agent/passwd'"):
        await load_core(location(path, "linky"), sha, cores_root=tmp_path / "cores")
    assert list((tmp_path / "cores" / "linky").iterdir()) == []


@pytest.mark.parametrize("name", [b"..", b".git", b"a\\b"])
async def test_a_tree_with_an_escaping_name_is_refused(tmp_path: Path, name: bytes) -> None:
    path, base = make_core(tmp_path, "escape", manifest={"model": "test"}, live=False)
    with Repo(str(path)) as repo:
        blob = Blob.from_string(b"planted\n")
        inner = Tree()
        inner.add(b"x", 0o100644, blob.id)
        root = repo[repo[base.encode()].tree]
        root.add(name, 0o040000, inner.id)
        planted = Commit()
        planted.tree, planted.parents = root.id, [base.encode()]
        planted.author = planted.committer = IDENTITY
        planted.author_time = planted.commit_time = 1_700_000_000
        planted.author_timezone = planted.commit_timezone = 0
        planted.message = b"planted"
        for obj in (blob, inner, root, planted):
            repo.object_store.add_object(obj)
        sha = planted.id.decode()
    with pytest.raises(ConfigError, match="a path that is not allowed"):
        await load_core(location(path, "escape"), sha, cores_root=tmp_path / "cores")
    assert not (tmp_path / "planted").exists()
    assert not (tmp_path / "cores" / "x").exists()


async def test_revisions_resolve_and_the_ref_mirrors_a_revision(
    tmp_path: Path,
) -> None:
    path, first = make_core(tmp_path, "cas", manifest={"model": "test"}, live=False)
    second = commit(path, {"notes.md": "two\n"}, "second")
    repository = await CoreRepository.open(path)
    assert await repository.resolve("HEAD") == second
    assert await repository.resolve(first[:9]) == first
    with pytest.raises(InvalidValue):
        await repository.resolve("no-such-branch")
    # A branch named like the reviewed commit's short id, pointing elsewhere, stands in
    # for nothing: the name is ambiguous. Named like no commit, a branch still resolves.
    repo = Repo(str(path))
    try:
        repo.refs[f"refs/heads/{first[:12]}".encode()] = second.encode()
        repo.refs[b"refs/heads/feature"] = first.encode()
    finally:
        repo.close()
    with pytest.raises(InvalidValue, match="ambiguous: a branch or tag and a commit id"):
        await repository.resolve(first[:12])
    assert await repository.resolve(first) == first
    assert await repository.resolve("feature") == first
    ref = "refs/hostkit/live"
    assert await repository.live(ref) is None
    assert await repository.mirror_ref(ref, first)
    assert not await repository.mirror_ref(ref, first)  # it already names it
    assert await repository.mirror_ref(ref, second)
    assert await repository.live(ref) == second
    for outside in ("refs/heads/master", "refs/hostkit/../heads/master"):
        with pytest.raises(InvalidValue, match="not a Host-owned ref"):
            await repository.mirror_ref(outside, first)
    assert [info.sha for info in await repository.log(second, limit=5)] == [second, first]
    assert await repository.changed(first, second) == ("notes.md",)
    assert await repository.read(first, "notes.md") is None
    with pytest.raises(ConfigError):
        await CoreRepository.open(tmp_path / "workspace-that-is-not-a-repo")


LAZY_TOOLS = '''
import importlib

from hostkit.effects import ToolContext, tool


@tool("probe.version")
async def which(ctx: ToolContext) -> str:
    """Say which revision's code runs (its sibling module imported at call time)."""
    return importlib.import_module(f"{__package__}.version").NAME
'''


async def test_a_rolled_back_revision_imports_its_modules_again(tmp_path: Path) -> None:
    # A's modules leave sys.modules when B's generation replaces A's; rolling back to A
    # must import them afresh, not hand out A's old tools whose package is gone.
    files = {"agent/tools.py": LAZY_TOOLS, "agent/version.py": "NAME = 'first'\n"}
    path, first = make_core(tmp_path, "probe", manifest={**MANIFEST, "memory": False}, files=files)
    config = core_host_config(tmp_path, {"probe": path})
    call = CallTools((provider_name("probe.version"), {}))
    model = ScriptedModel([call, Reply("one"), call, Reply("two"), call, Reply("three")])
    async with Host.open(config, capabilities=sources(config, model)) as host:
        await host.turns.run(request(core_id="probe"))
        second = commit(path, {"agent/version.py": "NAME = 'second'\n"}, "second")
        for live in (second, first):
            set_live(path, live)
            await host.apply_config(host.declared_config, capabilities=sources(config, model))
            await host.turns.run(request(core_id="probe"))
    answers = [
        r.messages[-1].content for r in (model.requests[1], model.requests[3], model.requests[5])
    ]
    assert ["first" in answers[0], "second" in answers[1], "first" in answers[2]] == [True] * 3


async def test_a_host_closing_leaves_another_hosts_revision_imported(tmp_path: Path) -> None:
    # sys.modules is the process's: a revision two Hosts run stays until both closed it.
    files = {"agent/tools.py": LAZY_TOOLS, "agent/version.py": "NAME = 'first'\n"}
    path, first = make_core(tmp_path, "probe", manifest={**MANIFEST, "memory": False}, files=files)
    configs = [core_host_config(tmp_path, {"probe": path})] * 2  # two Hosts, one database
    call = CallTools((provider_name("probe.version"), {}))
    models = [ScriptedModel([call, Reply("one")], repeat_last=True) for _ in configs]
    package = package_name("probe", first)
    async with Host.open(configs[1], capabilities=sources(configs[1], models[1])) as other:
        async with Host.open(configs[0], capabilities=sources(configs[0], models[0])) as host:
            await host.turns.run(request(core_id="probe"))
        assert package in sys.modules
        await other.turns.run(request(core_id="probe"))
        assert "first" in models[1].requests[-1].messages[-1].content
    assert package not in sys.modules
