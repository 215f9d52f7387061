"""Clause: a promotion's test gate leaves nothing behind when its promoter is SIGKILLed.

The suite runs in bubblewrap with ``--die-with-parent`` and its own PID
namespace: when the promoting process dies, every process the core's tests
started dies with it — one that left the process group with ``setsid()``
included, long before the suite's deadline. The gate's scratch copy
(``.gates/<pid>-*``) and a killed materialization's ``.partial-<pid>-*``
are removed by the next load once their creator is gone.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.cores import CoreLocation, load_core
from hostkit.host import DEFAULT_CORE_REF
from tests.cores_support import commit, make_core
from tests.support import sigkill_when

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SUITE = """\
import subprocess
import time


def test_slow():
    subprocess.Popen(["sleep", "{marker}"])
    subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
    time.sleep(60)
"""
PROMOTER = """\
import sys
import anyio
from pathlib import Path
from hostkit.host import Host
from tests.cores_support import core_host_config

async def main() -> None:
    tmp, core = Path(sys.argv[1]), Path(sys.argv[2])
    async with Host.open(core_host_config(tmp, {"notes": core})) as host:
        await host.cores.promote("notes", actor="ops")

anyio.run(main)
"""


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        info = process.info
        if info["cmdline"] == ["sleep", marker] and info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


async def test_a_killed_promoter_takes_its_suite_and_scratch_with_it(tmp_path: Path) -> None:
    marker = f"97.{uuid.uuid4().int % 10**6}"
    manifest = {"id": "notes", "model": "test", "limits": {"test_timeout_s": 60}}
    path, first = make_core(tmp_path, "notes", manifest=manifest)
    commit(path, {"tests/test_slow.py": SUITE.format(marker=marker)}, "a slow suite")

    async def both_started() -> bool:
        return len(await anyio.to_thread.run_sync(_sleepers, marker)) == 2

    argv = [sys.executable, "-c", PROMOTER, str(tmp_path), str(path)]
    await sigkill_when(["env", f"PYTHONPATH={ROOT}", *argv], both_started, what="the suite started")
    # Gone with the promoter, not at the 60 s deadline: the setsid() one included.
    for _ in range(100):
        if not await anyio.to_thread.run_sync(_sleepers, marker):
            break
        await anyio.sleep(0.1)
    assert not await anyio.to_thread.run_sync(_sleepers, marker)
    gates = tmp_path / ".hostkit-cores" / ".gates"
    (left,) = await anyio.to_thread.run_sync(lambda: list(gates.iterdir()))
    # The next load (a Host opening, a promotion) removes it: its creator is dead.
    location = CoreLocation("notes", path, DEFAULT_CORE_REF)
    await load_core(location, first, cores_root=tmp_path / ".hostkit-cores")
    assert not await anyio.Path(left).exists()


async def test_only_scratch_of_dead_processes_is_swept(tmp_path: Path) -> None:
    path, first = make_core(tmp_path, "notes", manifest={"id": "notes", "model": "test"})
    cores_root = tmp_path / "cores"
    done = await anyio.run_process([sys.executable, "-c", "import os; print(os.getpid())"])
    dead = int(done.stdout)
    parent = cores_root / "notes"
    stale = parent / f".partial-{dead}-{first[:12]}-0123456789ab"
    mine = parent / f".partial-{os.getpid()}-{first[:12]}-ba9876543210"
    stale_gate = cores_root / ".gates" / f"{dead}-{uuid.uuid4().hex}"
    for directory in (stale / "agent", mine, stale_gate / "notes"):
        directory.mkdir(parents=True)
    (stale / "agent" / "x.py").write_text("x = 1\n")
    for directory in (stale / "agent", stale, stale_gate / "notes"):
        directory.chmod(0o555)  # read-only, as a materialization is
    loaded = await load_core(
        CoreLocation("notes", path, DEFAULT_CORE_REF), first, cores_root=cores_root
    )
    assert loaded.root == parent / first
    assert not stale.exists()
    assert not stale_gate.exists()
    assert mine.exists()  # a live process's copy (maybe mid-extract) stays
