"""What a process in the bubblewrap sandbox can see and do, with real processes.

Each test runs ``terminal.run`` through a real ``TerminalRuns`` and checks the
isolation from the inside: only its own processes in ``/proc``, none of the
Host's state (even when an operator put it inside the workspace), no home
directory, no network without the ``terminal.network`` grant, only
allowlisted variables, and the configured resource limits. Without
bubblewrap, ``terminal.run`` refuses before anything starts; with
``sandbox="none"`` it runs and says so.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    DEFAULT_ENV_ALLOWLIST,
    INSTALL_HINT,
    UNSANDBOXED,
    ProcessSupervisor,
    ResourceLimits,
    SandboxPolicy,
    TerminalRuns,
    mask_plan,
    probe_bubblewrap,
)
from hostkit.builtins.process import _sandbox as sandbox_module
from hostkit.effects import ApprovalRequest, ToolContext, ToolOutcome
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest
from tests.hosts import request
from tests.parts import missing

pytestmark = pytest.mark.anyio

KEY = b"sandbox-test-artifact-key-32byte"
PY3 = "/usr/bin/python3"
HOST_SECRET = "host-only-value-7d1e"


class Sandbox:
    def __init__(self, runs: TerminalRuns, supervisor: ProcessSupervisor, workspace: Path) -> None:
        self.runs = runs
        self.supervisor = supervisor
        self.workspace = workspace

    async def run(self, policy: SandboxPolicy, *argv: str, **arguments: Any) -> ToolOutcome:
        tool = next(t for t in self.runs.tools(sandbox=policy) if t.name == "terminal.run")
        context = ToolContext("turn", "sess", "core", "owner", self.workspace)
        outcome = await tool.invoke(context, tool.validate({"argv": argv, **arguments}))
        assert isinstance(outcome, ToolOutcome)
        return outcome

    async def status(self, run_id: str) -> ToolOutcome:
        tool = next(t for t in self.runs.tools() if t.name == "terminal.status")
        context = ToolContext("turn", "sess", "core", "owner", self.workspace)
        outcome = await tool.invoke(context, tool.validate({"run_id": run_id}))
        assert isinstance(outcome, ToolOutcome)
        return outcome


async def open_sandbox(
    tmp_path: Path, *, bwrap: str = "bwrap", artifact_root: Path | None = None
) -> AsyncIterator[Sandbox]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=artifact_root or tmp_path / "artifacts",
            artifact_key=KEY,
            grace_s=0.2,
            bwrap=bwrap,
        ) as runs,
    ):
        yield Sandbox(runs, supervisor, workspace)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)
    async for opened in open_sandbox(tmp_path):
        yield opened


def stdout(outcome: ToolOutcome) -> str:
    tail = outcome.output["stdout"]["tail"]
    assert isinstance(tail, str)
    return tail


async def test_a_sandboxed_process_sees_only_its_own_processes(sandbox: Sandbox) -> None:
    code = (
        "import os; print(json.dumps(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())))"
    )
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", "import json; " + code)
    assert outcome.status == "succeeded", outcome
    pids = sorted(json.loads(stdout(outcome)))
    assert pids == [1, 2]  # bwrap's init and the command (prlimit exec'd it); nothing else


async def test_the_hosts_environment_is_unreadable(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_HOST_ONLY", HOST_SECRET)
    code = f"print(open('/proc/{os.getpid()}/environ', 'rb').read())"
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", code)
    assert outcome.status == "failed"
    assert HOST_SECRET not in json.dumps(outcome.output)
    assert "No such file" in outcome.output["stderr"]["tail"]


async def test_host_state_inside_the_workspace_is_masked(sandbox: Sandbox) -> None:
    ws = sandbox.workspace
    state = {
        "hostkit.db": "db-rows",
        "hostkit.db-wal": "wal-frames",
        "hostkit.db-shm": "shm-index",
        "hostkit.db.v3.backup": "old-rows",
        "hostkit.toml": "config",
    }
    for name, text in state.items():
        await anyio.Path(ws / name).write_text(f"SECRET-{text}")
    await anyio.Path(ws / ".hostkit-artifacts").mkdir()
    await anyio.Path(ws / ".hostkit-artifacts" / "out").write_text("SECRET-artifact")
    await anyio.Path(ws / "notes.txt").write_text("visible")
    hidden = (ws / "hostkit.db", ws / ".hostkit-artifacts", ws / "hostkit.toml")
    names = [*state, ".hostkit-artifacts/out", "notes.txt"]
    code = (
        "import sys\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(n, open(n).read())\n"
        "    except OSError as e: print(n, 'refused', e.errno)\n"
    )
    outcome = await sandbox.run(SandboxPolicy(hidden=hidden), PY3, "-c", code, *names)
    assert outcome.status == "succeeded", outcome
    text = stdout(outcome)
    assert "SECRET" not in text
    assert "notes.txt visible" in text
    # The real files are untouched by the masks.
    assert await anyio.Path(ws / "hostkit.db").read_text() == "SECRET-db-rows"


async def test_no_sqlite_side_file_can_be_planted_beside_a_database_in_the_workspace(
    sandbox: Sandbox,
) -> None:
    """A ``-journal`` written beside the database would be replayed into it by the next
    open (a forged database), a ``-wal`` read as its newest pages: absent or not, the
    sandbox cannot create, replace or remove them, and the database stays whole."""
    ws = sandbox.workspace
    database = ws / "hostkit.db"
    await anyio.to_thread.run_sync(_wal_database, database)
    code = (
        "import os, sys\n"
        "for n in sys.argv[1:]:\n"
        "    for act in ('write', 'remove'):\n"
        "        try:\n"
        "            (open(n, 'wb').write(b'forged') if act == 'write' else os.remove(n))\n"
        "            print(n, act, 'done')\n"
        "        except OSError as e: print(n, act, 'refused')\n"
    )
    sides = ["hostkit.db-journal", "hostkit.db-wal", "hostkit.db-shm"]
    outcome = await sandbox.run(SandboxPolicy(hidden=(database,)), PY3, "-c", code, *sides)
    assert outcome.status == "succeeded", outcome
    assert "done" not in stdout(outcome)
    assert stdout(outcome).count("refused") == 6
    for side in sides:
        path = anyio.Path(ws / side)
        assert not await path.exists() or await path.read_bytes() == b""
    rows = await anyio.to_thread.run_sync(_rows, database)
    assert rows == [("kept",)]


def _wal_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES ('kept')")
        conn.commit()
    finally:
        conn.close()


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute("SELECT x FROM t"))
    finally:
        conn.close()


async def test_kernel_settings_are_read_only_inside(sandbox: Sandbox) -> None:
    """The sandbox's uid 0 is the real root when the Host runs as root: a writable
    ``core_pattern`` would run a program of the agent's outside every namespace."""
    code = (
        "import os, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        value = open(path).read()\n"
        "        with open(path, 'w') as f: f.write(value)  # the same value: harmless\n"
        "        print(path, 'WRITTEN')\n"
        "    except OSError as e: print(path, 'refused', e.errno)\n"
    )
    paths = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_ratio"]
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", code, *paths)
    assert outcome.status == "succeeded", outcome
    text = stdout(outcome)
    assert "WRITTEN" not in text
    assert text.count("refused 30") == len(paths)  # EROFS


