"""A stdio MCP server's extra read-only roots come only from files the agent cannot write.

``plan_launch`` binds a virtualenv's root and its base interpreter's prefix (the
``home =`` of ``pyvenv.cfg``) read-only into the server's sandbox. The agent
writes the workspace (``files.write``), so a ``pyvenv.cfg`` there must never
turn into a bind of the user's secrets; a real virtualenv outside the workspace
keeps its base interpreter and still starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit.builtins.mcp._launch import Launch, plan_launch
from hostkit.builtins.process import SandboxPolicy, probe_bubblewrap, visible_roots
from hostkit.effects import McpServerDeclaration
from tests.parts import needs
from tests.support import in_mount_namespace

_PROBE = probe_bubblewrap()
pytestmark = needs("sandbox", None if _PROBE.ok else f"plan_launch refuses: {_PROBE.reason}")

SECRET = "ssh-private-key-MUST-NOT-LEAK"


def _plan(
    workspace: Path,
    command: tuple[str, ...],
    *,
    home: Path | None = None,
    hidden: tuple[Path, ...] = (),
) -> Launch:
    environ = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    if home is not None:
        environ["HOME"] = str(home)
    declaration = McpServerDeclaration(name="local", transport="stdio", command=command)
    return plan_launch(
        declaration,
        workspace=workspace,
        sandbox=SandboxPolicy(),
        environ=environ,
        allowlist=("PATH", "LANG"),
        hidden=hidden,
    )


def _run(launch: Launch) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(launch.argv), env=dict(launch.env), capture_output=True, text=True, timeout=60
    )


def _victim(tmp_path: Path) -> Path:
    """A user's home: an SSH key, and a ``bin/python3`` so it even looks like a Python."""
    victim = tmp_path / "victim_home"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "id_rsa").write_text(SECRET)
    (victim / "bin").mkdir()
    (victim / "bin" / "python3").write_text("#!/bin/sh\nexit 0\n")
    (victim / "bin" / "python3").chmod(0o755)
    return victim


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _binds(launch: Launch, path: Path) -> bool:
    target = Path(os.path.realpath(path))
    return any(
        target == Path(os.path.realpath(r)) or target.is_relative_to(os.path.realpath(r))
        for r in launch.read_only
    )


@pytest.mark.parametrize("home", ["{victim}", "{victim}/bin", "/", "{victim}/missing"])
def test_a_planted_pyvenv_cfg_in_the_workspace_binds_nothing(tmp_path: Path, home: str) -> None:
    victim = _victim(tmp_path)
    workspace = tmp_path / "ws"
    _script(workspace / "server.sh", f"cat {victim}/.ssh/id_rsa")
    # What the model writes with files.write:
    (workspace / "pyvenv.cfg").write_text(f"home = {home.format(victim=victim)}\n")
    launch = _plan(workspace, ("./server.sh",))
    assert launch.read_only == ()
    assert str(victim) not in launch.argv
    options = launch.argv[: launch.argv.index("--")]
    # No bind of the whole file system ("--remount-ro /" makes the sandbox's own root
    # read-only; it binds nothing).
    assert not any(
        option.endswith("bind") and options[at + 1] == "/" for at, option in enumerate(options)
    )


