"""SlotRuntime on its own: loading, deadlines, failures, return types.

Clauses: "Python slots (bootstrap, input, output) ... run by a SlotRuntime
under deadlines in the default in-process runtime" and "Provider, slot, and
effect failures after start are sanitized": a failure names the slot and the
exception's type, never its message. The package is a real directory laid
out the way a materialized revision is (``<root>/<package>/``).
"""

from __future__ import annotations

import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

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

SECRET = "sk-live-DO-NOT-LEAK-0123456789"
SLOTS = f"""
import asyncio, threading, time

IMPORTS = []
IMPORTS.append(1)
RELEASE = threading.Event()
THREADS = []

async def greet(ctx):
    return "be brief"

def sync_input(ctx, text):
    THREADS.append(threading.get_ident())
    return text.upper()

async def hang(ctx, text):
    await asyncio.sleep(60)

def block(ctx, text):
    RELEASE.wait(30)
    return text

async def explode(ctx, text):
    raise ValueError("{SECRET}")

async def number(ctx, text):
    return 42

async def empty(ctx, text):
    return "   "

async def none_out(ctx, text):
    return None

async def bad_bootstrap(ctx):
    return ["not", "text"]

async def own_cancel(ctx, text):
    raise asyncio.CancelledError()

NOT_A_FUNCTION = "text"
"""
BROKEN = f"""
raise RuntimeError("{SECRET}")
"""


def package(tmp_path: Path) -> tuple[Path, str]:
    """A revision dir holding a fresh package (a unique name: sys.modules is per process)."""
    name = f"hkcore_test_{uuid.uuid4().hex[:12]}"
    directory = tmp_path / "rev" / name
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text("")
    (directory / "slots.py").write_text(textwrap.dedent(SLOTS))
    (directory / "broken.py").write_text(textwrap.dedent(BROKEN))
    return tmp_path / "rev", name


def runtime(root: Path, name: str, timeout_s: float = 5.0, **entries: str) -> SlotRuntime:
    return SlotRuntime(root=root, package=name, slots=SlotsSpec(**entries), timeout_s=timeout_s)


@pytest.fixture
async def ctx(store: RuntimeStore) -> AuthorContext:
    lease = SessionLease("sess-1", "turn-1", 1, "owner", time.time() + 60, 60.0)
    turn = AuthorTurn(
        StateRuntime(store),
        turn_id="turn-1",
        session_id="sess-1",
        core_id="notes",
        core_revision="a" * 40,
        request_id="req-1",
        lease=lease,
        sink=lambda kind, data: None,
    )
    return turn.context


def module(name: str) -> Any:
    return sys.modules[f"{name}.slots"]


async def test_slots_run_async_and_sync_and_import_once(tmp_path: Path, ctx: AuthorContext) -> None:
    root, name = package(tmp_path)
    slots = runtime(root, name, bootstrap="slots:greet", input="slots:sync_input")
    assert await slots.bootstrap(ctx) == "be brief"
    assert await slots.input(ctx, "hello") == "HELLO"
    assert await slots.input(ctx, "again") == "AGAIN"
    loaded = module(name)
    assert loaded.IMPORTS == [1]  # imported once, however often it runs
    # A sync slot runs in a worker thread, never on the event loop's thread.
    assert threading.get_ident() not in loaded.THREADS
    # Undeclared slots pass the text through untouched.
    assert await slots.output(ctx, "final") == "final"
    assert await runtime(root, name).bootstrap(ctx) is None


async def test_an_async_slot_past_its_deadline_fails(tmp_path: Path, ctx: AuthorContext) -> None:
    root, name = package(tmp_path)
    slots = runtime(root, name, timeout_s=0.2, input="slots:hang")
    started = time.monotonic()
    with pytest.raises(SlotFailed) as failed:
        await slots.input(ctx, "x")
    assert time.monotonic() - started < 5
    assert failed.value.message == "slot 'input' did not finish within 0.2s"


async def test_a_sync_slot_past_its_deadline_is_abandoned(
    tmp_path: Path, ctx: AuthorContext
) -> None:
    root, name = package(tmp_path)
    slots = runtime(root, name, timeout_s=0.2, output="slots:block")
    started = time.monotonic()
    try:
        with pytest.raises(SlotFailed) as failed:
            await slots.output(ctx, "x")
        assert time.monotonic() - started < 5
    finally:
        module(name).RELEASE.set()  # the abandoned thread may finish now
    assert failed.value.message == "slot 'output' did not finish within 0.2s"


@pytest.mark.parametrize(
    ("slot", "entry", "expected"),
    [
        ("input", "slots:explode", "slot 'input' failed (ValueError at agent/"),
        ("input", "slots:number", "slot 'input' must return non-empty text of at most 100000"),
        ("input", "slots:empty", "slot 'input' must return non-empty text of at most 100000"),
        ("output", "slots:none_out", "slot 'output' must return text of at most 1000000"),
        ("bootstrap", "slots:bad_bootstrap", "slot 'bootstrap' must return text of at most"),
        ("input", "slots:own_cancel", "slot 'input' failed (CancelledError at agent/"),
        ("input", "missing:fn", "slot 'input' cannot be loaded (ModuleNotFoundError)"),
        ("input", "slots:nowhere", "slot 'input' cannot be loaded (AttributeError)"),
        ("input", "broken:fn", "slot 'input' cannot be loaded (RuntimeError)"),
        ("input", "slots:NOT_A_FUNCTION", "slot 'input' cannot be loaded (not a function)"),
    ],
)
async def test_failures_name_the_slot_and_the_type_only(
    tmp_path: Path, ctx: AuthorContext, slot: str, entry: str, expected: str
) -> None:
    root, name = package(tmp_path)
    slots = runtime(root, name, **{slot: entry})
    arguments = (ctx,) if slot == "bootstrap" else (ctx, "text")
    with pytest.raises(SlotFailed) as failed:
        await getattr(slots, slot)(*arguments)
    assert failed.value.message.startswith(expected)
    assert failed.value.slot == slot
    assert SECRET not in failed.value.message
    # Not chained: the original exception (and its message) does not travel with it.
    assert failed.value.__cause__ is None
    assert failed.value.__context__ is None or failed.value.__suppress_context__


async def test_a_real_cancellation_is_not_a_slot_failure(
    tmp_path: Path, ctx: AuthorContext
) -> None:
    root, name = package(tmp_path)
    slots = runtime(root, name, input="slots:hang")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await slots.input(ctx, "x")
        raise AssertionError("not reached")
    assert scope.cancelled_caught
