"""Terminal output files have a lifetime: a Host that runs for months keeps running commands.

Every ``terminal.run`` kept two files under ``[host] artifacts`` and nothing ever
deleted them, so the artifacts' disk filled until ``artifact_reserve_mb`` refused
every run. Now a stream that printed nothing leaves no file (its result says
``"artifact": null``), and files last written more than ``[host]
artifact_retention_s`` ago (seven days; 0 keeps them) are deleted in bounded passes
by ``host.artifacts.reclaim()``, which ``hostkit serve``'s "retention" daemon runs.
A pass deletes nothing a run still writes, nothing through a link and nothing that
is not a run's output under the root.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.process import ArtifactCursor, reclaim_expired_artifacts, run_process
from hostkit.effects import ApprovalDecision, ApprovalRequest
from hostkit.errors import ConfigError, InvalidValue
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request

pytestmark = pytest.mark.anyio

DAY = 86_400.0
SESSION_HEX = "0123456789abcdef0123456789abcdef"


class Approve:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        return "approve_once"


def host_config(tmp_path: Path, **host: Any) -> HostConfig:
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    state.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    return parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(workspace),
                **host,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"]},
                    "builtins": ["terminal.run"],
                    "sandbox": "none",
                }
            },
        },
        base_dir=state,
    )


def runs_argv(req: Any) -> Any:
    """The scripted model: run the argv the user's message holds (JSON), then say done."""
    if req.messages[-1].role == "tool":
        return Reply("done")
    call = json.loads(req.messages[-1].content)
    return CallTools(("terminal_run", call))


@dataclass
class Served:
    host: Host
    model: ScriptedModel

    @property
    def root(self) -> Path:
        return self.host.artifacts.root

    async def run(self, argv: list[str], **arguments: Any) -> tuple[str, dict[str, Any]]:
        """One turn running ``argv``: the call's status and its output as the model read it."""
        result = await self.host.turns.run(request(json.dumps({"argv": argv, **arguments})))
        assert result.outcome == "completed", result
        [effect] = result.effects
        messages = self.model.requests[-1].messages
        text = next(m.content for m in reversed(messages) if m.role == "tool")
        return effect.status, json.loads(text[text.index("{") :])


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = host_config(tmp_path)
    model = ScriptedModel([runs_argv], repeat_last=True)
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approve()
    ) as host:
        yield Served(host, model)


def artifact_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("spawn_*") if p.is_file() and not p.is_symlink())


def age(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when), follow_symlinks=False)


# --- an empty stream leaves no file ---------------------------------------------------


async def test_a_stream_that_printed_nothing_leaves_no_file_and_says_so(served: Served) -> None:
    status, out = await served.run(["echo", "hello"])
    assert status == "succeeded"
    assert (out["stdout"]["total_bytes"], out["stderr"]["total_bytes"]) == (6, 0)
    assert out["stdout"]["artifact"].endswith(":stdout")
    assert out["stderr"]["artifact"] is None  # no file to point at
    [kept] = artifact_files(served.root)
    assert kept.name == out["stdout"]["artifact"].replace(":stdout", ".stdout")
    assert kept.read_bytes() == b"hello\n"


async def test_a_run_ended_before_it_printed_leaves_no_files(served: Served) -> None:
    for argv, arguments in ((["sleep", "30"], {"deadline_s": 0.3}), (["true"], {})):
        status, out = await served.run(argv, **arguments)
        assert status in ("timed_out", "succeeded")
        assert out["stdout"]["artifact"] is out["stderr"]["artifact"] is None
    assert artifact_files(served.root) == []


async def test_many_silent_runs_leave_nothing_behind(served: Served) -> None:
    """The reviewer's daemon: every run left two files. Silent runs now leave none."""
    for _ in range(10):
        await served.run(["true"])
    assert artifact_files(served.root) == []
    # Only the key and the one session's directory, never a file per run.
    assert len(list(served.root.rglob("*"))) <= 2


# --- retention ------------------------------------------------------------------------


async def test_output_past_its_retention_is_deleted_and_recent_output_kept(
    served: Served, tmp_path: Path
) -> None:
    for word in ("old", "new"):
        await served.run(["echo", word])
    old, new = sorted(artifact_files(served.root), key=lambda p: p.read_text())[::-1]
    assert (old.read_text(), new.read_text()) == ("old\n", "new\n")
    age(old, 8)
    age(new, 6)
    assert served.host.artifacts.retention_s == 7 * DAY  # the default
    assert await served.host.artifacts.reclaim() == 1
    assert artifact_files(served.root) == [new]
    assert await served.host.artifacts.reclaim() == 0


