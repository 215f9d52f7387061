"""Clause: `hostkit init` writes a starter core (agent.yaml + agent/ with one tool and its test)
that `hostkit core promote` accepts, and a turn then runs on it.

The in-process test reads what init wrote with the Host's own loaders; the
end-to-end test runs the three commands a user types as real processes:
init, promote (the starter's own pytest suite runs in the test gate) and
run (the model calls the starter's tool, whose call counter lives in
``ctx.state``), then checks the turn's recorded revision is the live commit.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from hostkit.cores import STARTER_TOOL, load_manifest
from hostkit.host import load_config
from tests.contract._cli_cores import head, invoke, live

STARTER_CORE_FILES = {"agent.yaml", "agent", "tests", "pytest.ini", ".gitignore", ".git"}

# The starter's local model played by a script under the same provider name: the model
# calls the core's one tool, then answers.
SCRIPTED_LOCAL = """[providers.local]
kind = "scripted"
script = [
  { tool = "notes.word_count", arguments = { text = "one two three" } },
  { reply = "That is three words." },
]
"""


def test_init_writes_a_config_serving_the_starter_core(tmp_path: Path) -> None:
    file = tmp_path / "hostkit.toml"
    code, out, err = invoke("init", str(file))
    assert code == 0, err
    assert out == ""
    core = tmp_path / "cores" / "assistant"
    assert f"wrote the starter core {core}/" in err
    assert 'next: hostkit core promote assistant --reason "first revision"' in err
    config = load_config(file)  # the starter config is valid: no name serves two agents
    assert config.cores["assistant"].path == "cores/assistant"
    assert config.cores["assistant"].ref == "refs/hostkit/live"
    assert sorted(config.agents) == ["notes"]
    assert {path.name for path in core.iterdir()} == STARTER_CORE_FILES
    manifest = load_manifest((core / "agent.yaml").read_bytes())
    assert manifest.id == "assistant"
    assert manifest.model in config.providers
    assert dict(manifest.capabilities) == {STARTER_TOOL: "allow"}
    assert live(core) is None  # nothing runs until a promotion passes the gates

    first = head(core)
    code, _, err = invoke("init", str(file))
    assert code == 2
    assert "exists; use --force to overwrite" in err
    file.write_text("# edited\n")
    code, _, err = invoke("init", str(file), "--force")
    assert code == 0, err
    assert f"kept the core {core}/" in err
    assert head(core) == first
    assert "[cores.assistant]" in file.read_text()


def test_init_refuses_a_starter_core_directory_that_holds_something_else(tmp_path: Path) -> None:
    core = tmp_path / "cores" / "assistant"
    core.mkdir(parents=True)
    (core / "notes.txt").write_text("mine")
    code, out, err = invoke("init", str(tmp_path / "hostkit.toml"))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert "is not empty" in err
    assert not (tmp_path / "hostkit.toml").exists()
    assert sorted(path.name for path in core.iterdir()) == ["notes.txt"]


# The `hostkit` script a user types (beside this interpreter), run in the project directory.
HOSTKIT = str(Path(sys.executable).with_name("hostkit"))


def hostkit(*args: str, cwd: Path) -> tuple[int, str, str]:
    """The CLI as a user runs it: a real process, no terminal on stdin."""
    result = subprocess.run(
        [HOSTKIT, *args],
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.slow
def test_init_then_promote_then_run_a_turn_on_the_starter_core(tmp_path: Path) -> None:
    code, _, err = hostkit("init", cwd=tmp_path)
    assert code == 0, err
    file = tmp_path / "hostkit.toml"
    starter = file.read_text()
    local = starter.index("[providers.local]")
    end = starter.index("\n\n", local)
    file.write_text(starter[:local] + SCRIPTED_LOCAL + starter[end:])

    code, out, err = hostkit("core", "promote", "assistant", "--reason", "first", cwd=tmp_path)
    assert code == 0, out + err
    assert "passed  tests: 2 passed" in out
    core = tmp_path / "cores" / "assistant"
    assert live(core) == head(core)

    code, out, err = hostkit("run", "How many words in 'one two three'?", cwd=tmp_path)
    assert code == 0, err
    assert "That is three words." in out
    assert f"effect {STARTER_TOOL}: succeeded" in err
    with closing(sqlite3.connect(tmp_path / "hostkit.db")) as db:
        turns = db.execute("SELECT core_id, core_revision FROM turns").fetchall()
        (count,) = db.execute("SELECT value FROM core_state").fetchone()
    assert turns == [("assistant", head(core))]
    assert count == "1"  # the tool counted its one call in the session's state


def test_init_force_on_a_promoted_core_says_run_next_not_promote(tmp_path: Path) -> None:
    """Re-init keeps the core: its next step depends on whether that core's HEAD is live."""
    assert invoke("init", str(tmp_path))[0] == 0
    core = tmp_path / "cores" / "assistant"
    assert invoke("core", "promote", "assistant", "--reason", "first", project=tmp_path)[0] == 0
    code, out, err = invoke("init", "--force", str(tmp_path))
    assert code == 0
    (step,) = [line for line in (out + err).splitlines() if line.startswith("next: ")]
    assert "core promote" not in step
    assert step.startswith("next: hostkit run -c ")
    assert "the kept core's HEAD was promoted before" in step

    # A commit after the promotion: HEAD is not live, so promoting is the next step again.
    (core / "agent" / "notes.md").write_text("a change\n")
    subprocess.run(["git", "-C", str(core), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(core), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    assert live(core) != head(core)
    code, out, err = invoke("init", "--force", str(tmp_path))
    assert code == 0
    (step,) = [line for line in (out + err).splitlines() if line.startswith("next: ")]
    assert step.startswith("next: hostkit core promote assistant")
