"""Identifiers: time-ordered, random, prefixed so a stray id says what it names."""

from __future__ import annotations

import os
import threading
import time

__all__ = ["new_id"]

# Random bytes are taken from the OS in blocks and handed out 8 at a time: one
# getrandom() call per 512 ids instead of one per id (ids are minted on hot paths).
# Each thread has its own block, so no lock is needed and no two ids share bytes.
_BLOCK = 4096


class _Entropy(threading.local):
    def __init__(self) -> None:
        self.block = b""
        self.offset = 0

    def take(self, count: int) -> bytes:
        if self.offset + count > len(self.block):
            self.block, self.offset = os.urandom(_BLOCK), 0
        start = self.offset
        self.offset = start + count
        return self.block[start : start + count]


_entropy = _Entropy()


def _forget_after_fork() -> None:
    # A forked child must never hand out the bytes its parent still holds.
    _entropy.block, _entropy.offset = b"", 0


os.register_at_fork(after_in_child=_forget_after_fork)


def new_id(prefix: str) -> str:
    """Return ``prefix_`` + 12 hex digits of milliseconds + 16 random hex digits.

    Time-ordered ids keep B-tree inserts local; the random half makes them
    unguessable (OS randomness), so an id alone never works as a capability.
    """
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{_entropy.take(8).hex()}"
