"""The helper that runs the ``hostkit`` command for tests (tests/cli.py): a command forked
from the warm process reads exactly as one a fresh interpreter ran."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests import cli
from tests.cli import run_cli

CONFIG = (
    '[providers.test]\nkind = "scripted"\nscript = [{reply = "forked or not"}]\n'
    '[agents.assistant]\nprovider = "test"\nmemory = false\n'
)


def make_project(project: Path) -> Path:
    project.mkdir(parents=True)
    (project / "hostkit.toml").write_text(CONFIG)
    return project


def strip_ids(output: bytes) -> bytes:
    """``output`` less the lines naming a turn's ids (they differ run to run)."""
    return b"\n".join(
        line
        for line in output.splitlines()
        if not any(word in line for word in (b"ses_", b"turn_"))
    )


def forked_commands() -> list[psutil.Process]:
    """The commands this worker's warm process runs now (none of them other tests')."""
    zygote = cli._zygote
    assert zygote is not None
    return psutil.Process(zygote.process.pid).children()


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


def test_a_command_ends_when_it_ends_whatever_runs_beside_it(tmp_path: Path) -> None:
    """A command forked while another was running held that one's result connection open:
    the first, long done, was waited for until the second ended (or its own timeout)."""
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    pids: list[int] = []
    first_started = threading.Event()
    done: list[subprocess.CompletedProcess[bytes]] = []

    def first() -> None:
        done.append(
            run_cli("doctor", cwd=tmp_path, timeout=60, started=lambda _: first_started.set())
        )

    def beside() -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            run_cli("serve", "--port", "0", cwd=tmp_path, timeout=90, started=pids.append)

    running = threading.Thread(target=first)
    running.start()
    assert first_started.wait(30)
    serving = threading.Thread(target=beside, daemon=True)
    serving.start()
    try:
        running.join(45)
        assert not running.is_alive(), "the first command was held by the one beside it"
        assert done[0].returncode in (0, 1), done[0].stderr
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        serving.join(30)


def test_what_the_cli_reads_as_it_loads_is_the_command_s_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rich's console is made as the CLI is imported: a warm process started under
    ``COLUMNS=40`` wrapped every forked command's stderr at 40 columns, and one command's
    ``FORCE_COLOR`` was ignored. Each now prints as a fresh process would."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(cli, "_zygote", None)  # a warm process started under COLUMNS=40
    try:
        for extra in ({"COLUMNS": "200"}, {"COLUMNS": "200", "FORCE_COLOR": "1"}):
            printed = []
            for fork in ("1", "0"):
                monkeypatch.setenv("HOSTKIT_TEST_FORK", fork)
                project = make_project(tmp_path / f"{fork}-{len(extra)}")
                ran = run_cli("run", "hello", cwd=project, env={**os.environ, **extra})
                printed.append((ran.stdout, strip_ids(ran.stderr.replace(bytes(project), b"P"))))
            assert printed[0] == printed[1]
    finally:
        zygote = cli._zygote
        if zygote is not None:
            with zygote.process:  # closes its stdin (it ends and removes its socket), waits
                pass


def test_a_command_whose_deadline_passes_before_it_begins_is_killed(tmp_path: Path) -> None:
    """The warm process's answer with the pid found its requester gone: it died of the
    broken pipe, leaving the command running and every other command without a status."""
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    warm = cli._zygote
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("serve", "--port", "0", cwd=tmp_path, timeout=0.0001)
    # The warm process serves on; it takes requests in order, so the one given up on was
    # forked (and killed) before this one.
    assert run_cli("--version", cwd=tmp_path).returncode == 0
    assert warm is not None
    assert cli._zygote is warm
    assert warm.process.poll() is None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and forked_commands():
        time.sleep(0.1)
    assert forked_commands() == []
