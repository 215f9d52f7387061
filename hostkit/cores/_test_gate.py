"""The promotion test gate: run a candidate core's own pytest suite in a child process.

The suite is the core's own code. The Host runs it through ``sandbox``, a
launcher the Host injects (bubblewrap, the sandbox of agent processes:
own PID namespace, no network, the revision and the interpreter read-only,
Host state masked, ``--die-with-parent``), so a test cannot read the Host's
``/proc/<pid>/environ`` or outlive the promoter. Without a sandbox the
suite runs as a plain child of the Host (only when the core says
``sandbox: none``; docs/revisions.md): then the environment allowlist,
the process-group kill at the deadline and a parent-death signal are all
the isolation there is, and a process the tests move into a session of its
own escapes the group kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = ["TEST_ENV_ALLOWLIST", "TestRun", "TestSandbox", "run_core_tests"]

# Like the terminal builtin's allowlist (hostkit.builtins.process): what a process
# needs to run, nothing that names a credential.
TEST_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "TMPDIR",
    "USER",
    "LOGNAME",
)
# Fits a GateOutcome detail (2,000 characters) with its first line.
MAX_OUTPUT_TAIL = 1_800
# The folder holding the hostkit package this Host runs (hostkit/cores/_test_gate.py -> ..).
_HOSTKIT_HOME = Path(__file__).resolve().parents[2]

TestSandbox = Callable[[Sequence[str], Path], Awaitable[Sequence[str]]]
"""``(argv, revision_dir) -> argv`` that runs ``argv`` sandboxed with cwd ``revision_dir``.

Raises a ``HostkitError`` (``SandboxUnavailable``) when it cannot sandbox here.
"""

# Unsandboxed only: pytest dies with the Host (PR_SET_PDEATHSIG survives exec), and
# never starts if the Host is already gone. argv[1] is the Host's pid.
_PARENT_DEATH_GUARD = """\
import ctypes, os, runpy, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(70)
sys.argv = ["pytest", *sys.argv[2:]]
runpy.run_module("pytest", run_name="__main__", alter_sys=True)
"""
_PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-p", "anyio.pytest_plugin", "tests")


@dataclass(frozen=True, slots=True)
class TestRun:
    """How a core's test suite ended: exit code (None: killed at the deadline) and output tail."""

    __test__ = False  # not a pytest test class, despite the name

    returncode: int | None
    timed_out: bool
    tail: str

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out


async def run_core_tests(
    root: Path,
    *,
    timeout_s: float,
    sandbox: TestSandbox | None,
    environ: Mapping[str, str] | None = None,
    allowlist: Sequence[str] = TEST_ENV_ALLOWLIST,
    max_tail: int = MAX_OUTPUT_TAIL,
) -> TestRun:
    """Run ``python -m pytest -q -p no:cacheprovider tests`` with cwd and PYTHONPATH = ``root``.

    ``root`` is a materialized revision (its ``hkcore_*`` package importable
    from there); the Host's own hostkit is on the path after it, so a core's
    tests import the same hostkit the Host runs it with. ``sandbox`` None
    runs the suite unsandboxed; a sandbox that cannot run raises (its
    ``HostkitError``) before anything starts.
    """
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in allowlist if name in source}
    env["PYTHONPATH"] = os.pathsep.join((str(root), str(_HOSTKIT_HOME)))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    # The suite gets pytest and anyio's plugin, not whatever plugins the Host's
    # environment happens to hold (loading those all costs seconds per gate and
    # makes a core's verdict depend on the Host's install); a core that needs
    # another plugin names it in its conftest.py (``pytest_plugins = [...]``).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if sandbox is not None:
        argv = list(await sandbox([sys.executable, "-m", "pytest", *_PYTEST_ARGS], root))
    else:
        argv = [sys.executable, "-c", _PARENT_DEATH_GUARD, str(os.getpid()), *_PYTEST_ARGS]
    process = await anyio.open_process(
        argv,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Its own process group, killed whole at the end. Sandboxed, that kills bwrap,
        # and the kernel then ends every process of the sandbox's PID namespace;
        # unsandboxed, a process that left the group (setsid) is not reached.
        start_new_session=True,
    )
    tail = bytearray()
    try:
        with anyio.move_on_after(timeout_s) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                tail += chunk
                del tail[: max(0, len(tail) - max_tail * 4)]
            await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            _kill_group(process)
            await process.aclose()
    # The deadline, not whether a cancellation was caught: output may end just as it fires.
    timed_out = scope.cancel_called
    text = tail.decode(errors="replace")[-max_tail:]
    return TestRun(
        returncode=None if timed_out else process.returncode, timed_out=timed_out, tail=text
    )


def _kill_group(process: Process) -> None:
    """Kill the suite's whole process group, even after it exited (it may have left children)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
