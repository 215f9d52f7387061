"""Clause: SIGTERM and SIGHUP stop a command that runs a turn as Ctrl-C does.

A service manager stops a command with SIGTERM (systemd, ``docker stop``, a
CI job's timeout) and a terminal that closes sends SIGHUP. `hostkit run` and
the approval commands, which run turns, then end the turn in their own
process and record its end, say in one line what became of it, and exit with
the shell's status for that signal (143, 129), within seconds: not killed on
the spot, leaving the turn ``running`` until its lease expires in another
process. The commands run for real, as a script or a service manager starts
them (stdin not a terminal, output to files), their model a loopback server
scripted by the test.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.contract.test_clause_cli_approval_interrupt import OPENING_HELD, pending_rows
from tests.contract.test_cli_approvals import CONFIG, hostkit, write_call
from tests.wire import WireServer, serve_wire

pytestmark = pytest.mark.anyio

RECORDED = "interrupted: the turn stopped and was recorded as it ended; `hostkit sessions` shows it"
# From the signal to the exit: a second or two; a loaded machine takes longer.
BOUND_S = 20.0


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


@pytest.fixture
async def project(tmp_path: Path, wire: WireServer) -> Path:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG.format(base_url=wire.base_url))
    return tmp_path


@dataclass(frozen=True)
class Stopped:
    """How a command sent signals ended: its status, what it wrote, and the seconds from
    the first signal to its exit."""

    code: int
    out: str
    err: str
    took: float


async def signal_hostkit(
    argv: Sequence[str],
    cwd: Path,
    ready: Callable[[], Awaitable[None]],
    signals: Sequence[signal.Signals],
    *,
    between_s: float = 0.5,
) -> Stopped:
    """``hostkit ARGV`` as a service runs it, sent ``signals`` (``between_s`` apart) once
    ``ready()`` returns."""
    out_path, err_path = cwd / "stop.out", cwd / "stop.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = await anyio.open_process(
            [sys.executable, "-m", "hostkit", *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**os.environ, "COLUMNS": "200"},
        )
        try:
            await ready()
            started = time.monotonic()
            for index, number in enumerate(signals):
                if index:
                    await anyio.sleep(between_s)
                process.send_signal(number)
            with anyio.fail_after(60):
                await process.wait()
            took = time.monotonic() - started
        finally:
            if process.returncode is None:
                process.kill()
            await process.aclose()
    assert process.returncode is not None
    return Stopped(process.returncode, out_path.read_text(), err_path.read_text(), took)


def model_answering(wire: WireServer) -> Callable[[], Awaitable[None]]:
    """Ready once the command's model has begun its held answer (the turn runs)."""

    async def ready() -> None:
        with anyio.fail_after(60):
            await wire.holding.wait()

    return ready


def turn_states(project: Path) -> list[str]:
    with closing(sqlite3.connect(project / "state" / "hostkit.db")) as connection, connection:
        return [row[0] for row in connection.execute("SELECT status FROM turns ORDER BY rowid")]


@pytest.mark.parametrize(
    ("number", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["term", "hup"]
)
async def test_a_stop_signal_mid_turn_ends_the_turn_recorded_and_exits_with_its_status(
    project: Path, wire: WireServer, number: signal.Signals, status: int
) -> None:
    wire.script(OPENING_HELD)
    stopped = await signal_hostkit(
        ["run", "--agent", "writer", "hello"], project, model_answering(wire), [number]
    )
    assert stopped.code == status, stopped
    assert stopped.err.count(RECORDED) == 1, stopped.err
    assert "Traceback" not in stopped.err
    assert turn_states(project) == ["cancelled"]  # ended by its own process, not left running
    assert stopped.took < BOUND_S, stopped.took


async def test_sigterm_while_an_approvals_continuation_runs_says_where_it_was_left(
    project: Path, wire: WireServer
) -> None:
    """`hostkit approvals approve` runs the paused turn's continuation: stopped while
    its model answers, it ends that turn recorded and says so, as for Ctrl-C."""
    wire.script(write_call(), OPENING_HELD)
    code, _, err = await hostkit("run", "--agent", "writer", "write out.md", cwd=project)
    assert code == 3, err
    ((approval_id, _),) = pending_rows(project / "state" / "hostkit.db")

    stopped = await signal_hostkit(
        ["approvals", "approve", approval_id], project, model_answering(wire), [signal.SIGTERM]
    )
    assert stopped.code == 143, stopped
    line = (
        f"interrupted: {approval_id} is executed and its continuation was recorded as it "
        "ended; `hostkit approvals list --all` and `hostkit sessions` show them"
    )
    assert stopped.err.count(line) == 1, stopped.err
    assert pending_rows(project / "state" / "hostkit.db") == [(approval_id, "executed")]
    assert turn_states(project)[-1] == "cancelled"
    assert stopped.took < BOUND_S, stopped.took


async def test_a_command_started_ignoring_sighup_keeps_ignoring_it(
    project: Path, wire: WireServer
) -> None:
    """``nohup hostkit run ...``: the hangup it asked to survive does not stop the turn."""
    wire.script(OPENING_HELD)
    command = [sys.executable, "-c", _NOHUP, "run", "--agent", "writer", "again"]
    process = await anyio.open_process(
        command,
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await model_answering(wire)()
        process.send_signal(signal.SIGHUP)
        with anyio.move_on_after(2):
            await process.wait()
        assert process.returncode is None  # still running its turn
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND_S):
            assert await process.wait() == 143
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()
    assert turn_states(project) == ["cancelled"]


# ``nohup``: the command starts with SIGHUP ignored.
_NOHUP = (
    "import signal, sys\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "sys.argv[0] = 'hostkit'\n"
    "from hostkit._launch import main\n"
    "main()\n"
)
