"""Terminal output and file writes never take the Host's last free disk space
(``host.artifact_reserve_mb``).

Each stream is held to ``file_size_mb``, but runs add up: many runs, or
several sessions at once, could fill the disk the Host's database and backups
share with the artifacts. The file system is the one shared truth across
processes, so the reserve is read from it: a run is refused while the disk
has less free than the reserve, and a run whose next write would go below it
ends ``failed``, its artifact keeping what fit. ``files.write`` and ``files.edit``
are each bounded too, and add up the same way: a write that would leave the
workspace's disk below the reserve is refused and changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import WorkspaceError, WorkspaceScope
from hostkit.builtins.process import (
    UNSANDBOXED,
    ProcessSupervisor,
    TerminalRuns,
    run_process,
)
from hostkit.builtins.process._process_streams import READ_CHUNK_BYTES, WRITE_QUEUE_CHUNKS
from hostkit.effects import ApprovalDecision, ApprovalRequest, ToolContext, ToolOutcome
from hostkit.errors import ConfigError, InvalidValue
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request
from tests.support import in_mount_namespace

pytestmark = pytest.mark.anyio

MB = 1 << 20
KEY = b"reserve-test-artifact-key-32byte"
# Room left above the reserve when a test starts: what a run may still write.
ROOM = 48 * MB
# The most one artifact write takes at once: the read chunk and the chunks queued behind it.
WRITE_BATCH = (WRITE_QUEUE_CHUNKS + 1) * READ_CHUNK_BYTES
# A file system of the test's own (tmpfs in a private mount namespace), so no other test
# moves its free space while a run fills it: on the shared disk a parallel test deleting a
# virtualenv gave a run tens of MiB more room than the test had left it.
PRIVATE_DISK_MB = 64


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def beyond_the_disk(path: Path) -> int:
    """A reserve the disk of ``path`` can never keep free, whatever other processes free
    meanwhile: more than its whole size (free space plus a margin was met once a parallel
    test deleted more than the margin)."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize + 1


async def runs_with_reserve(tmp_path: Path, reserve: int) -> AsyncIterator[TerminalRuns]:
    workspace = tmp_path / "ws"
    await anyio.Path(workspace).mkdir(exist_ok=True)
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
            artifact_reserve_bytes=reserve,
        ) as runs,
    ):
        yield runs


async def run(runs: TerminalRuns, argv: list[str]) -> ToolOutcome:
    tool = next(t for t in runs.tools(sandbox=UNSANDBOXED) if t.name == "terminal.run")
    context = ToolContext("turn", "sess", "core", "owner", Path("."))
    with anyio.fail_after(60):
        outcome = await tool.invoke(context, tool.validate({"argv": argv, "deadline_s": 50}))
    assert isinstance(outcome, ToolOutcome)
    return outcome


