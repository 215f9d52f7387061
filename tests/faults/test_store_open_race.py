"""Several processes opening one database at the same moment all open it.

``hostkit serve`` starting under systemd beside an operator's ``hostkit run``,
on a fresh file or one an upgrade left at an older version: the first opener
creates or migrates it, the others wait for its write lock and find the work
done. Before, the second opener migrated again from the version it had read
before waiting ("table sessions already exists", a false "rolled back"),
deleted the other's half-written backup (a raw ``disk I/O error``), or gave
up on switching the new file to WAL (SQLITE_BUSY at once).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from hostkit.store._schema import MIGRATIONS

GOLDEN = Path(__file__).parent.parent / "golden"
OPENERS = 4
ROUNDS = 3

_OPENER = """
import asyncio, json, sys, time
from hostkit.store import RuntimeStore

async def main(path: str, start: float) -> None:
    while time.time() < start:
        await asyncio.sleep(0.001)
    try:
        async with RuntimeStore.open(path) as store:
            report = store.migration
            print(json.dumps({"from": report.from_version, "to": report.to_version}))
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}))

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


def open_at_once(database: Path) -> list[dict[str, object]]:
    """``OPENERS`` processes open ``database`` at one instant; what each reported."""
    start = time.time() + 1.5  # every interpreter is up and waiting by then
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(database), repr(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(OPENERS)
    ]
    reports = []
    try:
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err[-2000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:  # a hung opener fails the test, and outlives nothing
            if child.poll() is None:
                child.kill()
                child.wait()
    return reports


def version(database: Path) -> int:
    with closing(sqlite3.connect(database)) as conn, conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fresh", "hostkit-v13.db"])
def test_processes_opening_one_database_at_once_all_open_it(tmp_path: Path, start: str) -> None:
    latest = MIGRATIONS[-1].version
    for round_ in range(ROUNDS):
        database = tmp_path / f"round-{round_}" / "hostkit.db"
        database.parent.mkdir()
        if start != "fresh":
            shutil.copy(GOLDEN / start, database)
        reports = open_at_once(database)
        assert all("error" not in report for report in reports), reports
        assert all(report["to"] == latest for report in reports)
        # Exactly one of them migrated; the others found it done (from == to).
        movers = [report for report in reports if report["from"] != latest]
        assert len(movers) == 1, reports
        assert version(database) == latest
        if start != "fresh":
            assert movers[0]["from"] == 13
            backups = sorted(p.name for p in database.parent.iterdir() if "backup" in p.name)
            assert backups == ["hostkit.db.v13.backup"]
