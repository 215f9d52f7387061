"""A lease owner is judged by pid only where its pid means the same process.

Containers may share a host name (``--uts=host``, a compose ``hostname:``) but
not a PID namespace, and two machines may both be ``localhost``: there, the
owner's pid names another process (or none), so a live Host would look dead
and lose its turns, claims and session leases to the first Host that
looked. The owner records the kernel's boot id and its PID namespace; an
owner from anywhere else is ``unknown`` and only its lease expiry ends it.
A Host whose ``/proc`` was mounted from another PID namespace than its own
(``unshare --pid`` without ``--mount-proc``) cannot look up any pid it holds:
every owner is ``unknown`` to it, and its own start time comes from
``/proc/self``, which is itself whatever the mount numbers.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import pytest

from hostkit.store import LeaseOwner, owner_is_dead
from hostkit.store._lease import machine_identity

CHILD = (
    "import sys, time\n"
    "from hostkit.store import LeaseOwner\n"
    "print(LeaseOwner.current('host-in-a-namespace').encode(), flush=True)\n"
    "sys.stdin.read()\n"
)


def test_an_owner_on_another_boot_or_namespace_is_unknown_not_dead() -> None:
    ours = LeaseOwner.current("host-a")
    assert ours.machine == machine_identity() != ""
    boot, _, namespace = ours.machine.partition(":")
    for elsewhere in (f"{boot}:1", f"00000000-0000-0000-0000-000000000000:{namespace}"):
        # The same host name and a pid with another start time: dead if it were here.
        there = dataclasses.replace(ours, started=ours.started - 100, machine=elsewhere)
        assert there.liveness() == "unknown"
        assert not owner_is_dead(there.encode())
    assert dataclasses.replace(ours, started=ours.started - 100).liveness() == "dead"


def test_the_machine_survives_encoding_and_an_older_owner_names_none() -> None:
    ours = LeaseOwner.current("host-a")
    assert LeaseOwner.decode(ours.encode()) == ours
    # Written by a hostkit that recorded no machine: never judged by a pid it cannot place.
    older = f"{ours.host}|{ours.pid}|{ours.started - 100:.3f}|old"
    decoded = LeaseOwner.decode(older)
    assert decoded is not None
    assert decoded.machine == ""
    assert decoded.liveness() == "unknown"
    assert not owner_is_dead(older)


def test_a_live_host_in_its_own_pid_namespace_is_never_taken_for_dead() -> None:
    """A real process under ``unshare --pid`` (pid 1 in there, the same host name)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux's unshare is not installed")
    child = subprocess.Popen(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line:
            child.kill()
            _, err = child.communicate(timeout=10)
            pytest.skip(f"this machine cannot make a PID namespace here: {err.strip()[:200]}")
        owner = LeaseOwner.decode(line)
        assert owner is not None
        assert owner.host == LeaseOwner.current("host-a").host
        assert owner.pid == 1  # our pid 1 is another process, with another start time
        assert owner.machine != machine_identity()
        assert owner.liveness() == "unknown"
        assert not owner_is_dead(line)
    finally:
        child.kill()
        child.communicate(timeout=10)


# Beside its parent's /proc: a Host recorded as pid 2 of this namespace, started long ago,
# must not look dead because pid 2 of the parent's namespace is another process.
BESIDE_PARENTS_PROC = """
import json, os, socket
from hostkit.store import LeaseOwner, owner_is_dead
me = LeaseOwner.current("host-in-a-namespace")
with open("/proc/self/stat", "rb") as f:
    text = f.read()
ticks = int(text[text.rindex(b")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
other = LeaseOwner(socket.gethostname(), 2, 0.5, "host-b")
print(json.dumps({
    "pid": os.getpid(), "started": me.started, "ticks": ticks, "me": me.liveness(),
    "other": other.liveness(), "other_dead": owner_is_dead(other.encode()),
}))
"""


def test_a_host_whose_proc_numbers_another_namespace_proves_no_owner_dead() -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux's unshare is not installed")
    done = subprocess.run(
        [unshare, "--pid", "--fork", sys.executable, "-c", BESIDE_PARENTS_PROC],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"this machine cannot make a PID namespace here: {done.stderr[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["pid"] == 1  # numbered by its own namespace, beside the parent's /proc
    assert (seen["me"], seen["other"], seen["other_dead"]) == ("unknown", "unknown", False)
    assert seen["started"] == seen["ticks"]  # its own start, not the parent's pid 1's