def test_a_planted_venv_inside_the_workspace_binds_nothing(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    workspace = tmp_path / "ws"
    _script(workspace / "env" / "bin" / "server", f"cat {victim}/.ssh/id_rsa")
    (workspace / "env" / "pyvenv.cfg").write_text(f"home = {victim}/bin\n")
    launch = _plan(workspace, ("./env/bin/server",))
    assert launch.read_only == ()


def test_a_sandboxed_server_cannot_read_what_a_planted_cfg_names(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    workspace = tmp_path / "ws"
    _script(workspace / "server.sh", f"cat {victim}/.ssh/id_rsa; echo done")
    (workspace / "pyvenv.cfg").write_text(f"home = {victim}/bin\n")
    outcome = _run(_plan(workspace, ("./server.sh",)))
    assert "done" in outcome.stdout, outcome.stderr  # the server ran in its sandbox
    assert SECRET not in outcome.stdout + outcome.stderr


@pytest.mark.parametrize("home", ["/", "{victim}", "{victim}/.ssh", "{tmp}/missing"])
def test_an_outside_venv_binds_no_home_that_is_not_an_interpreter(
    tmp_path: Path, home: str
) -> None:
    victim = _victim(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    venv = tmp_path / "venv"
    _script(venv / "bin" / "server", f"cat {victim}/.ssh/id_rsa; echo done")
    value = home.format(victim=victim, tmp=tmp_path)
    (venv / "pyvenv.cfg").write_text(f"home = {value}\n")
    launch = _plan(workspace, (str(venv / "bin" / "server"),))
    assert launch.read_only == (venv,)
    outcome = _run(launch)
    assert "done" in outcome.stdout, outcome.stderr
    assert SECRET not in outcome.stdout + outcome.stderr


def test_an_outside_venv_binds_no_prefix_holding_a_home_or_host_state(tmp_path: Path) -> None:
    prefix = tmp_path / "py"
    _script(prefix / "bin" / "python3", "exit 0")
    (prefix / "home" / "user").mkdir(parents=True)
    (prefix / "state").mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    venv = tmp_path / "venv"
    _script(venv / "bin" / "server", "echo done")
    (venv / "pyvenv.cfg").write_text(f"home = {prefix}/bin\n")
    command = (str(venv / "bin" / "server"),)
    assert _plan(workspace, command, home=prefix / "home" / "user").read_only == (venv,)
    assert _plan(workspace, command, hidden=(prefix / "state",)).read_only == (venv,)
    # The same interpreter, holding neither, is bound:
    assert _plan(workspace, command, home=tmp_path / "elsewhere").read_only == (venv, prefix)


def test_a_real_venv_outside_the_workspace_keeps_its_base_interpreter(tmp_path: Path) -> None:
    assert sys.prefix != sys.base_prefix, "the suite runs from a virtualenv"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    code = "import json, anyio, sys; print(json.dumps({'ok': sys.prefix}))"
    launch = _plan(workspace, (sys.executable, "-c", code), home=Path.home())
    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.base_prefix))
    assert _binds(launch, venv)
    shown = [Path(os.path.realpath(r)) for r in visible_roots(workspace.resolve())]
    if not any(base == r or base.is_relative_to(r) for r in shown):
        assert base in launch.read_only
    outcome = _run(launch)
    assert outcome.returncode == 0, outcome.stderr
    assert '"ok"' in outcome.stdout


def test_a_planted_pyvenv_cfg_binds_nothing_by_another_mount_path_of_the_workspace(
    tmp_path: Path,
) -> None:
    """The server's command names the workspace through a bind mount of it: the
    ``pyvenv.cfg`` beside it is still the agent's, wherever the mount shows it, and
    never turns into a bind (it named a home holding an SSH key)."""
    victim = _victim(tmp_path)
    workspace, alias = tmp_path / "ws", tmp_path / "alias"
    _script(workspace / "server.sh", f"cat {victim}/.ssh/id_rsa")
    (workspace / "pyvenv.cfg").write_text(f"home = {victim}/bin\n")
    alias.mkdir()
    child = (
        "import json, subprocess, sys\n"
        "from pathlib import Path\n"
        "from tests.security.test_mcp_program_roots import _plan\n"
        "ws, alias = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "subprocess.run(['mount', '--bind', str(ws), str(alias)], check=True)\n"
        "try:\n"
        "    answer = repr(_plan(ws, (str(alias / 'server.sh'),)).read_only)\n"
        "except Exception as exc:\n"
        "    answer = f'{type(exc).__name__} {exc}'\n"
        "print(json.dumps(answer))\n"
    )
    answer = in_mount_namespace(child, str(workspace), str(alias))
    # Nothing is bound for it: the workspace is shown at its own path only, so the
    # server's path there is refused as one the sandbox does not show.
    assert str(victim) not in answer
    assert answer.startswith("McpCommandNotFound")
    assert "outside what the sandbox shows" in answer
