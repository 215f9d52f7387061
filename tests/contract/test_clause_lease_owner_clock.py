"""Clause: whether a lease's owner still runs does not depend on the wall clock.

A Host that looks dead gives up its sessions, claims and background runs at
once. The owner's start time is counted from boot, so a clock step (NTP, a
VM resumed or migrated, ``date -s``) never makes a live Host look like a
reused pid; a reused pid and an exited one are still seen as dead.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from hostkit.store import LeaseOwner, owner_is_dead


@pytest.mark.parametrize("step_s", [-3600.0, -2.0, 2.0, 86_400.0])
def test_a_live_owner_stays_alive_when_the_clock_steps(
    monkeypatch: pytest.MonkeyPatch, step_s: float
) -> None:
    owner = LeaseOwner.current("host-a")
    wall = psutil.Process.create_time
    # What a clock step does to every wall-clock process start time read afterwards.
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: wall(self) + step_s)
    monkeypatch.setattr(psutil, "boot_time", lambda: psutil.boot_time() + step_s)
    assert owner.liveness() == "alive"
    assert not owner_is_dead(owner.encode())


def test_an_exited_owner_and_a_reused_pid_are_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ours = LeaseOwner.current("host-a")
        # The child's pid with our start time: what a pid reused by another process looks like.
        reused = dataclasses.replace(ours, pid=child.pid)
        assert reused.liveness() == "dead"
    finally:
        child.kill()
        child.wait()
    assert reused.liveness() == "dead"
    assert owner_is_dead(reused.encode())


def test_an_owner_recorded_with_a_wall_clock_start_is_still_judged() -> None:
    """Rows an earlier hostkit wrote (or a Host without /proc) carry a wall-clock time."""
    me = psutil.Process()
    ours = LeaseOwner.current("host-a")
    legacy = LeaseOwner(ours.host, me.pid, me.create_time(), ours.instance)
    assert legacy.liveness() == "alive"
    assert LeaseOwner(ours.host, me.pid, me.create_time() - 100, "old").liveness() == "dead"
    assert LeaseOwner("another-machine", me.pid, 1.0, "remote").liveness() == "unknown"


def test_an_owner_in_this_process_lives_as_long_as_its_instance() -> None:
    """Several Host instances in one process, made on several threads: each is alive
    until it retires, and only that one is dead then (a Host opened again in a notebook
    kernel takes over what a closed one could not end)."""
    with ThreadPoolExecutor(4) as threads:
        owners = list(threads.map(LeaseOwner.current, [f"host-{n}" for n in range(8)]))
    assert {owner.liveness() for owner in owners} == {"alive"}
    owners[3].retire()
    assert [owner.liveness() for owner in owners].count("dead") == 1
    assert owners[3].liveness() == "dead"
    assert owner_is_dead(owners[3].encode())
    # An instance this process never made is no live one of it either.
    assert dataclasses.replace(owners[0], instance="host-elsewhere").liveness() == "dead"