async def test_host_state_under_a_system_directory_is_masked(sandbox: Sandbox) -> None:
    # /etc is bound read-only for every run; a Host whose state lives under it must
    # still not show it. /etc/hostname stands in for such a file (nothing is written).
    expected = await anyio.Path("/etc/hostname").read_text()
    assert expected.strip()
    code = (
        "try: print(repr(open('/etc/hostname').read()))\n"
        "except OSError as e: print('refused', e.errno)\n"
    )
    shown = await sandbox.run(SandboxPolicy(), PY3, "-c", code)
    assert stdout(shown) == f"{expected!r}\n"
    hidden = await sandbox.run(SandboxPolicy(hidden=(Path("/etc/hostname"),)), PY3, "-c", code)
    assert stdout(hidden) in ("''\n", "refused 13\n")  # masked by /dev/null


async def test_the_artifact_root_is_masked_even_before_any_output_exists(
    tmp_path: Path,
) -> None:
    """The first run ever starts before the artifact root exists (here inside the
    workspace); a later run's output must not become readable to it."""
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)
    artifacts = tmp_path / "ws" / "art"
    async for runs in open_sandbox(tmp_path, artifact_root=artifacts):
        policy = SandboxPolicy(hidden=(artifacts,))
        code = "import os, time; time.sleep(1.5); print(sorted(os.walk('art')))"
        watcher = await runs.run(policy, PY3, "-c", code, background=True)
        assert watcher.status == "succeeded", watcher
        other = await runs.run(policy, "/bin/echo", "PRIVATE-OUTPUT")
        assert other.status == "succeeded", other
        written = await anyio.to_thread.run_sync(lambda: list(artifacts.rglob("*")))
        assert any(p.is_file() for p in written)  # the other run's output is there, outside
        run_id = str(watcher.output["run_id"])
        with anyio.fail_after(30):
            status = await runs.status(run_id)
            while status.output["status"] == "running":
                await anyio.sleep(0.2)
                status = await runs.status(run_id)
        assert status.output["stdout"]["tail"] == "[('art', [], [])]\n", status


