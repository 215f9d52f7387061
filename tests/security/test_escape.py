"""Nothing an agent starts outlives its run: every escape shape, every end, both sandbox modes.

Each shape detaches a descendant from the run's process group and session:
a child that calls ``setsid()`` while its parent exits at once, a
double-forked daemon, and ``sh -c 'setsid cmd &'``. Each is ended by the
command's own exit, a cancelled caller, the deadline, ``terminal.stop``, the
registry's close, and a Host killed with SIGKILL. Survivors are looked for
across the whole machine by a unique marker in their argv (psutil), so the
check is the same inside bubblewrap's PID namespace and outside it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    UNSANDBOXED,
    ProcessSupervisor,
    SandboxPolicy,
    TerminalRuns,
    probe_bubblewrap,
)
from hostkit.effects import AuthoredTool, ToolContext, ToolOutcome
from tests.parts import missing

pytestmark = pytest.mark.anyio

KEY = b"escape-test-artifact-key-32bytes"
PY3 = "/usr/bin/python3"  # a system interpreter: the sandbox shows no virtualenv
WAIT_S = 20.0
# Starting Python, importing hostkit and opening a Host: setup, not what a test is about,
# and slow on a loaded machine.
SETUP_S = 120.0

# argv: MARKER then "exit" (the root ends at once) or "stay" (it sleeps).
SETSID_ORPHAN = """
import os, sys, time
def child():
    if os.fork() == 0:
        os.setsid()
        time.sleep(300)
    os._exit(0)
pid = os.fork()
if pid == 0:
    child()
os.waitpid(pid, 0)
if sys.argv[2] == "stay":
    time.sleep(300)
"""
DOUBLE_FORK = """
import os, sys, time
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.2)
if sys.argv[2] == "stay":
    time.sleep(300)
