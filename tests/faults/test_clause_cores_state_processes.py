"""Authored state across real Host processes: compare-and-set loses no increment.

Clause: "StateRuntime on the transactional store: per-core/session state
with compare-and-set". Two Host processes on one SQLite file each run a turn
whose tool increments one core-scope counter N times, reading the version
and writing with ``expected=`` (retrying on ``StateConflict``): the counter
ends at exactly 2N, and the processes did collide.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from hostkit.cores import CORE_SCOPE
from hostkit.store import RuntimeStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("state_counter_worker.py")
TIMES = 20


async def test_two_processes_increment_one_counter_exactly(tmp_path: Path) -> None:
    # Migrated once, before either worker opens it.
    async with await RuntimeStore.open(tmp_path / "hostkit.db"):
        pass
    names = ("one", "two")
    options = {
        name: {
            "root": str(tmp_path),
            "conversation": name,
            "times": TIMES,
            "started": str(tmp_path / f"started-{name}"),
            "other": str(tmp_path / f"started-{other}"),
            "go": str(tmp_path / "go"),
            "results": str(tmp_path / f"results-{name}.json"),
        }
        for name, other in zip(names, reversed(names), strict=True)
    }
    codes: dict[str, int] = {}

    async def run(name: str) -> None:
        command = [sys.executable, str(WORKER), json.dumps(options[name])]
        done = await anyio.run_process(command, check=False)
        codes[name] = done.returncode
        assert done.returncode == 0, done.stderr.decode()[-2000:]

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(run, name)
            await anyio.Path(tmp_path / "go").write_text("go")
    results = [
        json.loads(await anyio.Path(tmp_path / f"results-{name}.json").read_text())
        for name in names
    ]
    assert codes == {"one": 0, "two": 0}
    assert [r["outcome"] for r in results] == ["completed", "completed"], results
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        entry = await store.cores.state_get("assistant", CORE_SCOPE, "counter")
    assert entry is not None
    assert (entry.value, entry.version) == (2 * TIMES, 2 * TIMES)
    # The loops overlapped: some writes found the version moved and retried.
    assert sum(r["conflicts"] for r in results) > 0
