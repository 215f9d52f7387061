"""A command cannot forge its init's status report (unsandboxed, as the same user).

The per-run init reports the command's wait status on a pipe before it exits;
a run whose init ended without a report ends ``indeterminate`` (its orphans
may have escaped). Unsandboxed, the command is the init's own user: it could
open ``/proc/<init>/fd/<report fd>``, write ``0``, kill the init, and the run
read as a clean exit. The init is non-dumpable, so that open is refused.

Root may open any process's descriptors whatever its dumpable flag, so the
init and its command run here as an unprivileged user (``nobody`` when the
suite runs as root), under a stdlib-only driver that reads the report as the
Host does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hostkit.builtins.process._reaper import INIT

NOBODY = 65534
PY3 = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Runs the init (argv[1]) over ``sh -c SCRIPT sh <report fd>`` and prints how it ended and
# what it reported. A subreaper, so the command left behind by its init is reaped here.
DRIVER = r"""
import ctypes, json, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
read, write = os.pipe()
argv = [sys.executable, "-I", "-S", "-c", sys.argv[1], str(os.getpid()), str(write), ""]
argv += ["/bin/sh", "-c", sys.argv[2], "sh", str(write)]
init = subprocess.Popen(
    argv, pass_fds=(write,), start_new_session=True, stderr=subprocess.PIPE, text=True
)
os.close(write)
_, err = init.communicate(timeout=30)
report = os.read(read, 64).decode()
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
print(json.dumps({"code": init.returncode, "report": report, "stderr": err}))
"""

# What a command of the init's user does to forge a clean exit: write a status on the
# init's report pipe, then kill the init before it reports the real one.
FORGE = 'echo 0 > "/proc/$PPID/fd/$1"; echo "wrote=$?" >&2; kill -9 "$PPID"; exit 3'


def _drive(script: str) -> dict[str, object]:
    """Blocking: the driver's answer, run as this user or, for root, as nobody."""
    root = os.geteuid() == 0
    done = subprocess.run(
        [PY3, "-I", "-S", "-c", DRIVER, INIT, script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        user=NOBODY if root else None,
        group=NOBODY if root else None,
        extra_groups=[] if root else None,
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_a_command_cannot_write_its_inits_report_and_kill_it() -> None:
    answer = _drive(FORGE)
    assert answer["code"] == -9, answer  # the init was killed ...
    assert answer["report"] == "", answer  # ... before it reported: the run is indeterminate
    stderr = str(answer["stderr"])
    assert "wrote=0" not in stderr
    assert "Permission denied" in stderr


def test_an_init_that_is_not_killed_reports_the_real_status() -> None:
    """The driver reads reports at all: the same command, minus the forgery and the kill."""
    answer = _drive("exit 3")
    assert (answer["code"], str(answer["report"]).strip()) == (3, str(3 << 8)), answer
