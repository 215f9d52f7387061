"""Same-session exclusion across real Host processes sharing one SQLite file.

Each worker (``lease_worker.py``) is a separate Python process with its own
Host. Its turns call a tool that holds the session and logs the interval it
held it; the intervals and the transcript on disk are then checked.
"""

from __future__ import annotations

import itertools
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import child_process

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("lease_worker.py")
TURNS = 5
HOLD_S = 0.08
STARTUP_S = 60.0


def command(options: dict[str, Any]) -> list[str]:
    return [sys.executable, str(WORKER), json.dumps(options)]


async def wait_for(path: Path, timeout_s: float = STARTUP_S) -> None:
    with anyio.fail_after(timeout_s):
        # Another process writes the file: there is no event to wait on across processes.
        while not await anyio.Path(path).exists():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def run_to_end(options: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(240):
        return await anyio.run_process(command(options), check=False)


def query(database: Path, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def read(database: Path, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    return await anyio.to_thread.run_sync(query, database, sql, params)


async def intervals(log: Path) -> list[dict[str, Any]]:
    text = await anyio.Path(log).read_text()
    return [json.loads(line) for line in text.splitlines()]


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


async def check_transcripts(database: Path) -> dict[str, list[str]]:
    """Each session's turn order; asserts every turn's messages are contiguous and whole."""
    rows = await read(
        database, "SELECT session_id, seq, turn_id, role FROM messages ORDER BY session_id, seq"
    )
    by_session: dict[str, list[sqlite3.Row]] = defaultdict(list)
    for row in rows:
        by_session[row["session_id"]].append(row)
    order: dict[str, list[str]] = {}
    for session_id, messages in by_session.items():
        assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1))
        turns: list[str] = []
        roles: dict[str, list[str]] = defaultdict(list)
        for message in messages:
            if not turns or turns[-1] != message["turn_id"]:
                assert message["turn_id"] not in turns, f"turn interleaved in {session_id}"
                turns.append(message["turn_id"])
            roles[message["turn_id"]].append(message["role"])
        assert all(r == ["user", "assistant", "tool", "assistant"] for r in roles.values())
        order[session_id] = turns
    return order


async def terminal_records(database: Path) -> dict[str, list[str]]:
    rows = await read(
        database,
        "SELECT turn_id, kind FROM turn_events WHERE kind LIKE 'turn.%' "
        "AND kind != 'turn.started' ORDER BY turn_id, seq",
    )
    found: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        found[row["turn_id"]].append(row["kind"])
    return found


@pytest.mark.parametrize(
    ("processes", "sessions"),
    [(2, 1), (4, 1), (2, 2), (4, 2)],
    ids=[
        "2 processes, 1 session",
        "4 processes, 1 session",
        "2 sessions",
        "4 processes, 2 sessions",
    ],
)
async def test_turns_of_one_session_never_overlap_across_processes(
    tmp_path: Path, processes: int, sessions: int
) -> None:
    log, go = tmp_path / "intervals.jsonl", tmp_path / "go"
    workers = [
        {
            "root": str(tmp_path),
            "log": str(log),
            "conversation": f"conversation-{index % sessions}",
            "turns": TURNS,
            "hold_s": HOLD_S,
            "ttl_s": 30.0,
            "ready": str(tmp_path / f"ready-{index}"),
            "go": str(go),
            "results": str(tmp_path / f"results-{index}.json"),
        }
        for index in range(processes)
    ]
    # The first Host creates the schema alone; the others then open a migrated file.
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def run(options: dict[str, Any]) -> None:
        finished.append(await run_to_end(options))

    async with anyio.create_task_group() as group:
        for index, options in enumerate(workers):
            group.start_soon(run, options)
            if index == 0:
                await wait_for(Path(options["ready"]))
        for options in workers:
            await wait_for(Path(options["ready"]))
        await anyio.Path(go).write_text("go")
    for done in finished:
        assert done.returncode == 0, done.stderr.decode()[-3000:]

    outcomes = [
        turn
        for options in workers
        for turn in json.loads(await anyio.Path(options["results"]).read_text())
    ]
    assert [turn["outcome"] for turn in outcomes] == ["completed"] * processes * TURNS
    held = await intervals(log)
    assert len(held) == processes * TURNS
    assert len({record["session"] for record in held}) == sessions
    assert len({record["pid"] for record in held}) == processes

    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in held:
        by_session[record["session"]].append(record)
    for records in by_session.values():
        records.sort(key=lambda record: record["start"])
        for before, after in itertools.pairwise(records):
            assert after["start"] >= before["end"], (before, after)
    if sessions > 1:
        first, second = by_session.values()
        assert any(overlaps(a, b) for a in first for b in second), "sessions never overlapped"
        if processes > sessions:
            # Several processes really took turns in each session.
            assert all(len({r["pid"] for r in records}) > 1 for records in by_session.values())

    database = tmp_path / "hostkit.db"
    order = await check_transcripts(database)
    for session_id, records in by_session.items():
        assert order[session_id] == [record["turn"] for record in records]
    assert all(kinds == ["turn.completed"] for kinds in (await terminal_records(database)).values())
    assert len(await terminal_records(database)) == processes * TURNS
    held_leases = await read(
        database, "SELECT session_id FROM session_leases WHERE owner IS NOT NULL"
    )
    assert held_leases == []


async def kill_holder_and_follow(
    tmp_path: Path, *, holder: dict[str, Any]
) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """Start a holder that blocks in its tool, a follower asking for the same session, kill -9
    the holder: (kill time, the follower's turn outcome, the follower's interval)."""
    marker, asking = tmp_path / "holder-inside", tmp_path / "follower-asking"
    log = tmp_path / "intervals.jsonl"
    base = {"root": str(tmp_path), "log": str(log), "conversation": "victim"}
    follower = {
        **base,
        "hold_s": HOLD_S,
        "ttl_s": 30.0,
        "asking": str(asking),
        "results": str(tmp_path / "follower.json"),
    }
    holder = {**base, "hold_s": None, "marker": str(marker), **holder}
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def follow() -> None:
        finished.append(await run_to_end(follower))

    async with child_process(
        command(holder), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as process:
        await wait_for(marker)
        assert process.returncode is None
        async with anyio.create_task_group() as group:
            group.start_soon(follow)
            # The follower's Host is open (its start-up recovery saw a live holder) and its
            # turn is asking for the busy session.
            await wait_for(asking)
            assert not await anyio.Path(log).exists(), "the follower ran inside a held session"
            killed_at = time.time()
            process.send_signal(signal.SIGKILL)
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    assert finished[0].returncode == 0, finished[0].stderr.decode()[-3000:]
    (outcome,) = json.loads(await anyio.Path(follower["results"]).read_text())
    (interval,) = await intervals(log)
    assert outcome["asked"] < killed_at < interval["start"]
    return killed_at, outcome, interval


async def lost_turn(database: Path) -> sqlite3.Row:
    (row,) = await read(database, "SELECT turn_id, status FROM turns WHERE status != 'completed'")
    return row


async def test_sigkill_of_a_holder_admits_a_waiting_process_at_once(tmp_path: Path) -> None:
    # The holder's lease would last ten minutes: only its provable death frees the session.
    killed_at, outcome, interval = await kill_holder_and_follow(tmp_path, holder={"ttl_s": 600.0})
    assert outcome["outcome"] == "completed"
    assert interval["start"] - killed_at < 15.0
    database = tmp_path / "hostkit.db"
    lost = await lost_turn(database)
    # It died inside its tool call: the call, and so the turn, may have acted.
    assert lost["status"] == "indeterminate"
    (event,) = await read(
        database,
        "SELECT kind, detail FROM turn_events WHERE turn_id = ? AND kind LIKE 'turn.%' "
        "AND kind != 'turn.started'",
        (lost["turn_id"],),
    )
    assert event["kind"] == "turn.indeterminate"
    assert json.loads(event["detail"])["reason"] == "owner_dead"
    order = await read(database, "SELECT turn_id, role FROM messages ORDER BY seq")
    # The killed turn's input and tool call, the answer recovery gave that call (its
    # outcome is unknown), then the follower's whole turn; nothing replayed.
    assert [(r["turn_id"], r["role"]) for r in order] == [
        (lost["turn_id"], "user"),
        (lost["turn_id"], "assistant"),
        (lost["turn_id"], "tool"),
        *[(outcome["turn"], role) for role in ("user", "assistant", "tool", "assistant")],
    ]


async def test_sigkill_of_a_holder_on_another_machine_frees_its_session_at_expiry(
    tmp_path: Path,
) -> None:
    ttl_s = 2.0
    database = tmp_path / "hostkit.db"
    killed_at, outcome, interval = await kill_holder_and_follow(
        tmp_path, holder={"ttl_s": ttl_s, "hostname": "elsewhere-host"}
    )
    assert outcome["outcome"] == "completed"
    lost = await lost_turn(database)
    # It died inside its tool call: the call, and so the turn, may have acted.
    assert lost["status"] == "indeterminate"
    (event,) = await read(
        database,
        "SELECT detail FROM turn_events WHERE turn_id = ? AND kind = 'turn.indeterminate'",
        (lost["turn_id"],),
    )
    assert json.loads(event["detail"])["reason"] == "lease_expired"
    # The holder renewed every ttl/3 until it died, so its lease outlived it by at least
    # two thirds of the ttl; the follower's first look after that noticed the lapse, and
    # the session was its own a ttl later.
    waited = interval["start"] - killed_at
    assert ttl_s * 2 / 3 + ttl_s - 0.2 <= waited <= 2 * ttl_s + 10.0
