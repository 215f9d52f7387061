"""A real kernel interrupted as JupyterLab's stop button does: the turn the interrupted cell
started is cancelled through its token, whether the cell was awaiting it (ipykernel cancels the
cell's coroutine), blocked in synchronous code (``KeyboardInterrupt``) or between two of its
statements (IPython compiles each just before running it, and records an interrupt there as
``error_before_exec``); a turn an earlier cell started keeps running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernel.frontend import (
    Frontend,
    KernelChoice,
    running_kernel,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SETUP = """\
import asyncio
from pathlib import Path
import hostkit.notebook as hn
from hostkit.host import parse_config
from hostkit.testing import Reply, ScriptedModel, capabilities

async def hold(request):
    await asyncio.Event().wait()  # a model that never answers
    return Reply("never")

config = parse_config(
    {
        "host": {"database": "hostkit.db", "workspace": "."},
        "providers": {"test": {"kind": "scripted"}},
        "agents": {"assistant": {"provider": "test", "memory": False}},
    },
    base_dir=Path("."),
)
model = ScriptedModel([hold], repeat_last=True)
nb = await hn.start(config, capabilities=capabilities(model))
earlier = nb.chat("started by an earlier cell", session="new")"""
AWAITING = """\
view = nb.chat("stop me", session="new")
await view.admitted.wait()
print("running", flush=True)
await view"""
BLOCKED = """\
import time
blocked = nb.chat("stop me too", session="new")
print("sleeping", flush=True)
time.sleep(60)"""
BETWEEN = """\
import ast, time
Compiler = type(get_ipython().compile)
plain = Compiler.__call__
def slow(self, source, *args, **kwargs):  # the interrupt lands while a statement compiles
    if "slow_to_compile" in ast.dump(source):
        time.sleep(60)
    return plain(self, source, *args, **kwargs)
Compiler.__call__ = slow
between = nb.chat("stop me between statements", session="new")
print("compiling", flush=True)
slow_to_compile = True"""
OUTCOME = """\
try:
    r = await asyncio.wait_for({name}.wait(), 20)
except TimeoutError:  # what the panel knows, for the failure's message
    v = {name}
    raise AssertionError(f"not ended: {{v.turn_id=}} {{v.stopping=}} {{v.stop_error=}} {{v.cell=}}")
print(r.outcome, earlier.done)"""
CLEANUP = "await earlier.cancel()\nawait nb.aclose()"
CELL_TIMEOUT_S = 30.0


async def interrupt_when_printed(frontend: Frontend, cell: str, line: str) -> dict[str, object]:
    await frontend.until(
        lambda: line in frontend.stdout(cell) or None, timeout_s=CELL_TIMEOUT_S, what=line
    )
    await frontend.interrupt()
    # The interrupted cell ends in error (``finished`` would raise on it).
    seen = await frontend.until(
        lambda: frontend.reply(cell) if frontend.idle(cell) else None,
        timeout_s=CELL_TIMEOUT_S,
        what="the interrupted cell's reply",
    )
    return seen.content


async def outcome(frontend: Frontend, name: str) -> str:
    cell = frontend.execute(OUTCOME.format(name=name))
    await frontend.finished(cell, timeout_s=CELL_TIMEOUT_S)
    return frontend.stdout(cell).strip()


CELLS = {
    "awaiting": (AWAITING, "running", "view"),
    "blocked": (BLOCKED, "sleeping", "blocked"),
    "between": (BETWEEN, "compiling", "between"),
}


@pytest.mark.parametrize("cell", sorted(CELLS))
async def test_the_kernel_interrupt_cancels_the_turn_its_cell_started(
    kernel: KernelChoice, tmp_path: Path, cell: str
) -> None:
    async with running_kernel(kernel, cwd=tmp_path) as frontend:
        setup = frontend.execute(SETUP)
        reply = await frontend.finished(setup, timeout_s=CELL_TIMEOUT_S)
        assert reply["status"] == "ok", reply
        code, line, name = CELLS[cell]
        interrupted = await interrupt_when_printed(frontend, frontend.execute(code), line)
        ended = await outcome(frontend, name)
        cleanup = frontend.execute(CLEANUP)
        await frontend.finished(cleanup, timeout_s=CELL_TIMEOUT_S)

    assert interrupted["status"] == "error"
    assert interrupted["ename"] in ("CancelledError", "KeyboardInterrupt")
    assert ended == "cancelled False"  # cancelled; the earlier cell's turn still ran
