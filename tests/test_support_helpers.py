"""The process helper the crash tests share (tests/support.py)."""

from __future__ import annotations

import signal
import sys

import anyio
import anyio.abc
import pytest

from tests.support import child_process

pytestmark = pytest.mark.anyio

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


async def test_a_block_that_fails_kills_its_child_instead_of_waiting_for_it() -> None:
    # A crash test whose marker never appears fails: leaving the block must not wait for
    # a child that sleeps until the signal the test never sent (there is no test timeout).
    children: list[anyio.abc.Process] = []

    async def gives_up() -> None:
        async with child_process(SLEEPER) as child:
            children.append(child)
            with anyio.fail_after(0.2):
                await anyio.sleep(5)

    with anyio.fail_after(10), pytest.raises(TimeoutError):
        await gives_up()
    assert children[0].returncode == -signal.SIGKILL


async def test_a_block_that_ends_normally_waits_for_its_child_as_before() -> None:
    async with child_process([sys.executable, "-c", "import time; time.sleep(0.3)"]) as child:
        pass
    assert child.returncode == 0