async def test_retention_never_follows_a_link_nor_leaves_the_root(
    served: Served, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "spawn_0000000000000000000000000000.stdout"
    target.write_text("not the Host's to delete")
    await served.run(["echo", "kept"])
    [session] = [p for p in served.root.iterdir() if p.is_dir()]
    # A link named like an artifact, a linked session directory, a file of another shape.
    link = session / "spawn_1111111111111111111111111111.stdout"
    link.symlink_to(target)
    linked_session = served.root / SESSION_HEX
    linked_session.symlink_to(outside, target_is_directory=True)
    other = session / "notes.txt"
    other.write_text("someone's")
    for path in (target, outside, link, linked_session, other, served.root / ".key"):
        age(path, 30)
    assert await served.host.artifacts.reclaim() == 0
    for path in (target, link, linked_session, other, served.root / ".key"):
        assert await anyio.Path(path).is_symlink() or await anyio.Path(path).exists(), path
    assert target.read_text() == "not the Host's to delete"


async def test_a_session_directory_left_empty_is_removed(served: Served) -> None:
    await served.run(["echo", "once"])
    [session] = [p for p in served.root.iterdir() if p.is_dir()]
    [output] = artifact_files(served.root)
    age(output, 8)
    assert await served.host.artifacts.reclaim() == 1
    assert not session.exists()
    # The session's next run makes it again.
    status, out = await served.run(["echo", "again"])
    assert (status, out["stdout"]["total_bytes"]) == ("succeeded", 6)
    assert [p.read_text() for p in artifact_files(served.root)] == ["again\n"]


async def test_a_running_runs_output_is_never_deleted_however_old_it_looks(
    served: Served, tmp_path: Path
) -> None:
    """A background run writes for as long as it lives; its file's age says nothing. The
    writer holds a lock on it, which a pass in any Host process respects."""
    code = "import time; print('ready', flush=True); time.sleep(60)"
    outcome = []

    async def go() -> None:
        outcome.append(
            await run_process(
                [sys.executable, "-c", code],
                supervisor=served.host.processes.supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=30,
                grace_s=0.2,
                artifact_dir=served.root / SESSION_HEX,
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(go)
        with anyio.fail_after(20):
            while not any(p.stat().st_size for p in artifact_files(served.root)):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        running = artifact_files(served.root)
        assert [p.suffix for p in running] == [".stderr", ".stdout"]  # both open
        for path in running:
            age(path, 30)
        assert await served.host.artifacts.reclaim() == 0
        assert [p.read_text() for p in running] == ["", "ready\n"]
        group.cancel_scope.cancel()
    assert artifact_files(served.root) == running[1:]  # the empty stderr went at the end
    age(running[1], 30)  # closed now: an ordinary old file
    assert await served.host.artifacts.reclaim() == 1
    assert artifact_files(served.root) == []


async def test_a_file_another_host_process_still_writes_is_left_alone(served: Served) -> None:
    await served.run(["echo", "theirs"])
    [output] = artifact_files(served.root)
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_WRONLY); "
        "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(60)"
    )
    async with await anyio.open_process([sys.executable, "-c", hold, str(output)]) as writer:
        assert writer.stdout is not None
        said = b""
        with anyio.fail_after(20):
            while not said.endswith(b"\n"):  # a pipe may hand the line over in pieces
                said += await writer.stdout.receive()
        assert said == b"held\n"
        age(output, 30)
        assert await served.host.artifacts.reclaim() == 0
        assert output.read_text() == "theirs\n"
        writer.kill()
        await writer.wait()  # its lock goes with it
    assert await served.host.artifacts.reclaim() == 1


async def test_a_pass_is_bounded_and_the_next_one_goes_on(served: Served) -> None:
    for word in ("a", "b", "c", "d", "e"):
        await served.run(["echo", word])
    for path in artifact_files(served.root):
        age(path, 8)
    assert [await served.host.artifacts.reclaim(limit=2) for _ in range(4)] == [2, 2, 1, 0]
    assert artifact_files(served.root) == []


def test_a_pass_looks_at_a_bounded_number_of_entries_and_resumes_there(tmp_path: Path) -> None:
    """Recent files ahead of old ones cannot starve them: the cursor moves on."""
    root = tmp_path / "artifacts"
    for session in ("a" * 32, "b" * 32):
        (root / session).mkdir(parents=True)
        for i in range(6):
            path = root / session / f"spawn_{i:028x}.stdout"
            path.write_text("x")
            age(path, 8 if i % 2 else 0)
    cursor, cutoff = ArtifactCursor(), time.time() - DAY
    removed = [
        reclaim_expired_artifacts(root, cutoff=cutoff, limit=100, cursor=cursor, examine=4)
        for _ in range(4)
    ]
    assert sum(removed) == 6
    assert max(removed) <= 4
    assert len(artifact_files(root)) == 6


async def test_retention_zero_keeps_output_forever(tmp_path: Path) -> None:
    config = host_config(tmp_path, artifact_retention_s=0)
    model = ScriptedModel([runs_argv], repeat_last=True)
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approve()
    ) as host:
        served = Served(host, model)
        await served.run(["echo", "archived"])
        [output] = artifact_files(served.root)
        age(output, 3650)
        assert await host.artifacts.reclaim() == 0
        await host.serve().retention.sweep()
        assert output.read_text() == "archived\n"


async def test_the_serving_hosts_retention_daemon_deletes_old_output(served: Served) -> None:
    for word in ("old", "older"):
        await served.run(["echo", word])
    for path in artifact_files(served.root):
        age(path, 8)
    daemon = served.host.serve()
    await daemon.retention.sweep()
    assert daemon.retention.artifacts_removed == 2
    assert artifact_files(served.root) == []


async def test_reclaim_refuses_a_malformed_bound(served: Served) -> None:
    for arguments in ({"limit": 0}, {"limit": True}, {"older_than_s": -1.0}):
        with pytest.raises(InvalidValue):
            await served.host.artifacts.reclaim(**arguments)


# --- configuration --------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 1, 3_599, float("inf"), float("nan"), "a week", 1e12])
def test_a_malformed_retention_is_a_config_error(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError, match="artifact_retention_s") as caught:
        host_config(tmp_path, artifact_retention_s=value)
    assert len(str(caught.value)) <= 2000


@pytest.mark.parametrize("value", [0, 3_600, 30 * DAY])
def test_a_retention_of_an_hour_or_more_or_zero_is_accepted(tmp_path: Path, value: float) -> None:
    assert host_config(tmp_path, artifact_retention_s=value).host.artifact_retention_s == value
