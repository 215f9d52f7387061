"""`hostkit doctor` as a subprocess: one ok / warn / fail line per check, exit 0 unless one
fails, never a secret's value, and it reads while another process holds the write lock."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from hostkit.cli import _doctor
from hostkit.store import SCHEMA_VERSION
from tests.cli import run_cli_async

pytestmark = pytest.mark.anyio

GOOD = """
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"

[providers.oa]
kind = "openai"
api_key_env = "DOCTOR_OPENAI_KEY"

[agents.assistant]
provider = "p"

[channels.hook]
kind = "webhook"
secret_env = "DOCTOR_HOOK_SECRET"
"""
SECRET = "sk-doctor-0123456789abcdef"


async def doctor(cwd: Path, **env: str) -> tuple[int, list[str], str]:
    """The exit status, stdout's lines and stderr; ``env`` replaces the checked variables."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("DOCTOR_OPENAI_KEY", "DOCTOR_HOOK_SECRET")
    }
    result = await run_cli_async("doctor", cwd=cwd, env={**base, "COLUMNS": "200", **env})
    return result.returncode, result.stdout.decode().splitlines(), result.stderr.decode()


def line(lines: list[str], name: str) -> str:
    found = [each for each in lines if each.split(maxsplit=1)[1].startswith(name)]
    assert len(found) == 1, lines
    return found[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hostkit.toml").write_text(GOOD)
    code = subprocess.run(
        [sys.executable, "-m", "hostkit", "sessions"], cwd=tmp_path, check=False
    ).returncode
    assert code == 0
    return tmp_path


async def test_a_good_project_passes_and_no_secret_is_printed(project: Path) -> None:
    code, lines, err = await doctor(project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET)
    assert code == 0, (lines, err)
    assert line(lines, "config:").startswith("ok")
    store = line(lines, "store:")
    assert store.startswith("ok")
    assert f"schema v{SCHEMA_VERSION} (current)" in store
    assert line(lines, "disk:").split()[0] in ("ok", "warn")
    assert line(lines, "sandbox:").split()[0] in ("ok", "warn")
    assert "$DOCTOR_OPENAI_KEY" in line(lines, "provider oa:")
    assert line(lines, "provider oa:").startswith("ok")
    assert line(lines, "channel hook:").startswith("ok")
    assert all(each.split()[0] in ("ok", "warn") for each in lines)
    assert SECRET not in "\n".join(lines) + err


async def test_a_missing_key_and_secret_fail_with_a_hint(project: Path) -> None:
    code, lines, _ = await doctor(project)
    assert code == 1
    provider = line(lines, "provider oa:")
    assert provider.startswith("fail")
    assert "export DOCTOR_OPENAI_KEY" in provider
    channel = line(lines, "channel hook:")
    assert channel.startswith("fail")
    assert "$DOCTOR_HOOK_SECRET" in channel


async def test_a_broken_config_fails(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text("[host\ndatabase = 1\n")
    code, lines, _ = await doctor(tmp_path)
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith("fail config:")
    assert "not valid TOML" in lines[0]


async def test_a_database_of_a_newer_hostkit_fails(project: Path) -> None:
    with closing(sqlite3.connect(project / "hostkit.db")) as conn, conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    code, lines, _ = await doctor(project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET)
    assert code == 1
    store = line(lines, "store:")
    assert store.startswith("fail")
    assert "upgrade hostkit" in store


async def test_an_older_schema_says_how_much_room_its_upgrade_needs(project: Path) -> None:
    """The next Host's upgrade refuses to start without room for its backup and the
    migration: doctor says beforehand how much that is and what is free."""
    with closing(sqlite3.connect(project / "hostkit.db")) as conn, conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    code, lines, _ = await doctor(project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET)
    store = line(lines, "store:")
    assert store.startswith("warn"), lines
    assert code == 0
    assert f"at schema v{SCHEMA_VERSION - 1}" in store
    assert re.search(
        r"the upgrade needs about \d+ MiB free beside the database; \d+ MiB free", store
    )


async def test_an_upgrade_the_free_space_cannot_hold_fails_the_store_check(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_doctor, "free_bytes_at", lambda where: 3 * 1024 * 1024)
    check = await anyio.to_thread.run_sync(
        _doctor._upgrade, project / "hostkit.db", SCHEMA_VERSION - 1
    )
    assert check.level == "fail"
    assert check.detail.endswith("MiB free beside the database; 3 MiB free")
    assert "free space beside the database" in check.hint


async def test_doctor_reads_while_another_process_holds_the_write_lock(project: Path) -> None:
    conn = sqlite3.connect(project / "hostkit.db", isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        with anyio.fail_after(20):
            code, lines, err = await doctor(
                project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET
            )
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert code == 0, (lines, err)
    assert line(lines, "store:").startswith("ok")


async def test_doctor_shows_the_database_size_and_the_migration_backups(project: Path) -> None:
    code, lines, _ = await doctor(project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET)
    assert code == 0
    size = line(lines, "size:")
    assert size.startswith("ok")
    assert "MiB (WAL included), no migration backups" in size
    (project / "hostkit.db.v21.backup").write_bytes(b"\0" * 3 * 1024 * 1024)
    code, lines, _ = await doctor(project, DOCTOR_OPENAI_KEY=SECRET, DOCTOR_HOOK_SECRET=SECRET)
    assert code == 0
    size = line(lines, "size:")
    assert "1 migration backup 3.0 MiB beside it (hostkit.db.v21.backup)" in size
