"""Clause: `hostkit core init` writes a starter core (agent.yaml + agent/ with one tool and
its test) as one Git commit, and prints the [cores.<id>] table that serves it.

The command runs in-process (``CliRunner``); the repository is read back with
dulwich, and agent.yaml with the same schema the Host loads it with.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import anyio
import pytest
from dulwich.repo import Repo
from typer.testing import CliRunner

from hostkit.cli import app
from hostkit.cores import STARTER_TOOL, init_core, load_manifest, starter_files
from hostkit.errors import ConfigError, InvalidValue, StateConflict

STARTER_FILES = {
    b".gitignore",
    b"agent.yaml",
    b"agent/__init__.py",
    b"agent/tools.py",
    b"pytest.ini",
    b"tests/conftest.py",
    b"tests/test_tools.py",
}


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["core", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def committed(path: Path) -> tuple[str, set[bytes], bytes]:
    """HEAD's sha, the paths of its tree, and its author."""
    with Repo(str(path)) as repo:
        head = repo.head()
        commit = repo[head]
        paths = {entry.path for entry in repo.object_store.iter_tree_contents(commit.tree)}
        return head.decode(), paths, commit.author


def test_core_init_commits_a_starter_and_prints_the_table_that_serves_it(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text("")
    target = tmp_path / "cores" / "writer"
    code, out, err = invoke("init", str(target), "--config", str(tmp_path / "hostkit.toml"))
    assert code == 0, err
    head, paths, _ = committed(target)
    assert paths == STARTER_FILES
    assert f"wrote the core writer at {target} (commit {head[:12]})" in err
    # The path is relative to hostkit.toml's folder, as [cores] paths are.
    assert out == '[cores.writer]\npath = "cores/writer"\n'
    assert 'hostkit core promote writer --reason "first revision"' in err
    manifest = load_manifest((target / "agent.yaml").read_bytes())
    assert manifest.id == "writer"
    assert manifest.model == "local"
    # The one tool it has is the one thing it is granted.
    assert dict(manifest.capabilities) == {STARTER_TOOL: "allow"}
    assert manifest.tools == ["tools"]
    assert f'@tool("{STARTER_TOOL}")' in (target / "agent" / "tools.py").read_text()


def test_the_starter_manifest_says_promotion_not_the_ref_decides_what_runs() -> None:
    """The first file an author reads must not teach that moving the Git ref changes what
    runs: the Host's store does (docs/revisions.md); the ref is only its mirror."""
    comment = starter_files("notes", model="local")["agent.yaml"].split("\nid:", 1)[0]
    header = " ".join(line.lstrip("#").strip() for line in comment.splitlines())
    assert "hostkit core promote notes" in header
    assert "refs/hostkit/live only" in header
    assert "mirrors" in header
    assert "moving it by hand changes nothing" in header
    assert "points at" not in header


def test_core_init_takes_the_id_and_model_from_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "Some Dir"
    # A path relative to the working directory: every file is in the commit all the same.
    code, out, err = invoke("init", "Some Dir", "--id", "notes-bot", "--model", "openai")
    assert code == 0, err
    assert out == '[cores.notes-bot]\npath = "Some Dir"\n'
    assert committed(target)[1] == STARTER_FILES
    manifest = load_manifest((target / "agent.yaml").read_bytes())
    assert (manifest.id, manifest.model) == ("notes-bot", "openai")


def test_core_init_refuses_a_non_empty_directory_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    code, out, err = invoke("init", str(target))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert "is not empty" in err
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "keep me"
    with pytest.raises(ConfigError, match="is not empty"):
        init_core(target, "mine")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        init_core(tmp_path / "file", "file")


def test_core_init_twice_says_the_core_is_there_and_how_to_serve_it(tmp_path: Path) -> None:
    """The second `core init cores/writer >> hostkit.toml` of a newcomer: the first one wrote
    the core; the refusal says so and what is left to do, and nothing changes."""
    target = tmp_path / "writer"
    assert invoke("init", str(target))[0] == 0
    before = sorted(p.name for p in target.iterdir())
    code, out, err = invoke("init", str(target))
    assert (code, out) == (2, "")
    assert "is not empty: a new core needs an empty directory; it holds a core already" in err
    assert "add its [cores.<id>] table" in err
    assert sorted(p.name for p in target.iterdir()) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("Bad Name",), "is not a core id"),
        (("x", "--id", "1abc"), "is not a core id"),
        (("x", "--id", "a" * 65), "is not a core id"),
        (("x", "--model", "\x1b[2J"), "model must name a provider"),
    ],
)
def test_core_init_refuses_a_bad_id_or_model_in_one_line(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    path, *options = args
    code, out, err = invoke("init", str(tmp_path / path), *options)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert expected in err
    assert "\x1b" not in err
    assert not (tmp_path / path).exists()


def test_the_first_commit_is_hostkit_unless_git_names_someone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    # No global, XDG or system git config: nobody is named.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    init_core(tmp_path / "a", "a")
    assert committed(tmp_path / "a")[2] == b"hostkit <hostkit@localhost>"
    (tmp_path / ".gitconfig").write_text("[user]\n\tname = Ada\n\temail = ada@example.org\n")
    init_core(tmp_path / "b", "b")
    assert committed(tmp_path / "b")[2] == b"Ada <ada@example.org>"
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Grace")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "grace@example.org")
    init_core(tmp_path / "c", "c")
    assert committed(tmp_path / "c")[2] == b"Grace <grace@example.org>"


def test_a_bad_id_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(InvalidValue, match="not a core id"):
        init_core(tmp_path / "x", "X")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("name", "where"), [("notes", "cores"), ("assistant", "elsewhere")])
