"""``hostkit serve`` settles its heap once it listens.

What is alive then (modules, configuration, the open Host) lives as long as
the daemon; frozen, it leaves every later full collection's scan, which
otherwise paused all turns in flight for about 100 ms every few seconds
under load (bench/turn_bench.py). Garbage is collected first, not frozen.
"""

from __future__ import annotations

import gc
import weakref

from hostkit.cli._serve import settle_heap


class Cycle:
    """An object that refers to itself: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_settling_freezes_what_is_alive_and_collects_the_garbage_first() -> None:
    gc.disable()  # only settle_heap may collect the dropped cycle here
    alive = Cycle()
    dropped = weakref.ref(Cycle())
    before = gc.get_freeze_count()
    try:
        assert dropped() is not None
        settle_heap()
        assert dropped() is None
        assert gc.get_freeze_count() > before
        assert alive.me is alive
    finally:
        gc.unfreeze()
        gc.enable()
    assert gc.get_freeze_count() == 0