"""
SLEEP = "import time; time.sleep(300)"


async def needs_bwrap() -> None:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)


def shape_argv(shape: str, marker: str, root: str) -> tuple[list[str], int]:
    """The command for one shape, and how many marked processes it keeps alive."""
    lingering = 2 if root == "stay" else 1
    if shape == "setsid_orphan":
        return [PY3, "-c", SETSID_ORPHAN, marker, root], lingering
    if shape == "double_fork":
        return [PY3, "-c", DOUBLE_FORK, marker, root], lingering
    tail = f"exec {PY3} -c '{SLEEP}' {marker}" if root == "stay" else "sleep 0.2"
    return ["sh", "-c", f"setsid {PY3} -c '{SLEEP}' {marker} & {tail}"], lingering


def marked(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes anywhere on the machine with ``marker`` in their argv."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(marker in a for a in cmdline):
            found.append(proc)
    return found


async def wait_marked(marker: str, count: int) -> None:
    with anyio.fail_after(WAIT_S):
        while True:
            if len(await anyio.to_thread.run_sync(marked, marker)) >= count:
                return
            await anyio.sleep(0.05)


async def wait_none(marker: str, timeout_s: float = WAIT_S) -> list[psutil.Process]:
    with anyio.move_on_after(timeout_s):
        while True:
            if not await anyio.to_thread.run_sync(marked, marker):
                return []
            await anyio.sleep(0.05)
    return await anyio.to_thread.run_sync(marked, marker)


def kill_marked(marker: str) -> None:
    for proc in marked(marker):
        try:
            proc.kill()
        except psutil.Error:
            continue


class Runs:
    def __init__(self, runs: TerminalRuns, policy: SandboxPolicy, workspace: Path) -> None:
        self.runs = runs
        self.policy = policy
        self.context = ToolContext("turn", "sess", "core", "owner", workspace)

    def tool(self, name: str) -> AuthoredTool:
        return next(t for t in self.runs.tools(sandbox=self.policy) if t.name == name)

    async def call(self, name: str, **arguments: Any) -> ToolOutcome:
        tool = self.tool(name)
        outcome = await tool.invoke(self.context, tool.validate(arguments))
        assert isinstance(outcome, ToolOutcome)
        return outcome


@pytest.fixture(params=["bubblewrap", "none"])
async def runs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runs]:
    if request.param == "bubblewrap":
        await needs_bwrap()
    policy = SandboxPolicy() if request.param == "bubblewrap" else UNSANDBOXED
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
            grace_s=0.2,
            confirm_s=5.0,
        ) as opened,
    ):
        yield Runs(opened, policy, workspace)


@pytest.fixture
def marker() -> Iterator[str]:
    unique = f"hk-escape-{uuid.uuid4().hex}"
    yield unique
    kill_marked(unique)  # whatever a failing test left behind


SHAPES = ["setsid_orphan", "double_fork", "shell_setsid"]


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_detached_descendant_ends_when_the_command_exits(
    runs: Runs, marker: str, shape: str
) -> None:
    argv, _ = shape_argv(shape, marker, "exit")
    outcome = await runs.call("terminal.run", argv=argv, deadline_s=30)
    # Never "succeeded" with a survivor: either every descendant was ended, or it says so.
    assert await wait_none(marker, 0.5) == []
    assert outcome.status in ("succeeded", "indeterminate"), outcome
    assert outcome.output["sandbox"] == runs.policy.mode


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_detached_descendant_ends_with_a_cancelled_caller(
    runs: Runs, marker: str, shape: str
) -> None:
    argv, lingering = shape_argv(shape, marker, "stay")
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: runs.call("terminal.run", argv=argv, deadline_s=60))
        await wait_marked(marker, lingering)
        group.cancel_scope.cancel()
    assert await wait_none(marker, 1.0) == []


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_detached_descendant_ends_at_the_deadline(
    runs: Runs, marker: str, shape: str
) -> None:
    argv, _ = shape_argv(shape, marker, "stay")
    outcome = await runs.call("terminal.run", argv=argv, deadline_s=1.5)
    assert outcome.status == "timed_out", outcome
    assert await wait_none(marker, 0.5) == []


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_detached_descendant_ends_with_terminal_stop(
    runs: Runs, marker: str, shape: str
) -> None:
    argv, lingering = shape_argv(shape, marker, "stay")
    started = await runs.call("terminal.run", argv=argv, background=True)
    assert started.status == "succeeded", started
    await wait_marked(marker, lingering)
    stopped = await runs.call("terminal.stop", run_id=started.output["run_id"])
    assert stopped.status == "cancelled", stopped
    assert await wait_none(marker, 0.5) == []


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_detached_descendant_ends_when_the_registry_closes(
    runs: Runs, marker: str, shape: str
) -> None:
    argv, lingering = shape_argv(shape, marker, "stay")
    started = await runs.call("terminal.run", argv=argv, background=True)
    assert started.status == "succeeded", started
    await wait_marked(marker, lingering)
    await runs.runs.aclose()
    assert await wait_none(marker, 0.5) == []
    status = await runs.call("terminal.status", run_id=started.output["run_id"])
    assert status.output["status"] == "cancelled"


HOST_CHILD = """
import sys, anyio
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities

async def main(tmp, sandbox, argv):
    config = parse_config({
        "host": {"database": f"{tmp}/hostkit.db", "workspace": f"{tmp}/ws",
                 "artifacts": f"{tmp}/artifacts"},
        "providers": {"test": {"kind": "scripted"}},
        "agents": {"assistant": {"provider": "test", "memory": False, "sandbox": sandbox,
                                 "builtins": ["terminal.run"]}},
    }, base_dir=__import__("pathlib").Path(tmp))
    model = ScriptedModel([CallTools(("terminal_run", {"argv": argv, "background": True})),
                           Reply("started")])
    host = await Host.open(config, capabilities=capabilities(model, config=config))
    await anyio.Path(tmp, "host-open").touch()  # the test's setup ends here
    result = await host.run_turn("assistant", "start it")
    print("started", result, flush=True)
    await anyio.sleep(600)

anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["bubblewrap", "none"])
@pytest.mark.parametrize("shape", SHAPES)
async def test_nothing_survives_a_host_killed_with_sigkill(
    tmp_path: Path, marker: str, shape: str, sandbox: str
) -> None:
    if sandbox == "bubblewrap":
        await needs_bwrap()
    (tmp_path / "ws").mkdir()
    argv, lingering = shape_argv(shape, marker, "stay")
    log = tmp_path / "host.log"
    with log.open("wb") as sink:
        child = await anyio.open_process(
            [sys.executable, "-c", textwrap.dedent(HOST_CHILD), str(tmp_path), sandbox, *argv],
            stdout=sink,
            stderr=sink,
            cwd=Path(__file__).parents[2],
        )
    async with child:
        try:
            with anyio.fail_after(SETUP_S):
                while not await anyio.Path(tmp_path / "host-open").exists():
                    assert child.returncode is None, await anyio.Path(log).read_text()
                    await anyio.sleep(0.05)
            with anyio.fail_after(WAIT_S):  # from the open Host: its turn starts the escape
                while True:
                    assert child.returncode is None, await anyio.Path(log).read_text()
                    if len(await anyio.to_thread.run_sync(marked, marker)) >= lingering:
                        break
                    await anyio.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            await child.wait()
    assert await wait_none(marker, 5.0) == []
    assert child.returncode == -signal.SIGKILL


