"""Clause: opening an older database upgrades it, and says so once, naming the backup.

Any command upgrades the database it opens (a listing as much as ``serve``),
taking a backup beside it that holds a copy of every row. The operator is told
that it happened and where that copy is (it may be as large as the database),
in the Host's start-up warnings: printed by the CLI, logged by ``serve``. Only
the process that upgraded tells it; a current or a new database says nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hostkit.host import Host, HostConfig, parse_config
from hostkit.store import SCHEMA_VERSION
from tests.cli import run_cli

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent.parent / "golden"
CONFIG = (
    '[providers.test]\nkind = "scripted"\nscript = [{reply = "hi"}]\n'
    '[agents.assistant]\nprovider = "test"\nmemory = false\n'
)


def project(tmp_path: Path, golden: str | None = "hostkit-v13.db") -> HostConfig:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    if golden is not None:
        shutil.copyfile(GOLDEN / golden, tmp_path / "hostkit.db")
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db")},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )


def upgrade_lines(warnings: tuple[str, ...] | list[str]) -> list[str]:
    return [line for line in warnings if "upgraded the database" in line]


@pytest.mark.parametrize("golden", ["hostkit-v1.db", "hostkit-v13.db"])
async def test_the_open_that_upgrades_says_so_and_names_the_backup(
    tmp_path: Path, golden: str
) -> None:
    config = project(tmp_path, golden)
    version = int(golden.removeprefix("hostkit-v").removesuffix(".db"))
    async with Host.open(config) as host:
        (line,) = upgrade_lines(host.warnings)
    backup = tmp_path / f"hostkit.db.v{version}.backup"
    assert line == (
        f"upgraded the database from schema v{version} to v{SCHEMA_VERSION}; its old copy "
        f"is {backup}: delete it once this version runs well"
    )
    assert backup.is_file()
    async with Host.open(config) as host:
        assert upgrade_lines(host.warnings) == []


async def test_a_new_database_is_no_upgrade(tmp_path: Path) -> None:
    async with Host.open(project(tmp_path, golden=None)) as host:
        assert upgrade_lines(host.warnings) == []


def test_a_listing_that_upgrades_prints_it_once(tmp_path: Path) -> None:
    project(tmp_path)
    env = {**os.environ, "COLUMNS": "300"}
    first = run_cli("sessions", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.decode().splitlines() if "upgraded" in line]
    assert said == [
        f"warning: upgraded the database from schema v13 to v{SCHEMA_VERSION}; its old copy "
        f"is {tmp_path / 'hostkit.db.v13.backup'}: delete it once this version runs well"
    ]
    again = run_cli("sessions", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert b"upgraded" not in again.stderr
    assert again.stdout == first.stdout


@pytest.mark.parametrize("command", [("mcp", "list"), ("inbox", "counts")])
def test_a_command_that_opens_only_the_store_says_so_too(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """``hostkit mcp list`` opens the store without a Host: it upgraded silently."""
    project(tmp_path)
    done = run_cli(*command, cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.decode().splitlines() if "upgraded" in line]
    assert said == [
        f"warning: upgraded the database from schema v13 to v{SCHEMA_VERSION}; its old copy "
        f"is {tmp_path / 'hostkit.db.v13.backup'}: delete it once this version runs well"
    ]