def test_core_init_refuses_a_name_the_configuration_already_gives_an_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    """`hostkit init` configures the agent `notes` and the core `assistant` (at
    cores/assistant): a core under either name anywhere else would make the printed
    table break hostkit.toml, so nothing is written."""
    monkeypatch.chdir(tmp_path)
    config = '[cores.assistant]\npath = "cores/assistant"\n\n[agents.notes]\nprovider = "local"\n'
    (tmp_path / "hostkit.toml").write_text(config)
    code, out, err = invoke("init", f"{where}/{name}")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"hostkit.toml already configures an agent named {name!r}" in lines[0]
    assert "choose another --id" in lines[0]
    assert not (tmp_path / where).exists()
    # Another id for the same directory is fine.
    code, out, err = invoke("init", f"{where}/{name}", "--id", "writer")
    assert code == 0, err
    assert out == f'[cores.writer]\npath = "{where}/{name}"\n'


def test_core_init_at_the_configured_path_of_a_core_makes_its_missing_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration names the core and its path, the repository is not there (the
    composition says "no repository at ...; create one with `hostkit core init PATH`"):
    init writes it there and prints no table to add, the one there already serving it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostkit.toml").write_text('[cores.assistant]\npath = "cores/assistant"\n')
    code, out, err = invoke("init", "cores/assistant")
    assert code == 0, err
    assert out == ""
    assert "where hostkit.toml configures it" in err
    assert (tmp_path / "cores" / "assistant" / "agent.yaml").is_file()


def test_core_init_beside_an_unreadable_configuration_still_writes(tmp_path: Path) -> None:
    """A file that is not TOML names no agents; the commands that load it say what is wrong."""
    (tmp_path / "hostkit.toml").write_text("[agents.notes\n")
    target = tmp_path / "notes"
    code, _, err = invoke("init", str(target), "--config", str(tmp_path / "hostkit.toml"))
    assert code == 0, err
    assert committed(target)[1] == STARTER_FILES


def test_core_init_refuses_a_model_no_provider_of_the_configuration_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Promotion would refuse such a core; refused now, nothing is written or committed
    that the user would have to fix in the core's repository."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostkit.toml").write_text('[providers.local]\nkind = "local"\n')
    code, out, err = invoke("init", "cores/writer", "--model", "locl")
    assert (code, out) == (2, "")
    said = " ".join(err.split())
    assert "--model 'locl' is not a provider under [providers] in hostkit.toml" in said
    assert "did you mean 'local'?" in said
    assert "nothing was written" in said
    assert not (tmp_path / "cores").exists()
    assert invoke("init", "cores/writer", "--model", "local")[0] == 0


def test_core_init_without_model_takes_the_only_provider_or_asks_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostkit.toml").write_text('[providers.p]\nkind = "scripted"\n')
    assert invoke("init", "cores/one")[0] == 0
    assert load_manifest((tmp_path / "cores/one/agent.yaml").read_bytes()).model == "p"
    (tmp_path / "hostkit.toml").write_text(
        '[providers.p]\nkind = "scripted"\n\n[providers.q]\nkind = "scripted"\n'
    )
    code, _, err = invoke("init", "cores/two")
    assert code == 2
    assert "choose one with --model" in " ".join(err.split())
    assert not (tmp_path / "cores/two").exists()


def test_core_init_outside_a_project_says_to_make_one_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """There is no hostkit.toml to add the table to, and the promote it suggests would
    find no project: the output says how to make one."""
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("init", "mycore")
    assert code == 0, err
    assert "add this table to a project's hostkit.toml:" in err
    assert "no hostkit.toml here or in a parent directory: `hostkit init` makes a project" in err
    assert out == '[cores.mycore]\npath = "mycore"\n'


def test_the_starters_test_state_writes_as_the_real_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated tests' ``ctx.state`` fake keeps the real one's rules: a plain ``set``
    writes whatever is current (the promotion gate must not reject code the runtime
    runs), and only a given ``expected`` version is compared."""
    (tmp_path / "hostkit.toml").write_text("")
    target = tmp_path / "cores" / "writer"
    code, _, err = invoke("init", str(target), "--config", str(tmp_path / "hostkit.toml"))
    assert code == 0, err
    spec = importlib.util.spec_from_file_location(
        "starter_test_tools", target / "tests" / "test_tools.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    state = module.MemoryState()

    async def writes() -> None:
        assert await state.set("k", 1) == 1
        assert await state.set("k", 2) == 2
        assert await state.get("k") == 2
        assert await state.set("k", 3, expected=2) == 3
        with pytest.raises(StateConflict):
            await state.set("k", 4, expected=2)
        with pytest.raises(StateConflict):
            await state.set("new", 1, expected=1)
        assert await state.set("fresh", 1, expected=None) == 1

    anyio.run(writes)