async def test_the_home_directory_is_not_there(sandbox: Sandbox) -> None:
    home = str(Path.home())
    outcome = await sandbox.run(
        SandboxPolicy(), PY3, "-c", "import os, sys; print(os.path.exists(sys.argv[1]))", home
    )
    assert stdout(outcome) == "False\n"


async def test_only_allowlisted_variables_reach_the_child(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_HOST_ONLY", HOST_SECRET)
    outcome = await sandbox.run(
        SandboxPolicy(), PY3, "-c", "import json, os; print(json.dumps(dict(os.environ)))"
    )
    env = json.loads(stdout(outcome))
    # bwrap sets PWD (the working directory, which getcwd() tells anyway).
    assert set(env) <= {*DEFAULT_ENV_ALLOWLIST, "PWD"}
    assert HOST_SECRET not in json.dumps(env)


async def _connect_from_sandbox(sandbox: Sandbox, policy: SandboxPolicy) -> ToolOutcome:
    code = (
        "import socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n"
        "print(s.recv(16).decode())\n"
    )
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.send(b"hello-from-host")

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        outcome = await sandbox.run(policy, PY3, "-c", code, str(port), deadline_s=20)
        group.cancel_scope.cancel()
    return outcome


async def test_no_network_without_the_grant(sandbox: Sandbox) -> None:
    outcome = await _connect_from_sandbox(sandbox, SandboxPolicy())
    assert outcome.status == "failed"
    assert "hello-from-host" not in stdout(outcome)


async def test_the_network_grant_shares_the_network(sandbox: Sandbox) -> None:
    outcome = await _connect_from_sandbox(sandbox, SandboxPolicy(network=True))
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome) == "hello-from-host\n"


# --- resource limits ----------------------------------------------------------------------


async def test_the_file_size_limit_stops_a_large_write(sandbox: Sandbox) -> None:
    policy = SandboxPolicy(limits=ResourceLimits(file_size_mb=1))
    outcome = await sandbox.run(policy, "sh", "-c", "head -c 3000000 /dev/zero > big; echo $?")
    size = (await anyio.Path(sandbox.workspace / "big").stat()).st_size
    assert size <= 1024 * 1024
    assert stdout(outcome).strip() != "0"  # head was stopped (SIGXFSZ or EFBIG)


@pytest.mark.parametrize("directory", ["/tmp", "/dev/shm"])
async def test_the_tmp_size_limit_stops_filling_memory(sandbox: Sandbox, directory: str) -> None:
    """/tmp and /dev/shm are memory (tmpfs) that no rlimit counts: many files under the
    per-file limit would fill the host's RAM without ``tmp_mb``."""
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.sized_tmpfs:
        pytest.skip(probe.reason)
    code = (
        "import os\n"
        "for n in range(8):\n"
        f"    with open(f'{directory}/f{{n}}', 'wb') as out: out.write(b'x' * (1 << 20))\n"
    )
    policy = SandboxPolicy(limits=ResourceLimits(tmp_mb=4, file_size_mb=2))
    outcome = await sandbox.run(policy, PY3, "-c", code)
    assert outcome.status == "failed"
    assert "No space left on device" in outcome.output["stderr"]["tail"]
    fits = await sandbox.run(policy, PY3, "-c", code.replace("range(8)", "range(2)"))
    assert fits.status == "succeeded", fits


async def test_dev_takes_no_files_and_its_devices_still_work(sandbox: Sandbox) -> None:
    """bwrap's /dev is a tmpfs of its own, unbounded: it is read-only once set up."""
    code = (
        "import os\n"
        "try:\n"
        "    open('/dev/filler', 'wb')\n"
        "    print('created')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
        "with open('/dev/null', 'wb') as sink: sink.write(b'x')\n"
        "with open('/dev/zero', 'rb') as zero: print(len(zero.read(3)))\n"
    )
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", code)
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome).split() == ["refused", str(errno.EROFS), "3"]


