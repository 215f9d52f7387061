"""Where a newcomer's commands find and make a project.

``hostkit init DIR`` (an existing directory, or a path ending in ``/``) writes
``DIR/hostkit.toml``; directories it creates are named; a failed init removes
what it created and nothing else. A command run from a project's subfolder
finds the project's ``hostkit.toml`` upward (as git finds ``.git``), up to
the home directory; ``-c`` still wins.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostkit.cores import init_core
from hostkit.errors import ConfigError
from tests.contract._cli_cores import head, invoke

PROJECT = """\
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"
script = [ { reply = "from the project" } ]

[agents.assistant]
provider = "p"
memory = false
"""


# -- init: where it writes ------------------------------------------------------------


def test_init_into_an_existing_directory_writes_hostkit_toml_inside_it(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    code, _, err = invoke("init", str(project))
    assert code == 0, err
    assert (project / "hostkit.toml").is_file()
    assert (project / "workspace").is_dir()
    assert (project / "cores" / "assistant" / "agent.yaml").is_file()
    assert "created the directory" not in err
    assert f"-c {project / 'hostkit.toml'}" in err  # the next: line names the file written


def test_init_of_a_path_ending_in_a_slash_makes_that_directory_and_says_so(
    tmp_path: Path,
) -> None:
    project = tmp_path / "new"
    code, _, err = invoke("init", f"{project}/")
    assert code == 0, err
    assert (project / "hostkit.toml").is_file()
    assert (project / "workspace").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]
    assert err.startswith(f"created the directory {project}/ (it did not exist)\n"), err


def test_init_names_the_missing_parent_directories_it_creates(tmp_path: Path) -> None:
    code, _, err = invoke("init", str(tmp_path / "a" / "b" / "my.toml"))
    assert code == 0, err
    assert (tmp_path / "a" / "b" / "my.toml").is_file()
    assert f"created the directory {tmp_path / 'a'}/" in err


# -- init: a failure leaves what was there, and only that ------------------------------


def test_a_failed_init_removes_what_it_made_and_keeps_what_was_there(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    (project / "workspace").write_text("a file where the workspace would go")
    code, out, err = invoke("init", str(project))
    assert code == 2
    assert out == ""
    assert err.startswith("error: cannot write"), err
    assert err.count("\n") == 1, err
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt", "workspace"]
    assert (project / "notes.txt").read_text() == "mine"
    assert (project / "workspace").read_text() == "a file where the workspace would go"


def test_a_failed_init_with_force_keeps_the_old_config_and_the_existing_core(
    tmp_path: Path,
) -> None:
    (tmp_path / "hostkit.toml").write_text("# mine\n")
    core = tmp_path / "cores" / "assistant"
    init_core(core, "assistant")
    first = head(core)
    (tmp_path / "workspace").write_text("not a directory")
    code, _, err = invoke("init", str(tmp_path / "hostkit.toml"), "--force")
    assert code == 2, err
    assert (tmp_path / "hostkit.toml").read_text() == "# mine\n"
    assert head(core) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cores", "hostkit.toml", "workspace"]


def test_a_failed_init_removes_the_directory_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def half_a_core(path: Path, core_id: str) -> str:
        (path / "agent").mkdir(parents=True)
        (path / "agent.yaml").write_text("id: assistant\n")
        raise ConfigError("the disk filled up halfway")

    # ``hostkit init`` loads the core writer on use (``hostkit.cores`` names it lazily).
    monkeypatch.setattr("hostkit.cores._starter.init_core", half_a_core)
    code, _, err = invoke("init", str(tmp_path / "new" / "hostkit.toml"))
    assert code == 2
    assert err == "error: the disk filled up halfway\n"
    assert list(tmp_path.iterdir()) == []


# -- finding the project from a subfolder ----------------------------------------------


def test_a_command_in_a_project_subfolder_uses_the_projects_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hostkit.toml").write_text(PROJECT)
    below = tmp_path / "workspace" / "deeper"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    code, _, err = invoke("run", "hi")
    assert code == 0, err
    assert "outcome: completed" in err
    assert str(tmp_path / "hostkit.db") in err
    assert (tmp_path / "hostkit.db").is_file()
    assert list(below.iterdir()) == []  # no second project started down here
    code, _, err = invoke("sessions")
    assert code == 0, err
    assert "nothing to read here" not in err


def test_the_config_option_wins_over_a_project_above(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hostkit.toml").write_text(PROJECT)
    other = tmp_path / "sub" / "other"
    other.mkdir(parents=True)
    (other / "hostkit.toml").write_text(PROJECT)
    monkeypatch.chdir(tmp_path / "sub")
    code, _, err = invoke("run", "hi", "-c", str(other / "hostkit.toml"))
    assert code == 0, err
    assert str(other / "hostkit.db") in err
    assert (other / "hostkit.db").is_file()
    assert not (tmp_path / "hostkit.db").exists()


def test_the_look_upward_stops_at_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hostkit.toml").write_text(PROJECT)  # above home: not this user's project
    home = tmp_path / "home"
    (home / "scratch").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "scratch")
    code, _, err = invoke("sessions")
    assert code == 2
    assert "no hostkit.toml in this directory or above it" in err


def test_a_config_above_that_another_user_owns_is_refused_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hostkit.toml").write_text(PROJECT)
    below = tmp_path / "shared"
    below.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path.parent))
    monkeypatch.chdir(below)
    # As if another user had written it (a planted /tmp/hostkit.toml chooses the code run).
    monkeypatch.setattr(os, "getuid", lambda: (tmp_path / "hostkit.toml").stat().st_uid + 1)
    code, out, err = invoke("run", "hi")
    assert code == 2
    assert out == ""
    assert "belongs to another user" in err
    assert "pass -c FILE" in err
    assert not (tmp_path / "hostkit.db").exists()
    assert list(below.iterdir()) == []


def test_a_config_in_a_named_directory_that_another_user_owns_is_refused_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-c DIR`` names a directory, not the file in it: that file is checked as one found
    above would be; named as a file (``-c DIR/hostkit.toml``) it is used."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hostkit.toml").write_text(PROJECT)
    monkeypatch.chdir(tmp_path)
    someone_else = (shared / "hostkit.toml").stat().st_uid + 1
    monkeypatch.setattr(os, "getuid", lambda: someone_else)
    code, out, err = invoke("sessions", "-c", str(shared))
    assert (code, out) == (2, "")
    assert "belongs to another user" in err
    assert f"pass -c {shared / 'hostkit.toml'} to use it" in " ".join(err.split())
    assert not (shared / "hostkit.db").exists()
    # (Not this user's database either: an operator command then says why.)
    code, _, err = invoke("sessions", "-c", str(shared / "hostkit.toml"), "--reason", "audit")
    assert code == 0, err
