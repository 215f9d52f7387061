"""Identifiers are unique, time-ordered and unguessable, across threads and forks."""

from __future__ import annotations

import os
import threading

import pytest

from hostkit.types import new_id


def test_ids_are_unique_prefixed_and_time_ordered() -> None:
    ids = [new_id("turn") for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("turn_") and len(i) == len("turn_") + 28 for i in ids)
    stamps = [i[5:17] for i in ids]
    assert stamps == sorted(stamps)
    # The random halves never repeat, also across the OS-randomness block boundary.
    assert len({i[17:] for i in ids}) == len(ids)


def test_threads_never_share_random_bytes() -> None:
    found: list[list[str]] = []

    def mint() -> None:
        found.append([new_id("x")[-16:] for _ in range(2000)])

    threads = [threading.Thread(target=mint) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [tail for batch in found for tail in batch]
    assert len(set(flat)) == len(flat) == 8000


# Python 3.12+ warns about fork() in a process with threads; this child only writes a pipe.
@pytest.mark.filterwarnings("ignore:This process.*fork:DeprecationWarning")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    new_id("warm")  # the parent holds a block of random bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids, then leave at once
        os.close(read)
        os.write(write, " ".join(new_id("c")[-16:] for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [new_id("c")[-16:] for _ in range(8)]
    assert len(child) == 8
    assert not set(child) & set(parent)
