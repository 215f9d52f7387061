"""A lease owner is judged by pid only where its pid means the same process.

Containers may share a host name (``--uts=host``, a compose ``hostname:``) but
not a PID namespace, and two machines may both be ``localhost``: there, the
owner's pid names another process (or none), so a live Host would look dead
and lose its turns, claims and session leases to the first Host that
looked. The owner records the kernel's boot id and its PID namespace; an
owner from anywhere else is ``unknown`` and only its lease expiry ends it.
"""

from __future__ import annotations

import dataclasses
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