# keyctl / add_key by machine, as the kernel numbers them.
KEY_SYSCALLS = {"x86_64": (250, 248), "aarch64": (219, 217)}
KEY_PROBE = """
import ctypes, sys
keyctl = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = libc.syscall(keyctl, 10, ctypes.c_int(-3), b"user", b"hk-host-secret", 0)
print("found" if found > 0 else f"not-found {ctypes.get_errno()}")
try:
    with open("/proc/keys") as listing:
        print("listed" if "hk-host-secret" in listing.read() else "not-listed")
except OSError:
    print("not-listed")
"""


async def test_the_hosts_keys_are_out_of_a_runs_reach(sandbox: Sandbox) -> None:
    """Keyrings are not namespaced: a run inheriting the Host's session keyring could
    search it and read a key's payload there. Each run gets a fresh one, and the kernel's
    key listing is masked."""
    numbers = KEY_SYSCALLS.get(os.uname().machine)
    if numbers is None:
        pytest.skip(f"no keyctl number known for {os.uname().machine}")
    keyctl, add_key = numbers
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # This test process's own session keyring (KEYCTL_JOIN_SESSION_KEYRING), not the CI's.
    if libc.syscall(keyctl, 1, None) < 0:
        pytest.skip(f"keyrings are not available here (errno {ctypes.get_errno()})")
    payload = b"keyring-secret-payload"
    key = libc.syscall(add_key, b"user", b"hk-host-secret", payload, len(payload), -3)
    assert key > 0, ctypes.get_errno()
    try:
        outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", KEY_PROBE, str(keyctl))
    finally:
        libc.syscall(keyctl, 21, key)  # KEYCTL_INVALIDATE
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome).split() == ["not-found", str(errno.ENOKEY), "not-listed"]


async def test_the_address_space_limit_refuses_a_large_allocation(sandbox: Sandbox) -> None:
    policy = SandboxPolicy(limits=ResourceLimits(address_space_mb=256))
    code = (
        "try:\n    b = bytearray(1024 * 1024 * 1024)\n    print('allocated')\n"
        "except MemoryError:\n    print('refused')"
    )
    outcome = await sandbox.run(policy, PY3, "-c", code)
    assert stdout(outcome) == "refused\n"


@pytest.mark.slow
async def test_the_cpu_time_limit_ends_a_busy_loop(sandbox: Sandbox) -> None:
    policy = SandboxPolicy(limits=ResourceLimits(cpu_time_s=1))
    outcome = await sandbox.run(policy, PY3, "-c", "while True: pass", deadline_s=30)
    assert outcome.status == "failed"
    assert outcome.output["duration_s"] < 15
    assert outcome.output["exit_code"] != 0  # SIGXCPU, then SIGKILL at the hard limit


async def test_the_process_limit_ends_a_forking_tree(sandbox: Sandbox) -> None:
    # A bounded fork bomb: 60 sleepers. RLIMIT_NPROC does not bind root, so the Host's
    # per-tree count ends it; for other users fork() fails first. Either way: not 60.
    code = (
        "import os, time\n"
        "n = 0\n"
        "for _ in range(60):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "    except OSError:\n"
        "        break\n"
        "    time.sleep(0.02)\n"
        "print('forked', n, flush=True)\n"
        "time.sleep(60)\n"
    )
    policy = SandboxPolicy(limits=ResourceLimits(processes=10))
    outcome = await sandbox.run(policy, PY3, "-c", code, deadline_s=30)
    assert outcome.status == "failed", outcome
    assert outcome.output["duration_s"] < 20
    assert "forked 60" not in stdout(outcome)


# --- without bubblewrap ---------------------------------------------------------------------


async def test_a_missing_bubblewrap_refuses_the_run_before_anything_starts(
    tmp_path: Path,
) -> None:
    async for absent in open_sandbox(tmp_path, bwrap=str(tmp_path / "no-such-bwrap")):
        outcome = await absent.run(SandboxPolicy(), "touch", "ran")
        assert outcome.status == "denied"
        assert INSTALL_HINT in (outcome.error or "")
        assert absent.supervisor.owners() == ()
        assert not await anyio.Path(absent.workspace / "ran").exists()
        assert not await anyio.Path(tmp_path / "artifacts").exists()


