"""Clause: slots "run by a SlotRuntime under deadlines": a late result is never used.

A slot that swallows the deadline's cancellation, or blocks the event loop
(``time.sleep`` in an async slot) so the deadline cannot fire, still returns
a value; the runtime refuses it by the clock and the slot fails.
"""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from blockbuster import BlockBuster

from hostkit.cores import (
    AuthorContext,
    AuthorTurn,
    SlotFailed,
    SlotRuntime,
    SlotsSpec,
    StateRuntime,
)
from hostkit.store import RuntimeStore, SessionLease

pytestmark = pytest.mark.anyio

SLOTS = """
import anyio, time

SWALLOWED = []

async def stubborn(ctx, text):
    for _ in range(3):
        try:
            await anyio.sleep(0.5)
        except BaseException:
            SWALLOWED.append(1)
    return "late: " + text

async def blocks_the_loop(ctx, text):
    time.sleep(0.5)
    return "late: " + text

async def quick(ctx, text):
    return "on time: " + text
"""


def slots(tmp_path: Path, entry: str) -> SlotRuntime:
    name = f"hkcore_deadline_{uuid.uuid4().hex[:12]}"
    directory = tmp_path / "rev" / name
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text("")
    (directory / "slots.py").write_text(textwrap.dedent(SLOTS))
    return SlotRuntime(
        root=tmp_path / "rev", package=name, slots=SlotsSpec(input=entry), timeout_s=0.2
    )


@pytest.fixture
def ctx(store: RuntimeStore) -> AuthorContext:
    lease = SessionLease("sess-1", "turn-1", 1, "owner", time.time() + 60, 60.0)
    return AuthorTurn(
        StateRuntime(store),
        turn_id="turn-1",
        session_id="sess-1",
        core_id="notes",
        core_revision="a" * 40,
        request_id="req-1",
        lease=lease,
        sink=lambda kind, data: None,
    ).context


async def test_a_slot_that_swallows_the_deadline_fails(tmp_path: Path, ctx: AuthorContext) -> None:
    runtime = slots(tmp_path, "slots:stubborn")
    with pytest.raises(SlotFailed) as failed:
        await runtime.input(ctx, "x")
    assert failed.value.message == "slot 'input' did not finish within 0.2s"
    assert sys.modules[f"{runtime.package}.slots"].SWALLOWED  # it did swallow it


async def test_an_async_slot_blocking_the_loop_past_its_deadline_fails(
    tmp_path: Path, ctx: AuthorContext, blockbuster: BlockBuster
) -> None:
    # The blocking call is the slot's (the point of the test), not hostkit's.
    blockbuster.functions["time.sleep"].deactivate()
    runtime = slots(tmp_path, "slots:blocks_the_loop")
    started = time.monotonic()
    with pytest.raises(SlotFailed) as failed:
        await runtime.input(ctx, "x")
    assert time.monotonic() - started >= 0.5  # the loop was blocked: the deadline never fired
    assert failed.value.message == "slot 'input' did not finish within 0.2s"


async def test_a_slot_within_its_deadline_is_used(tmp_path: Path, ctx: AuthorContext) -> None:
    assert await slots(tmp_path, "slots:quick").input(ctx, "x") == "on time: x"