PRIVATE_DISK_CHILD = f"""
import asyncio, json, subprocess, sys
from pathlib import Path

from hostkit.builtins.files import WorkspaceError, WorkspaceScope
from tests.security.test_disk_reserve import ROOM, free_bytes, run, runs_with_reserve


def private_disk(name):
    disk = Path(sys.argv[1]) / name
    disk.mkdir()
    size = "size={PRIVATE_DISK_MB}m"
    subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(disk)], check=True)
    return disk


async def terminal_run():
    disk = private_disk("terminal")
    reserve = free_bytes(disk) - ROOM
    async for runs in runs_with_reserve(disk, reserve):
        outcome = await run(runs, ["yes"])  # writes without end; 1 GiB file limit
    kept = sum(p.stat().st_size for p in (disk / "artifacts").rglob("*.stdout"))
    return dict(status=outcome.status, error=outcome.error, kept=kept)


async def file_writes():
    disk = private_disk("files")
    workspace = disk / "ws"
    workspace.mkdir()
    (workspace / "notes.md").write_text("kept")
    # Room for a small write, not for a 1 MiB one.
    scope = WorkspaceScope(workspace, min_free_bytes=free_bytes(disk) - 64 * 1024)
    big = "x" * (1024 * 1024)
    refused = []
    attempts = (
        scope.write("notes.md", big),
        scope.write("new/big.md", big),
        scope.edit("notes.md", "kept", big),
    )
    for attempt in attempts:
        try:
            await attempt
            refused.append(None)
        except WorkspaceError as exc:
            refused.append([exc.reason, str(exc)])
    left = dict(
        notes=(workspace / "notes.md").read_text(),
        big=(workspace / "new" / "big.md").exists(),
        temporary=[p.name for p in workspace.rglob("*.tmp")],
    )
    await scope.write("small.md", "fits")
    return dict(refused=refused, left=left, small=(workspace / "small.md").read_text())


async def main():
    print(json.dumps(dict(terminal=await terminal_run(), files=await file_writes())))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def on_private_disks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    found: dict[str, Any] = in_mount_namespace(
        PRIVATE_DISK_CHILD, str(tmp_path_factory.mktemp("private-disk"))
    )
    return found


def test_a_run_whose_output_would_take_the_reserve_ends_failed(
    on_private_disks: dict[str, Any],
) -> None:
    ended = on_private_disks["terminal"]
    assert ended["status"] == "failed"
    assert "stdout artifact write failed" in (ended["error"] or "")
    assert "the Host reserves (host.artifact_reserve_mb)" in (ended["error"] or "")
    # It kept what fit above the reserve, within one write of it: far below its 1 GiB limit.
    assert ROOM - WRITE_BATCH <= ended["kept"] <= ROOM


async def test_no_run_starts_while_the_disk_is_below_the_reserve(tmp_path: Path) -> None:
    reserve = await anyio.to_thread.run_sync(beyond_the_disk, tmp_path)
    async for runs in runs_with_reserve(tmp_path, reserve):
        outcome = await run(runs, ["true"])
    assert (outcome.status, outcome.output) == ("denied", None)
    assert "less than the" in (outcome.error or "")
    assert "no run starts until space is freed" in (outcome.error or "")
    assert not list((tmp_path / "artifacts").rglob("*.stdout"))


async def test_a_reserve_of_zero_keeps_nothing_back(tmp_path: Path) -> None:
    async for runs in runs_with_reserve(tmp_path, 0):
        outcome = await run(runs, ["true"])
    assert outcome.status == "succeeded", outcome.error


@pytest.mark.parametrize("reserve", [-1, 1.5, True, "1"])
async def test_a_malformed_reserve_is_refused(tmp_path: Path, reserve: Any) -> None:
    with pytest.raises(ConfigError, match="artifact_reserve_bytes"):
        async for _ in runs_with_reserve(tmp_path, reserve):
            pass
    async with ProcessSupervisor() as supervisor:
        with pytest.raises(InvalidValue, match="min_free_bytes"):
            await run_process(
                ["true"],
                supervisor=supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=5,
                artifact_dir=tmp_path / "a",
                min_free_bytes=reserve,
            )


# --- configuration and a real Host ----------------------------------------------------


class Approve:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        return "approve_once"


def host_config(
    tmp_path: Path, reserve_mb: Any, builtins: tuple[str, ...] = ("terminal.run",)
) -> HostConfig:
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    state.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    return parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(workspace),
                "artifact_reserve_mb": reserve_mb,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"]},
                    "builtins": list(builtins),
                    "sandbox": "none",
                }
            },
        },
        base_dir=state,
    )


@pytest.mark.parametrize("reserve_mb", [-1, 1_048_577, "lots", 2.5])
def test_a_malformed_reserve_in_the_configuration_is_a_config_error(
    tmp_path: Path, reserve_mb: Any
) -> None:
    with pytest.raises(ConfigError, match="artifact_reserve_mb") as caught:
        host_config(tmp_path, reserve_mb)
    assert len(str(caught.value)) <= 2000


async def test_a_host_refuses_runs_below_its_configured_reserve(tmp_path: Path) -> None:
    # The largest reserve the configuration takes (1 TiB) is more than this disk has free.
    config = host_config(tmp_path, 1_048_576)
    model = ScriptedModel([CallTools(("terminal_run", {"argv": ["true"]})), Reply("done")])
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approve()
    ) as host:
        result = await host.turns.run(request("run true"))
    assert [e.status for e in result.effects] == ["denied"], result.effects
    tool_text = next(m.content for m in model.requests[-1].messages if m.role == "tool")
    assert "less than the 1048576 MiB it reserves (host.artifact_reserve_mb)" in tool_text


# --- the file tools ---------------------------------------------------------------


def test_a_file_write_that_would_take_the_reserve_is_refused_and_changes_nothing(
    on_private_disks: dict[str, Any],
) -> None:
    found = on_private_disks["files"]
    for refused in found["refused"]:
        assert refused is not None, "a write that would take the reserve was done"
        reason, message = refused
        assert reason == "disk_reserve"
        assert "the Host keeps free (host.artifact_reserve_mb)" in message
    assert len(found["refused"]) == 3
    assert found["left"] == {"notes": "kept", "big": False, "temporary": []}
    assert found["small"] == "fits"


async def test_the_file_reserve_applies_where_the_host_state_lives_not_on_a_disk_of_its_own(
    tmp_path: Path,
) -> None:
    """A workspace on a file system of its own (sized for it) is bounded by that file
    system; the reserve keeps back room for the Host's state where that lives."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    reserve = await anyio.to_thread.run_sync(beyond_the_disk, tmp_path)
    beside = WorkspaceScope(workspace, min_free_bytes=reserve, protected=[tmp_path / "db"])
    with pytest.raises(WorkspaceError, match="keeps free"):
        await beside.write("a.md", "x")
    # /proc is never the workspace's file system: no Host state shares its disk.
    elsewhere = WorkspaceScope(workspace, min_free_bytes=reserve, protected=["/proc/hostkit.db"])
    await elsewhere.write("a.md", "x")
    assert (workspace / "a.md").read_text() == "x"


@pytest.mark.parametrize("reserve", [-1, 1.5, True, "1"])
def test_a_malformed_workspace_reserve_is_refused(tmp_path: Path, reserve: Any) -> None:
    with pytest.raises(ConfigError, match="min_free_bytes"):
        WorkspaceScope(tmp_path, min_free_bytes=reserve)


async def test_a_host_refuses_file_writes_below_its_configured_reserve(tmp_path: Path) -> None:
    config = host_config(tmp_path, 1_048_576, builtins=("files.write",))
    model = ScriptedModel(
        [CallTools(("files_write", {"path": "a.md", "content": "hello"})), Reply("done")]
    )
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approve()
    ) as host:
        result = await host.turns.run(request("write a.md"))
    assert [e.status for e in result.effects] == ["failed"], result.effects
    tool_text = next(m.content for m in model.requests[-1].messages if m.role == "tool")
    assert "less than the 1048576 MiB the Host keeps free" in tool_text
    assert not (tmp_path / "workspace" / "a.md").exists()
