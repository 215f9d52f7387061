"""Identifiers: time-ordered, random, prefixed so a stray id says what it names."""

from __future__ import annotations

import os
import time

__all__ = ["new_id"]


def new_id(prefix: str) -> str:
    """Return ``prefix_`` + 12 hex digits of milliseconds + 16 random hex digits.

    Time-ordered ids keep B-tree inserts local; the random half makes them
    unguessable, so an id alone never works as a capability.
    """
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(8).hex()}"
