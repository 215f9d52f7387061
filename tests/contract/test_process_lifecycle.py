"""The Host process lifecycle: exit codes, bounded tails, private full artifacts, ends.

Every child is a real ``python -c`` process. Output is written as bytes, so
the figures do not depend on the locale of the machine running the tests.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import signal
import stat
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hostkit.builtins.process import (
    ProcessControl,
    ProcessOutcome,
    ProcessSupervisor,
    _process,
    opaque_artifact_dir,
    run_process,
)
from hostkit.builtins.process._process import DEFAULT_TAIL_CHARS
from hostkit.errors import InvalidValue, RuntimeFailure
from tests.support import peak_rss_growth

pytestmark = pytest.mark.anyio

MB = 1024 * 1024
WAIT_S = 30.0
SLEEP_FOREVER = "import time; print('ready', flush=True); time.sleep(600)"
# Creates the file "ignoring" in its cwd once SIGTERM is ignored.
IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open('ignoring', 'w').close(); time.sleep(600)"
)
LINES = 'out = "".join(f"line {i} ✓\\n" for i in range(100_000))'


@pytest.fixture
async def supervisor() -> AsyncIterator[ProcessSupervisor]:
    async with ProcessSupervisor() as opened:
        yield opened


async def run(
    supervisor: ProcessSupervisor, tmp_path: Path, code: str, *args: str, **options: Any
) -> ProcessOutcome:
    """Run ``python -c code`` with an empty environment and the given options."""
    options.setdefault("deadline_s", WAIT_S)
    options.setdefault("artifact_dir", tmp_path / "artifacts")
    return await run_process(
        [sys.executable, "-c", code, *args],
        supervisor=supervisor,
        cwd=tmp_path,
        env={},
        **options,
    )


def writer(stdout: str = "", stderr: str = "", *, chunk_chars: int = 7_000) -> str:
    """Code for a child that writes exactly these strings, UTF-8, in several writes."""
    return (
        "import sys\n"
        f"for name, text in (('stdout', {stdout!r}), ('stderr', {stderr!r})):\n"
        "    stream = getattr(sys, name).buffer\n"
        f"    for i in range(0, len(text), {chunk_chars}):\n"
        f"        stream.write(text[i:i + {chunk_chars}].encode()); stream.flush()\n"
    )


def gone(pid: int, started: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() != started or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def started_run(
    supervisor: ProcessSupervisor, tmp_path: Path, code: str, group: Any, **options: Any
) -> tuple[ProcessControl, list[ProcessOutcome]]:
    """Start a run in ``group`` and return once its process is spawned and recorded."""
    control = ProcessControl()
    outcomes: list[ProcessOutcome] = []

    async def go() -> None:
        outcomes.append(await run(supervisor, tmp_path, code, control=control, **options))

    group.start_soon(go)
    with anyio.fail_after(WAIT_S):
        assert await control.wait_started() is not None
    return control, outcomes


# --- exit codes and the owner record --------------------------------------------------


@pytest.mark.parametrize(
    ("code", "exit_code", "reason"),
    [
        ("pass", 0, "exited with code 0"),
        ("import sys; sys.exit(7)", 7, "exited with code 7"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9, "killed by SIGKILL"),
    ],
)
async def test_exit_code_and_reason_are_recorded(
    code: str, exit_code: int, reason: str, supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    outcome = await run(supervisor, tmp_path, code)
    assert outcome.status == "exited"
    assert outcome.exit_code == exit_code
    assert outcome.reason == reason
    assert outcome.cleanup_confirmed
    assert outcome.started


async def test_owner_record_names_the_process_and_its_start_time(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    async with anyio.create_task_group() as group:
        control, outcomes = await started_run(supervisor, tmp_path, SLEEP_FOREVER, group)
        owner = control.owner
        assert owner is not None
        assert supervisor.owners() == (owner,)
        assert owner.pgid == owner.pid
        assert owner.spawn_id.startswith("spawn_")
        assert owner.create_time == psutil.Process(owner.pid).create_time()
        control.cancel()
    assert outcomes[0].owner == owner
    assert supervisor.owners() == ()


async def test_outcome_values_are_frozen(supervisor: ProcessSupervisor, tmp_path: Path) -> None:
    outcome = await run(supervisor, tmp_path, "pass")
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.status = "failed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.stdout.tail = "forged"  # type: ignore[misc]


# --- tails and artifacts --------------------------------------------------------------


async def test_tails_are_exactly_the_last_characters_with_totals(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    # 6 characters and 7 bytes per item: characters and bytes are counted apart.
    long = "".join(f"{i:05d}é" for i in range(5_000))
    short = "warning: ünïcode\n" * 100
    outcome = await run(supervisor, tmp_path, writer(long, short))

    assert outcome.stdout.tail == long[-DEFAULT_TAIL_CHARS:]
    assert len(outcome.stdout.tail) == DEFAULT_TAIL_CHARS == 12_000
    assert outcome.stdout.total_chars == 30_000
    assert outcome.stdout.total_bytes == 35_000
    assert outcome.stdout.truncated
    assert outcome.stderr.tail == short
    assert outcome.stderr.total_chars == len(short)
    assert outcome.stderr.total_bytes == len(short.encode())
    assert not outcome.stderr.truncated


@pytest.mark.parametrize(("length", "truncated"), [(12_000, False), (12_001, True), (0, False)])
async def test_truncation_flag_starts_one_past_the_tail(
    length: int, truncated: bool, supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(length))
    outcome = await run(supervisor, tmp_path, writer(text))
    assert outcome.stdout.truncated is truncated
    assert outcome.stdout.tail == text[-12_000:]
    assert outcome.stdout.total_chars == length


async def test_tail_length_is_an_option(supervisor: ProcessSupervisor, tmp_path: Path) -> None:
    text = "0123456789" * 50
    outcome = await run(supervisor, tmp_path, writer(text, text), tail_chars=25)
    assert outcome.stdout.tail == outcome.stderr.tail == text[-25:]
    assert outcome.stdout.truncated


async def test_artifacts_hold_the_whole_output_privately(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    namespace: dict[str, str] = {}
    exec(LINES, namespace)  # the very text the child computes, about 1.3 MB
    out, err = namespace["out"], "e" * 70_000
    code = (
        f"import sys\n{LINES}\nsys.stdout.buffer.write(out.encode())\n"
        "sys.stderr.buffer.write(b'e' * 70_000)\n"
    )
    artifact_dir = tmp_path / "root" / "opaque"
    outcome = await run(supervisor, tmp_path, code, artifact_dir=artifact_dir)

    for capture, text in ((outcome.stdout, out), (outcome.stderr, err)):
        assert capture.artifact is not None
        assert capture.artifact.parent == artifact_dir
        assert await anyio.Path(capture.artifact).read_bytes() == text.encode()
        mode = (await anyio.Path(capture.artifact).stat()).st_mode
        assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE((await anyio.Path(artifact_dir).stat()).st_mode) == 0o700
    assert outcome.stdout.artifact != outcome.stderr.artifact


@pytest.mark.parametrize("end", ["exited", "timed_out", "cancelled"])
async def test_a_stream_that_stayed_empty_keeps_no_file_however_the_run_ends(
    supervisor: ProcessSupervisor, tmp_path: Path, end: str
) -> None:
    code = "import sys, time; sys.stdout.write('said'); sys.stdout.flush()"
    if end != "exited":
        code += "; time.sleep(600)"
    options: dict[str, Any] = {"deadline_s": 1.0} if end == "timed_out" else {}
    if end == "cancelled":
        async with anyio.create_task_group() as group:
            control, outcomes = await started_run(supervisor, tmp_path, code, group)
            with anyio.fail_after(WAIT_S):
                while not any(p.stat().st_size for p in (tmp_path / "artifacts").iterdir()):  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            control.cancel()
        [outcome] = outcomes
    else:
        outcome = await run(supervisor, tmp_path, code, **options)
    assert outcome.status == end
    assert outcome.stderr.artifact is None
    assert outcome.stdout.artifact is not None
    assert outcome.stdout.artifact.read_bytes() == b"said"
    assert sorted((tmp_path / "artifacts").iterdir()) == [outcome.stdout.artifact]


async def test_a_run_that_printed_nothing_keeps_no_files(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    outcome = await run(supervisor, tmp_path, "pass")
    assert (outcome.status, outcome.stdout.artifact, outcome.stderr.artifact) == (
        "exited",
        None,
        None,
    )
    assert list((tmp_path / "artifacts").iterdir()) == []


async def test_artifact_write_failure_ends_the_run_and_the_child_never_blocks(
    supervisor: ProcessSupervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(fd: int, chunks: Sequence[bytes]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_process, "_write_chunks", disk_full)
    size = 8 * MB  # far beyond a pipe buffer: the child blocks unless both pipes are drained
    code = (
        "import sys\n"
        f"for stream in (sys.stdout.buffer, sys.stderr.buffer):\n"
        f"    for _ in range({size // 65536}): stream.write(b'z' * 65536)\n"
        "    stream.flush()\n"
        "print('done', flush=True)\n"
    )
    with anyio.fail_after(WAIT_S):
        outcome = await run(supervisor, tmp_path, code, grace_s=0.5)

    # The failure ends the tree (see test_clause_effects_write_failure); draining went on
    # until then, so the run ended on the write failure, never on a blocked pipe.
    assert outcome.status == "failed"
    assert outcome.cleanup_confirmed
    assert outcome.stream_error is not None
    assert "No space left on device" in outcome.stream_error
    assert "artifact write failed" in outcome.reason
    assert outcome.duration_s < WAIT_S / 2
    assert outcome.owner is not None
    assert gone(outcome.owner.pid, outcome.owner.create_time)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_past_its_limit_ends_the_run_and_the_artifact_keeps_the_limit(
    supervisor: ProcessSupervisor, tmp_path: Path, stream: str
) -> None:
    # The artifact is the Host's file on the Host's disk: no sandbox limit bounds it, so
    # an endless writer (``yes``) used to fill the disk until its deadline.
    code = f"import sys\nout = sys.{stream}.buffer\nwhile True: out.write(b'y\\n' * 32768)\n"
    with anyio.fail_after(WAIT_S):
        outcome = await run(supervisor, tmp_path, code, grace_s=0.5, max_output_bytes=MB)
    capture = outcome.stdout if stream == "stdout" else outcome.stderr
    assert outcome.status == "failed"
    assert f"{stream} passed the output limit of 1 MiB" in outcome.reason
    assert outcome.cleanup_confirmed
    assert capture.artifact is not None
    data = await anyio.Path(capture.artifact).read_bytes()
    assert data == b"y\n" * (MB // 2)  # exactly the first MiB, whole
    assert capture.total_bytes >= MB  # what the child wrote is still counted
    assert outcome.owner is not None
    assert gone(outcome.owner.pid, outcome.owner.create_time)


async def test_output_within_its_limit_is_kept_whole(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    code = f"import sys\nsys.stdout.buffer.write(b'x' * {MB})\n"
    outcome = await run(supervisor, tmp_path, code, max_output_bytes=MB)
    assert outcome.status == "exited"
    assert outcome.stdout.artifact is not None
    assert len(await anyio.Path(outcome.stdout.artifact).read_bytes()) == MB


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1"])
async def test_a_bad_output_limit_is_refused_before_anything_runs(
    supervisor: ProcessSupervisor, tmp_path: Path, bad: object
) -> None:
    with pytest.raises(InvalidValue, match="max_output_bytes"):
        await run(supervisor, tmp_path, "pass", max_output_bytes=bad)
    assert not (tmp_path / "artifacts").exists()


# --- deadline and cancellation --------------------------------------------------------


async def test_deadline_gives_timed_out_after_the_tree_is_gone(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    outcome = await run(supervisor, tmp_path, SLEEP_FOREVER, deadline_s=0.5)
    assert outcome.status == "timed_out"
    assert outcome.exit_code == -signal.SIGTERM
    assert outcome.cleanup_confirmed
    assert outcome.stdout.tail == "ready\n"
    assert "deadline of 0.5 s" in outcome.reason
    assert outcome.owner is not None
    assert gone(outcome.owner.pid, outcome.owner.create_time)


async def test_cancel_returns_cancelled_once_cleanup_is_confirmed(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    async with anyio.create_task_group() as group:
        control, outcomes = await started_run(supervisor, tmp_path, IGNORE_TERM, group, grace_s=0.2)
        with anyio.fail_after(WAIT_S):
            while True:
                if await anyio.Path(tmp_path / "ignoring").exists():
                    break
                await anyio.sleep(0.01)
        control.cancel()
        control.cancel()  # idempotent: one end, one outcome
    [outcome] = outcomes
    assert outcome.status == "cancelled"
    assert outcome.cleanup_confirmed
    assert outcome.exit_code == -signal.SIGKILL  # TERM was ignored; KILL after the grace
    assert control.outcome == outcome
    assert outcome.owner is not None
    assert gone(outcome.owner.pid, outcome.owner.create_time)


async def test_cancel_and_close_together_end_the_tree_once(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    async with anyio.create_task_group() as group:
        control, outcomes = await started_run(supervisor, tmp_path, SLEEP_FOREVER, group)
        control.cancel()
        await supervisor.aclose()
        await supervisor.aclose()
    [outcome] = outcomes
    assert outcome.status == "cancelled"
    assert outcome.reason.startswith("cancelled")  # the first request names the cause
    assert outcome.cleanup_confirmed


async def test_close_reports_host_shutdown(supervisor: ProcessSupervisor, tmp_path: Path) -> None:
    async with anyio.create_task_group() as group:
        _, outcomes = await started_run(supervisor, tmp_path, SLEEP_FOREVER, group)
        await supervisor.aclose()
    assert outcomes[0].status == "cancelled"
    assert outcomes[0].reason.startswith("Host shutdown")


async def test_cancel_before_spawn_starts_nothing(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    control = ProcessControl()
    control.cancel()
    outcome = await run(supervisor, tmp_path, "pass", control=control)
    assert outcome.status == "cancelled"
    assert not outcome.started
    assert await control.wait_started() is None
    assert not await anyio.Path(tmp_path / "artifacts").exists()


async def test_cancelled_awaiting_task_ends_the_tree_records_and_reraises(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    control = ProcessControl()
    reached_end = False
    async with anyio.create_task_group() as group:

        async def go() -> None:
            nonlocal reached_end
            await run(supervisor, tmp_path, SLEEP_FOREVER, control=control)
            reached_end = True

        group.start_soon(go)
        with anyio.fail_after(WAIT_S):
            await control.wait_started()
        group.cancel_scope.cancel()
    assert not reached_end
    assert control.outcome is not None
    assert control.outcome.status == "cancelled"
    assert control.outcome.cleanup_confirmed
    owner = control.outcome.owner
    assert owner is not None
    assert gone(owner.pid, owner.create_time)


async def test_a_control_serves_one_run(supervisor: ProcessSupervisor, tmp_path: Path) -> None:
    control = ProcessControl()
    await run(supervisor, tmp_path, "pass", control=control)
    with pytest.raises(InvalidValue):
        await run(supervisor, tmp_path, "pass", control=control)


# --- refusals -------------------------------------------------------------------------


async def test_closed_supervisor_refuses_before_anything_is_created(tmp_path: Path) -> None:
    supervisor = ProcessSupervisor()
    await supervisor.aclose()
    with pytest.raises(RuntimeFailure):
        await run(supervisor, tmp_path, "pass")
    assert not await anyio.Path(tmp_path / "artifacts").exists()


async def test_missing_executable_is_a_runtime_failure_without_artifacts(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    with pytest.raises(RuntimeFailure, match="cannot start"):
        await run_process(
            [str(tmp_path / "no-such-program")],
            supervisor=supervisor,
            cwd=tmp_path,
            env={},
            deadline_s=5.0,
            artifact_dir=artifacts,
        )
    assert [path async for path in anyio.Path(artifacts).iterdir()] == []
    assert supervisor.owners() == ()


@pytest.mark.parametrize(
    "options",
    [
        {"argv": []},
        {"argv": "python -c pass"},
        {"argv": ["python", "a\0b"]},
        {"env": {"A=B": "x"}},
        {"env": {"": "x"}},
        {"env": {"A": "x\0y"}},
        {"deadline_s": 0},
        {"deadline_s": float("inf")},
        {"grace_s": -1},
        {"tail_chars": 0},
    ],
)
async def test_invalid_options_are_refused(
    options: dict[str, Any], supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    call: dict[str, Any] = {
        "argv": [sys.executable, "-c", "pass"],
        "supervisor": supervisor,
        "cwd": tmp_path,
        "env": {},
        "deadline_s": 5.0,
        "artifact_dir": tmp_path / "artifacts",
        **options,
    }
    argv = call.pop("argv")
    with pytest.raises(InvalidValue):
        await run_process(argv, **call)
    assert not await anyio.Path(tmp_path / "artifacts").exists()


# --- opaque artifact directories ------------------------------------------------------


KEY = b"k" * 32


@pytest.mark.parametrize("session_id", ["sess_123", "../../etc", "/abs/path", "a/b", "ü\0x"])
def test_opaque_artifact_dir_never_uses_the_raw_id(session_id: str, tmp_path: Path) -> None:
    directory = opaque_artifact_dir(tmp_path, session_id, key=KEY)
    assert directory.parent == tmp_path
    assert len(directory.name) == 32
    assert set(directory.name) <= set("0123456789abcdef")
    assert session_id not in str(directory)
    assert directory == opaque_artifact_dir(tmp_path, session_id, key=KEY)
    assert directory != opaque_artifact_dir(tmp_path, session_id, key=b"x" * 32)
    assert directory != opaque_artifact_dir(tmp_path, session_id + "-other", key=KEY)


def test_opaque_artifact_dir_needs_a_real_key(tmp_path: Path) -> None:
    with pytest.raises(InvalidValue):
        opaque_artifact_dir(tmp_path, "sess_1", key=b"short")


# --- bounded memory -------------------------------------------------------------------


async def test_memory_stays_bounded_while_a_child_prints_200_mb(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    size = 200 * MB
    code = (
        "import sys\n"
        "block = b'y' * 1048576\n"
        f"for _ in range({size // MB}): sys.stdout.buffer.write(block)\n"
    )

    async def flood() -> ProcessOutcome:
        with anyio.fail_after(120):
            return await run(supervisor, tmp_path, code)

    outcome, growth = await peak_rss_growth(flood)

    assert outcome.status == "exited"
    assert outcome.stdout.total_bytes == size
    assert outcome.stdout.tail == "y" * 12_000
    assert outcome.stdout.artifact is not None
    assert (await anyio.Path(outcome.stdout.artifact).stat()).st_size == size
    assert growth < 100 * MB, f"RSS grew by {growth / MB:.1f} MB"


async def test_a_tree_that_keeps_forking_keeps_only_its_members_that_may_still_exist(
    supervisor: ProcessSupervisor, tmp_path: Path
) -> None:
    # Every member ever seen used to be kept for reaping at the end: a background run
    # whose shell forks a short child each second grew by one entry a second for as long
    # as it ran, though its parent had reaped each one.
    forker = (
        "import os, time\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        time.sleep(0.03)\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
    )
    async with anyio.create_task_group() as group:
        control, outcomes = await started_run(
            supervisor, tmp_path, forker, group, snapshot_interval_s=0.01
        )
        (tree,) = supervisor._trees
        seen: set[int] = set()
        with anyio.fail_after(WAIT_S):
            while len(seen) < 25:  # distinct children the snapshots found
                seen.update(control.tracked_pids())
                assert len(tree._seen) <= 6
                await anyio.sleep(0.005)
        control.cancel()
    (outcome,) = outcomes
    assert outcome.status == "cancelled"
    assert outcome.cleanup_confirmed


async def test_a_run_cancelled_as_it_begins_closes_its_artifacts(
    supervisor: ProcessSupervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation landing after the spawn but before the streams' tasks ran (a client
    gone, a turn stopped) still closes both artifact files: a daemon's descriptors do not
    leak one pair per such run until every open fails."""
    from hostkit.builtins.process import _process_tree

    recording = anyio.Event()
    record = _process_tree._Tree.record

    async def held(self: Any) -> Any:
        owner = await record(self)
        recording.set()
        await anyio.sleep_forever()
        return owner  # pragma: no cover - cancelled first

    monkeypatch.setattr(_process_tree._Tree, "record", held)

    def open_artifacts() -> list[str]:
        root = str(tmp_path / "artifacts")
        return [f.path for f in psutil.Process().open_files() if f.path.startswith(root)]

    for _ in range(3):
        recording = anyio.Event()
        control = ProcessControl()
        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(run, control=control), supervisor, tmp_path, SLEEP_FOREVER
            )
            with anyio.fail_after(WAIT_S):
                await recording.wait()
            group.cancel_scope.cancel()
        outcome = control.outcome
        assert outcome is not None
        assert outcome.status == "cancelled"
        # Nothing was kept, so nothing is named: no result points at a missing file.
        assert (outcome.stdout.artifact, outcome.stderr.artifact) == (None, None)
    assert open_artifacts() == []
    # Nothing was drained before the cancellation: closed empty, the files are not kept.
    assert list((tmp_path / "artifacts").iterdir()) == []