async def test_sandbox_none_runs_and_says_it_is_unsandboxed(tmp_path: Path) -> None:
    async for plain in open_sandbox(tmp_path, bwrap=str(tmp_path / "no-such-bwrap")):
        outcome = await plain.run(UNSANDBOXED, "touch", "ran")
        assert outcome.status == "succeeded", outcome
        assert outcome.output["sandbox"] == "none"
        assert await anyio.Path(plain.workspace / "ran").exists()
        (tool,) = [t for t in plain.runs.tools(sandbox=UNSANDBOXED) if t.name == "terminal.run"]
        assert tool.description.startswith("UNSANDBOXED")
        (boxed,) = [t for t in plain.runs.tools() if t.name == "terminal.run"]
        assert "UNSANDBOXED" not in boxed.description


async def test_a_program_outside_the_sandbox_is_not_found(sandbox: Sandbox, tmp_path: Path) -> None:
    outside = tmp_path / "tool"
    await anyio.Path(outside).write_text("#!/bin/sh\necho hi\n")
    await anyio.Path(outside).chmod(0o755)
    outcome = await sandbox.run(SandboxPolicy(), str(outside))
    assert outcome.status == "denied"
    assert "not found in the sandbox" in (outcome.error or "")


class Recording:
    """An approver that writes down every request and denies it."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> str:
        self.requests.append(request)
        return "deny"


async def test_the_approval_prompt_says_when_a_run_would_be_unsandboxed(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    agent = {"provider": "test", "memory": False, "builtins": ["terminal.run"]}
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(workspace)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                core: {**agent, "sandbox": mode, "policy": {"ask": ["terminal.run"]}}
                for core, mode in (("boxed", "bubblewrap"), ("open", "none"))
            },
        },
        base_dir=tmp_path,
    )

    def decide(request: ModelRequest) -> Reply | CallTools:
        if request.messages[-1].role == "tool":
            return Reply("done")
        return CallTools(("terminal_run", {"argv": ["true"]}))

    model = ScriptedModel([decide], repeat_last=True)
    approver = Recording()
    caps = capabilities(model, config=config)
    async with Host.open(config, capabilities=caps, approver=approver) as host:
        for core in ("open", "boxed"):
            result = await host.turns.run(request("run it", core_id=core, conversation=core))
            assert result.effects[0].status == "denied", result
    open_request, boxed_request = approver.requests
    assert open_request.warning is not None
    assert "UNSANDBOXED" in open_request.warning
    assert open_request.view["warning"] == open_request.warning
    assert boxed_request.warning is None
    assert "warning" not in boxed_request.view


async def test_host_state_in_a_workspace_directory_stays_masked_after_a_rename(
    sandbox: Sandbox,
) -> None:
    """The masks cover paths, so a run that renames a directory on the way to a masked
    file (``state/`` to ``moved/``) would leave the next run's masks on a name that no
    longer exists and the database under a new one: every directory from the
    workspace down to a masked path is a mount point in the sandbox, which no run
    can rename, and the state stays where the Host keeps it."""
    ws = sandbox.workspace
    deep = ws / "state" / "db"
    await anyio.Path(deep).mkdir(parents=True)
    await anyio.Path(deep / "hostkit.db").write_text("SECRET-db-rows")
    await anyio.Path(ws / "state" / "notes.txt").write_text("visible")
    policy = SandboxPolicy(hidden=(deep / "hostkit.db",))
    rename = (
        "import os\n"
        "for old, new in (('state/db', 'db2'), ('state', 'moved'), ('state/db', 'state/x')):\n"
        "    try: os.rename(old, new); print(old, 'renamed')\n"
        "    except OSError as e: print(old, 'refused', e.errno)\n"
    )
    renamed = await sandbox.run(policy, PY3, "-c", rename)
    assert renamed.status == "succeeded", renamed
    assert "renamed" not in stdout(renamed)
    read = (
        "import glob\n"
        "for n in sorted(glob.glob('**/*', recursive=True)):\n"
        "    try: print(n, open(n).read())\n"
        "    except OSError as e: print(n, 'refused', e.errno)\n"
    )
    after = await sandbox.run(policy, PY3, "-c", read)
    assert after.status == "succeeded", after
    assert "SECRET" not in stdout(after)
    assert "state/notes.txt visible" in stdout(after)
    assert await anyio.Path(deep / "hostkit.db").read_text() == "SECRET-db-rows"


async def test_a_masked_directory_holding_another_masked_path_leaves_runs_working(
    sandbox: Sandbox,
) -> None:
    """State named as a directory and as a file inside it (``.hostkit/`` and
    ``.hostkit/hostkit.db``): the directory's empty tmpfs hides both; a mask of its own
    for the file could not be made inside that read-only tmpfs and failed every run."""
    ws = sandbox.workspace
    await anyio.Path(ws / ".hostkit").mkdir()
    await anyio.Path(ws / ".hostkit" / "hostkit.db").write_text("SECRET-db-rows")
    hidden = (ws / ".hostkit", ws / ".hostkit" / "hostkit.db")
    code = (
        "import os\n"
        "print(sorted(os.listdir('.hostkit')))\n"
        "try: print(open('.hostkit/hostkit.db').read())\n"
        "except OSError as e: print('refused', e.errno)\n"
    )
    outcome = await sandbox.run(SandboxPolicy(hidden=hidden), PY3, "-c", code)
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome).splitlines() == ["[]", "refused 2"]


async def test_the_cores_extraction_root_in_a_workspace_is_masked_from_the_hosts_first_open(
    tmp_path: Path,
) -> None:
    """Masks cover what exists: a cores root that appeared only at the first extraction
    would leave a sandboxed run free to plant ``<id>/<sha>/`` there first, which the Host
    would then take for the extracted core and import. The Host creates it when it opens
    (cores configured, none promoted yet), so the first run's plan masks it."""
    ws = tmp_path / "ws"
    config = parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(ws),
                "cores_dir": str(ws / ".hostkit-cores"),
            },
            "providers": {"test": {"kind": "scripted"}},
            "cores": {"notes": {"path": str(tmp_path / "cores" / "notes")}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config, capabilities=capabilities(ScriptedModel([]), config=config)):
        assert await anyio.Path(config.cores_root).is_dir()
        plan = await anyio.to_thread.run_sync(mask_plan, ws, config.state_paths())
    tmpfs = [plan[at + 1] for at, option in enumerate(plan) if option == "--tmpfs"]
    assert str(config.cores_root) in tmpfs


