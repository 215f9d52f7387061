"""The operator's views as subprocesses while another process holds the write lock.

A view (a count, a listing) opens its Host ``reads_only``: it answers at once,
its audit record is best-effort (one warning line when it cannot be written),
and its close ends no turn (it holds none): nothing waits the write lock's
30 s.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.cli import run_cli_async

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"

[agents.assistant]
provider = "p"
"""
# Far below the write lock's wait (30 s), far above a loaded machine's start-up.
VIEW_LIMIT_S = 20.0
AUDITED = "principal_scope.operator_issued"


async def hostkit(*args: str, cwd: Path) -> tuple[int, str, str]:
    result = await run_cli_async(*args, cwd=cwd, env={**os.environ, "COLUMNS": "100"})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def audits(database: Path) -> int:
    with closing(sqlite3.connect(database)) as conn, conn:
        row = conn.execute("SELECT count(*) FROM audit WHERE kind = ?", [AUDITED]).fetchone()
    return int(row[0])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    return tmp_path


@pytest.fixture
def write_locked(project: Path) -> Iterator[Path]:
    """The project, with its database made and its write lock held (as ``serve`` mid-write)."""
    code = subprocess.run(
        [sys.executable, "-m", "hostkit", "sessions"], cwd=project, check=False
    ).returncode
    assert code == 0
    conn = sqlite3.connect(project / "hostkit.db", isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield project
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (("inbox", "counts"), "the inbox is empty"),
        (("inbox", "list"), "no inbounds"),
        (("delivery", "list"), "no delivery intents"),
        (("sessions",), "no sessions yet"),
        (("approvals", "list"), "no pending approvals"),
    ],
)
async def test_a_view_answers_while_another_process_holds_the_write_lock(
    write_locked: Path, args: tuple[str, ...], shown: str
) -> None:
    started = time.monotonic()
    code, out, err = await hostkit(*args, cwd=write_locked)
    took = time.monotonic() - started
    assert code == 0, err
    assert shown in out + err
    assert took < VIEW_LIMIT_S
    # One line says the read was not audited; nothing else failed (the close ended no turn).
    assert "this read was not audited" in err
    assert "another process held the write lock" in err
    assert "remaining turns" not in err


async def test_a_view_is_audited_when_the_store_can_write(project: Path) -> None:
    code, _, err = await hostkit("inbox", "counts", cwd=project)
    assert code == 0, err
    assert "not audited" not in err
    before = audits(project / "hostkit.db")
    code, _, err = await hostkit("inbox", "counts", cwd=project)
    assert code == 0, err
    assert audits(project / "hostkit.db") == before + 1
