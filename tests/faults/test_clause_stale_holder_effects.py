"""Clause: a turn whose process paused past its session lease starts no effect after another
Host took the session over.

Real processes on one SQLite file. Process A's turn stops itself (SIGSTOP) as its tool
call is about to run; its lease expires; process B takes the session over (which ends
A's turn ``lost``) and completes a turn of its own; then A is continued. A's effect must
not run: it would be an effect of a turn recorded as having done nothing, happening
after the turn that replaced it. The same holds when A's stop is a suspend, which
anyio's clock does not count (on SQLite and on PostgreSQL).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("stale_holder_worker.py")
TTL_S = 2.0


async def start(root: Path, **options: object) -> anyio.abc.Process:
    args = {"root": str(root), "ttl_s": TTL_S, "stamps": str(root / "stamps.txt"), **options}
    return await anyio.open_process(
        [sys.executable, str(WORKER), json.dumps(args)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        stdout=subprocess.DEVNULL,
    )


async def appears(path: Path, timeout_s: float = 60.0) -> None:
    """Until another process has written ``path`` (bounded)."""
    with anyio.fail_after(timeout_s):
        while not await anyio.Path(path).exists():  # noqa: ASYNC110 (written by another process)
            await anyio.sleep(0.05)


async def test_an_effect_of_a_turn_that_lost_its_lease_while_paused_never_starts(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "a.paused"
    paused = await start(
        tmp_path,
        request="req-A",
        pause=True,
        marker=str(marker),
        text="by-the-paused-turn",
        result=str(tmp_path / "a.json"),
    )
    try:
        await appears(marker)
        await anyio.sleep(TTL_S + 1.0)  # its lease lapses while it is stopped
        other = await start(
            tmp_path,
            request="req-B",
            text="by-the-next-turn",
            result=str(tmp_path / "b.json"),
        )
        with anyio.fail_after(60):
            assert await other.wait() == 0
        paused.send_signal(signal.SIGCONT)
        with anyio.fail_after(60):
            await paused.wait()
    finally:
        if paused.returncode is None:
            paused.kill()
        await paused.aclose()
    with closing(sqlite3.connect(tmp_path / "hostkit.db")) as db:
        turns = dict(db.execute("SELECT request_id, status FROM turns").fetchall())
    # Recovery cannot tell a call that never started from one that did: "may have run".
    assert turns == {"req-A": "indeterminate", "req-B": "completed"}
    stamps = (tmp_path / "stamps.txt").read_text().splitlines()
    assert stamps == ["by-the-next-turn"]  # the paused turn's effect never started
    assert json.loads((tmp_path / "b.json").read_text()) == {
        "outcome": "completed",
        "effects": ["succeeded"],
    }


@pytest.mark.parametrize("adapter", ["sqlite", "postgres"])
async def test_an_effect_of_a_turn_whose_machine_slept_past_its_lease_never_starts(
    tmp_path: Path, adapter: str, request: pytest.FixtureRequest
) -> None:
    """A suspend (a laptop that slept, a paused VM) stops ``CLOCK_MONOTONIC``, anyio's clock:
    by it no time passed, and A's last renewal still seems to hold the lease. B takes the
    session over meanwhile and completes a turn; A resumes. Before its effect starts, A's
    turn must look at clocks that counted the suspend (the store's, ``CLOCK_BOOTTIME``):
    the renewal it then makes finds the lease gone, and the effect never runs."""
    store: dict[str, str] = {}
    if adapter == "postgres":
        cluster = request.getfixturevalue("postgres_cluster")
        store["url"] = await cluster.create_database()
    marker = tmp_path / "a.paused"
    paused = await start(
        tmp_path,
        request="req-A",
        pause=True,
        suspend=True,
        marker=str(marker),
        text="by-the-paused-turn",
        result=str(tmp_path / "a.json"),
        **store,
    )
    try:
        await appears(marker)
        await anyio.sleep(TTL_S + 1.0)  # its lease lapses while it is suspended
        other = await start(
            tmp_path,
            request="req-B",
            text="by-the-next-turn",
            result=str(tmp_path / "b.json"),
            **store,
        )
        with anyio.fail_after(60):
            assert await other.wait() == 0
        paused.send_signal(signal.SIGCONT)
        with anyio.fail_after(60):
            await paused.wait()
    finally:
        if paused.returncode is None:
            paused.kill()
        await paused.aclose()
    assert (tmp_path / "stamps.txt").read_text().splitlines() == ["by-the-next-turn"]
    assert json.loads((tmp_path / "a.json").read_text()) == {
        "outcome": "indeterminate",
        "effects": [],
    }
    assert json.loads((tmp_path / "b.json").read_text()) == {
        "outcome": "completed",
        "effects": ["succeeded"],
    }


async def test_a_turn_that_lost_its_lease_while_paused_writes_no_context_decision_after(
    tmp_path: Path,
) -> None:
    """A's turn stops in its model call: the step's context decision is made and held until
    the step's write. B takes the session over (A's turn ends ``lost``) and completes a
    turn; then A is continued. Every write of A's lost turn is refused, the decision it
    still holds included: no row of that turn appears after the turn that replaced it."""
    marker = tmp_path / "a.paused"
    paused = await start(
        tmp_path,
        request="req-A",
        pause="model",
        marker=str(marker),
        text="by-the-paused-turn",
        result=str(tmp_path / "a.json"),
    )
    try:
        await appears(marker)
        await anyio.sleep(TTL_S + 1.0)  # its lease lapses while it is stopped
        other = await start(
            tmp_path, request="req-B", text="by-the-next-turn", result=str(tmp_path / "b.json")
        )
        with anyio.fail_after(60):
            assert await other.wait() == 0
        paused.send_signal(signal.SIGCONT)
        with anyio.fail_after(60):
            await paused.wait()
    finally:
        if paused.returncode is None:
            paused.kill()
        await paused.aclose()
    with closing(sqlite3.connect(tmp_path / "hostkit.db")) as db:
        turns = dict(db.execute("SELECT request_id, status FROM turns").fetchall())
        decided = db.execute(
            "SELECT t.request_id FROM context_decisions d JOIN turns t ON t.turn_id = d.turn_id"
        ).fetchall()
    assert turns == {"req-A": "lost", "req-B": "completed"}
    assert {request for (request,) in decided} == {"req-B"}
    assert (tmp_path / "stamps.txt").read_text().splitlines() == ["by-the-next-turn"]