async def test_what_the_machine_keeps_from_its_users_is_not_shown_to_a_run(
    sandbox: Sandbox,
) -> None:
    """``--cap-drop ALL`` leaves an owner its right to read its own files, so a Host
    running as root showed its runs ``/etc/shadow`` (0640 root): a private entry of
    /etc (not readable by other users) is masked, what any user may read stays."""
    shadow = await anyio.Path("/etc/shadow").stat()
    assert not shadow.st_mode & stat.S_IROTH, "this machine's /etc/shadow is world-readable"
    code = (
        "import json, os\n"
        "def read(path):\n"
        "    try:\n"
        "        return open(path).read()\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "print(json.dumps([read('/etc/shadow'), read('/etc/passwd')[:5],"
        " os.path.exists('/etc/ssl/private') and os.listdir('/etc/ssl/private')]))"
    )
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", code)
    assert outcome.status == "succeeded", outcome
    shadow_text, passwd, private = json.loads(stdout(outcome))
    assert "root:" not in shadow_text
    assert passwd == "root:"
    assert private in (False, [])


def test_private_entries_are_the_ones_other_users_may_not_read(tmp_path: Path) -> None:
    top = tmp_path / "etc"
    (top / "ssl" / "private").mkdir(parents=True)
    (top / "ssl" / "private" / "host.key").write_text("key")
    (top / "ssl" / "private").chmod(0o700)
    (top / "ssl" / "certs.pem").write_text("public")
    (top / "hostkit").mkdir()
    (top / "hostkit" / "env").write_text("TOKEN=x")
    (top / "hostkit" / "env").chmod(0o600)
    (top / "passwd").write_text("root:x:0:0")
    (top / "shadow").write_text("root:hash")
    (top / "shadow").chmod(0o640)
    (top / "searchable-only").mkdir(mode=0o711)
    (top / "link").symlink_to(top / "shadow")
    assert sandbox_module._private_entries(str(top)) == [
        (str(top / "hostkit" / "env"), False),
        (str(top / "searchable-only"), True),
        (str(top / "shadow"), False),
        (str(top / "ssl" / "private"), True),
    ]
