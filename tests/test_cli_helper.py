"""The helper that runs the ``hostkit`` command for tests (tests/cli.py): a command forked
from the warm process reads exactly as one a fresh interpreter ran."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli import run_cli

CONFIG = (
    '[providers.test]\nkind = "scripted"\nscript = [{reply = "forked or not"}]\n'
    '[agents.assistant]\nprovider = "test"\nmemory = false\n'
)


def both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[subprocess.CompletedProcess[bytes], ...]:
    """``hostkit ARGS`` forked, then in a fresh interpreter (each in a fresh project, whose
    path its output shows as PROJECT)."""
    done = []
    for fork in ("1", "0"):
        project = tmp_path / f"fork-{fork}"
        project.mkdir()
        (project / "hostkit.toml").write_text(CONFIG)
        env = {**os.environ, "COLUMNS": "90", "HOSTKIT_TEST_FORK": fork}
        monkeypatch.setenv("HOSTKIT_TEST_FORK", fork)
        ran = run_cli(*args, cwd=project, env=env)
        here = str(project).encode()
        ran.stdout, ran.stderr = (o.replace(here, b"PROJECT") for o in (ran.stdout, ran.stderr))
        done.append(ran)
    return tuple(done)


@pytest.mark.parametrize(
    "args",
    [("--help",), ("sessions", "--bogus"), ("run", "hello"), ("approvals", "list", "--json")],
)
def test_a_forked_command_prints_and_ends_as_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str]
) -> None:
    forked, fresh = both(tmp_path, monkeypatch, *args)
    ids = (b"ses_", b"turn_")
    if any(i in fresh.stderr for i in ids):  # a turn's ids differ run to run
        forked.stderr, fresh.stderr = (
            b"\n".join(line for line in p.stderr.splitlines() if not any(i in line for i in ids))
            for p in (forked, fresh)
        )
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert forked.returncode == (2 if "--bogus" in args else 0)


def test_each_command_is_a_process_of_its_own_in_its_own_directory(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    first = run_cli("run", "hello", cwd=tmp_path)
    second = run_cli("sessions", cwd=tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == b"forked or not\n"
    # The second read what the first wrote, in the same directory: both ran there.
    assert second.stdout.count(b"ses_") == 1


def test_a_command_past_its_timeout_is_killed(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    started: list[int] = []
    begun = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        # Serves until stopped.
        run_cli("serve", "--port", "0", cwd=tmp_path, timeout=3, started=started.append)
    assert time.monotonic() - begun < 30
    assert len(started) == 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{started[0]}").exists():
        time.sleep(0.05)
    assert not Path(f"/proc/{started[0]}").exists()


def test_an_interpreter_setting_in_the_environment_starts_a_fresh_interpreter(
    tmp_path: Path,
) -> None:
    """``PYTHONIOENCODING`` is read once, as Python starts: a fork would keep its parent's."""
    (tmp_path / "hostkit.toml").write_text(CONFIG.replace("forked or not", "déjà"))
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = run_cli("run", "hello", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"d\\xe9j\\xe0\n"
