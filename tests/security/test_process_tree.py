"""No process the Host starts outlives its end: cancel, deadline, Host close, or its own exit.

The tree under test holds every way out of a process group that a command can
take: a grandchild that ignores SIGTERM, one that calls ``setsid()`` (and has
a child of its own), one that moves to its own process group, and a root that
ignores SIGTERM too. Survival is checked by pid *and* start time, so a
recycled pid never passes for a survivor, and zombies (which run nothing)
count as gone.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.builtins.process import (
    ProcessControl,
    ProcessOutcome,
    ProcessSupervisor,
    run_process,
)

pytestmark = pytest.mark.anyio

Record = tuple[int, float]
WAIT_S = 20.0
GRACE_S = 0.3
TREE_SIZE = 5  # root, group grandchild, setsid grandchild and its child, setpgid grandchild

# Each process writes a file named by its pid once its signal disposition is set.
PRELUDE = r"""
import os, signal, sys, time
marks = sys.argv[1]

def mark():
    open(os.path.join(marks, str(os.getpid())), "w").close()

def linger():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark()
    while True:
        time.sleep(60)

def spawn(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid
"""

TREE = (
    PRELUDE
    + r"""
def escaper():
    os.setsid()
    spawn(linger)
    linger()

def regrouper():
    os.setpgid(0, 0)
    linger()

spawn(linger)
spawn(escaper)
spawn(regrouper)
print("tree started", flush=True)
linger()
"""
)

# The middle process double-forks a daemon and exits when told; so does the root.
DAEMON = (
    PRELUDE
    + r"""
go = sys.argv[2]

def wait_go():
    while not os.path.exists(go):
        time.sleep(0.01)

def daemon():
    os.setsid()
    linger()

def middle():
    spawn(daemon)
    wait_go()

spawn(middle)
wait_go()
"""
)


def survivors(records: list[Record]) -> list[int]:
    """Pids from ``records`` that still run the very process recorded (zombies excluded)."""
    alive = []
    for pid, started in records:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


async def wait_marks(marks: Path, count: int) -> list[Record]:
    """Wait until ``count`` processes have marked themselves ready; return pid + start time."""
    with anyio.fail_after(WAIT_S):
        while True:
            pids = [int(path.name) async for path in anyio.Path(marks).iterdir()]
            if len(pids) >= count:
                return [(pid, psutil.Process(pid).create_time()) for pid in pids]
            await anyio.sleep(0.02)


async def wait_tracked(control: ProcessControl, pid: int) -> None:
    with anyio.fail_after(WAIT_S):
        while True:
            if pid in control.tracked_pids():
                return
            await anyio.sleep(0.02)


def marks_dir(tmp_path: Path) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    return marks


@pytest.mark.parametrize(
    ("end", "status"),
    [("cancel", "cancelled"), ("deadline", "timed_out"), ("close", "cancelled")],
)
async def test_no_process_of_the_tree_survives_its_end(
    end: str, status: str, tmp_path: Path, reaper: list[Record]
) -> None:
    marks = marks_dir(tmp_path)
    control = ProcessControl()
    outcomes: list[ProcessOutcome] = []
    supervisor = ProcessSupervisor()

    async def run() -> None:
        outcomes.append(
            await run_process(
                [sys.executable, "-c", TREE, str(marks)],
                supervisor=supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=1.5 if end == "deadline" else 60.0,
                artifact_dir=tmp_path / "artifacts",
                grace_s=GRACE_S,
                control=control,
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        records = await wait_marks(marks, TREE_SIZE)
        reaper.extend(records)
        assert len(survivors(records)) == TREE_SIZE
        if end == "cancel":
            control.cancel()
        elif end == "close":
            await supervisor.aclose()
    await supervisor.aclose()

    [outcome] = outcomes
    assert survivors(records) == []
    assert outcome.status == status
    assert outcome.cleanup_confirmed
    assert outcome.exit_code == -signal.SIGKILL  # the root ignored TERM
    assert outcome.stdout.tail == "tree started\n"


async def test_daemon_left_behind_by_an_exited_command_is_ended(
    tmp_path: Path, reaper: list[Record]
) -> None:
    marks = marks_dir(tmp_path)
    go = tmp_path / "go"
    control = ProcessControl()
    outcomes: list[ProcessOutcome] = []

    async with ProcessSupervisor() as supervisor, anyio.create_task_group() as group:

        async def run() -> None:
            outcomes.append(
                await run_process(
                    [sys.executable, "-c", DAEMON, str(marks), str(go)],
                    supervisor=supervisor,
                    cwd=tmp_path,
                    env={},
                    deadline_s=60.0,
                    artifact_dir=tmp_path / "artifacts",
                    grace_s=GRACE_S,
                    snapshot_interval_s=0.05,
                    control=control,
                )
            )

        group.start_soon(run)
        records = await wait_marks(marks, 1)
        reaper.extend(records)
        [(daemon, _)] = records
        # Once a snapshot has seen it, its parents may go: it is now orphaned, in its own session.
        await wait_tracked(control, daemon)
        await anyio.Path(go).touch()

    [outcome] = outcomes
    assert survivors(records) == []
    assert outcome.status == "exited"
    assert outcome.exit_code == 0
    assert outcome.cleanup_confirmed


@pytest.mark.parametrize("name", ["HOSTKIT_TEST_SECRET", "OPENAI_API_KEY", "HOME", "PATH"])
async def test_child_sees_only_the_allowlisted_environment(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "host-only-value")
    async with ProcessSupervisor() as supervisor:
        outcome = await run_process(
            [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
            supervisor=supervisor,
            cwd=tmp_path,
            env={"HOSTKIT_ALLOWED": "yes"},
            deadline_s=30.0,
            artifact_dir=tmp_path / "artifacts",
        )
    seen = json.loads(outcome.stdout.tail)
    assert name not in seen
    assert "host-only-value" not in outcome.stdout.tail
    assert seen["HOSTKIT_ALLOWED"] == "yes"
    # Python itself may set LC_CTYPE at startup (PEP 538 locale coercion); nothing else appears.
    assert set(seen) - {"LC_CTYPE"} == {"HOSTKIT_ALLOWED"}