def subreaper() -> bool:
    """PR_GET_CHILD_SUBREAPER of this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0
    return bool(flag.value)


def own_zombie(pid: int) -> bool:
    """Whether ``pid`` is a zombie child of this process (nothing here would reap it)."""
    try:
        proc = psutil.Process(pid)
        return proc.ppid() == os.getpid() and proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def orphan_of_this_process() -> int:
    """Blocking: what a notebook's ``!cmd &`` does: a shell starts a short command in the
    background and exits at once, orphaning it; its pid."""
    done = subprocess.run(
        ["/bin/sh", "-c", "sleep 0.2 & echo $!"], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


async def test_the_host_is_a_child_subreaper_while_it_owns_an_unsandboxed_run(
    runs: Runs, marker: str
) -> None:
    """An orphan that escapes an unsandboxed run's init comes back to the Host while the
    run lives. A sandboxed run needs no such net (nothing in its namespace outlives its
    init): the process adopts nothing for it, and its own orphans are no zombies of it
    meanwhile either."""
    assert not subreaper()
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: runs.call("terminal.run", argv=[PY3, "-c", SLEEP, marker]))
        await wait_marked(marker, 1)
        assert subreaper() is not runs.policy.sandboxed
        if runs.policy.sandboxed:
            orphan = await anyio.to_thread.run_sync(orphan_of_this_process)
            await anyio.sleep(1.0)
            assert not own_zombie(orphan)
        group.cancel_scope.cancel()
    assert not subreaper()


async def test_the_processs_own_orphans_are_never_left_zombies_of_it_after_a_run(
    runs: Runs,
) -> None:
    """The Host shares its process (a notebook's kernel, a script). Made a subreaper for
    good, it adopted every orphan of the process's own children, and nothing reaped them:
    ``!cmd &`` in a notebook left a zombie for each command, for the kernel's life."""
    outcome = await runs.call("terminal.run", argv=[PY3, "-c", "pass"])
    assert outcome.status == "succeeded", outcome
    orphans = [await anyio.to_thread.run_sync(orphan_of_this_process) for _ in range(3)]
    await anyio.sleep(1.0)
    assert [pid for pid in orphans if own_zombie(pid)] == []


async def test_a_process_that_was_a_subreaper_before_stays_one(runs: Runs, marker: str) -> None:
    """An embedding process's own supervisor choice (a container's init, say) is kept."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(36, 1, 0, 0, 0) == 0
    try:
        outcome = await runs.call("terminal.run", argv=[PY3, "-c", "pass"])
        assert outcome.status == "succeeded", outcome
        assert subreaper()
    finally:
        libc.prctl(36, 0, 0, 0, 0)


KILL_THE_INIT = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(300)
    os._exit(0)
os.waitpid(pid, 0)
os.kill(os.getppid(), signal.SIGKILL)  # the per-run init that keeps the orphan
os._exit(0)
"""


async def test_a_command_that_kills_its_init_is_never_reported_clean(
    runs: Runs, marker: str
) -> None:
    """Unsandboxed, a command may kill the init that holds its orphans; the orphan then
    goes to the Host, out of the tree. The run cannot vouch for it: ``indeterminate``.
    Sandboxed, the init is outside the run's PID namespace and cannot be signalled."""
    outcome = await runs.call("terminal.run", argv=[PY3, "-c", KILL_THE_INIT, marker])
    if runs.policy.sandboxed:
        assert outcome.status == "succeeded", outcome
        assert await wait_none(marker, 2.0) == []
    else:
        assert outcome.status == "indeterminate", outcome
        assert "init was killed" in outcome.output["reason"]


async def test_an_ordinary_signal_death_is_still_reported_as_such(runs: Runs) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    outcome = await runs.call("terminal.run", argv=[PY3, "-c", code])
    assert outcome.status == "failed", outcome
    assert outcome.output["exit_code"] in (-9, 137)  # unsandboxed / bwrap's convention
