"""Clause: an artifact or task-log write failure stops the process tree and fails the effect.

The children are real processes that keep printing (and keep a grandchild);
the failing write is real too: the artifact writer's chunks go through the
kernel to ``/dev/full``, which answers every write with ``ENOSPC``. The
writer is swapped through the lifecycle's own seam
(``hostkit.builtins.process._process._write_chunks``), nothing else is.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.builtins.process import ProcessControl, ProcessSupervisor, _process, run_process
from tests.contract.test_effects_terminal import Terminal, terminal  # noqa: F401

pytestmark = pytest.mark.anyio

WAIT_S = 30.0
# Starts a grandchild, names it on stderr, then prints forever: only an ended tree stops it.
CHATTY_TREE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "sys.stderr.write(f'grandchild {child.pid}\\n'); sys.stderr.flush()\n"
    "while True:\n"
    "    sys.stdout.write('x' * 4096 + '\\n'); sys.stdout.flush(); time.sleep(0.01)\n"
)


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every artifact write goes to ``/dev/full``: a real ENOSPC from the kernel."""
    real = _process._write_chunks

    def to_full_device(fd: int, chunks: Sequence[bytes]) -> None:
        full = os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)
        try:
            real(full, chunks)
        finally:
            os.close(full)

    monkeypatch.setattr(_process, "_write_chunks", to_full_device)


def grandchild(text: str) -> int:
    """The grandchild's pid, as the child named it on stderr."""
    found = re.search(r"grandchild (\d+)", text)
    assert found is not None, f"no grandchild pid in {text[:200]!r}"
    return int(found[1])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.usefixtures("full_disk")
async def test_artifact_write_failure_stops_the_process_tree_and_fails_the_run(
    tmp_path: Path,
) -> None:
    async with ProcessSupervisor() as supervisor:
        with anyio.fail_after(WAIT_S):
            outcome = await run_process(
                [sys.executable, "-c", CHATTY_TREE],
                supervisor=supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=WAIT_S,
                artifact_dir=tmp_path / "artifacts",
                grace_s=0.5,
            )
    assert outcome.status == "failed"
    assert outcome.cleanup_confirmed
    assert outcome.stream_error is not None
    assert "No space left on device" in outcome.stream_error
    assert "artifact write failed" in outcome.reason
    assert "the process tree was ended" in outcome.reason
    assert outcome.exit_code is not None
    assert outcome.exit_code < 0
    assert outcome.owner is not None
    assert gone(outcome.owner.pid)
    assert gone(grandchild(outcome.stderr.tail))
    assert outcome.duration_s < WAIT_S / 2  # ended by the failure, not by the deadline


async def test_task_log_write_failure_stops_the_process_tree_and_fails_the_run(
    tmp_path: Path,
) -> None:
    """A caller's own record of the run (a task log) failing ends the tree the same way."""
    control = ProcessControl()
    outcomes = []
    async with ProcessSupervisor() as supervisor, anyio.create_task_group() as group:

        async def drive() -> None:
            outcomes.append(
                await run_process(
                    [sys.executable, "-c", CHATTY_TREE],
                    supervisor=supervisor,
                    cwd=tmp_path,
                    env={},
                    deadline_s=WAIT_S,
                    artifact_dir=tmp_path / "artifacts",
                    grace_s=0.5,
                    control=control,
                )
            )

        group.start_soon(drive)
        with anyio.fail_after(WAIT_S):
            await control.wait_started()
            control.fail("task log write failed: disk I/O error")
            control.fail("a second reason is ignored")
    (outcome,) = outcomes
    assert outcome.status == "failed"
    assert outcome.cleanup_confirmed
    assert outcome.reason.startswith("task log write failed: disk I/O error")
    assert outcome.stream_error == "task log write failed: disk I/O error"
    assert outcome.owner is not None
    assert gone(outcome.owner.pid)


@pytest.mark.usefixtures("full_disk")
async def test_artifact_write_failure_fails_the_terminal_effect(terminal: Terminal) -> None:  # noqa: F811
    session = await terminal.session()
    with anyio.fail_after(WAIT_S):
        result = await session.call(
            "terminal.run", argv=[sys.executable, "-c", CHATTY_TREE], deadline_s=WAIT_S
        )
    assert (result.status, result.started) == ("failed", True)
    assert result.error is not None
    assert "artifact write failed" in result.error
    # The view is cut inside stdout's tail; its metadata and stderr come first.
    view = result.views.model
    assert '"status": "failed"' in view
    assert gone(grandchild(view))
    assert terminal.supervisor.owners() == ()
