"""The promotion test gate: run a candidate core's own pytest suite in a child process.

This runs the core's code UNSANDBOXED as the Host user (docs/revisions.md):
promoting is an operator act, like running the tests by hand. What the gate
does bound: the environment (an allowlist, so the Host's provider keys and
channel secrets do not leak into the core's tests), the time (the whole
process group is killed at the core's ``limits.test_timeout_s``) and the
output kept (the tail only).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

__all__ = ["TEST_ENV_ALLOWLIST", "TestRun", "run_core_tests"]

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
    environ: Mapping[str, str] | None = None,
    allowlist: Sequence[str] = TEST_ENV_ALLOWLIST,
    max_tail: int = MAX_OUTPUT_TAIL,
) -> TestRun:
    """Run ``python -m pytest -q -p no:cacheprovider tests`` with cwd and PYTHONPATH = ``root``.

    ``root`` is a materialized revision (its ``hkcore_*`` package importable
    from there); the Host's own hostkit is on the path after it, so a core's
    tests import the same hostkit the Host runs it with.
    """
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in allowlist if name in source}
    hostkit_home = str(_HOSTKIT_HOME)
    env["PYTHONPATH"] = os.pathsep.join((str(root), hostkit_home))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    # The suite gets pytest and anyio's plugin, not whatever plugins the Host's
    # environment happens to hold (loading those all costs seconds per gate and
    # makes a core's verdict depend on the Host's install); a core that needs
    # another plugin names it in its conftest.py (``pytest_plugins = [...]``).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "anyio.pytest_plugin",
        "tests",
    ]
    process = await anyio.open_process(
        argv,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Its own session: one killpg ends whatever the tests started.
        start_new_session=True,
    )
    tail = bytearray()
    timed_out = False
    try:
        with anyio.move_on_after(timeout_s) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                tail += chunk
                del tail[: max(0, len(tail) - max_tail * 4)]
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        with anyio.CancelScope(shield=True):
            _kill_group(process)
            await process.aclose()
    text = tail.decode(errors="replace")[-max_tail:]
    return TestRun(
        returncode=None if timed_out else process.returncode, timed_out=timed_out, tail=text
    )


def _kill_group(process: Process) -> None:
    """Kill the suite's whole process group, even after it exited (it may have left children)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
