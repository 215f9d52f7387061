"""Clause (issue 18): three Hosts on one PostgreSQL database lose nothing and run nothing twice.

Three real Host processes (``_multi_host_proc.py``), each "on its own machine"
(its own host name, so a dead one's leases end by expiry only, never by a
liveness check of its pid), open one fresh database of the throwaway cluster
together and serve its inbox with the worker ``hostkit serve`` runs. Every
platform event is delivered to two or three of them; one is SIGKILLed while a
turn of it is inside the model; the platform then delivers every event again
to the survivors, which take the dead Host's claims and sessions over once
their leases expire. Checked afterwards, from the database, the model calls'
log and the survivors' own turn events: every event is one inbound, completed
once, by one turn with one terminal record; no model call was made twice;
only the dead Host's turns were lost; the turns of one session never
overlapped in time.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio.abc import Process

from tests.postgres import PostgresCluster

if TYPE_CHECKING:
    import psycopg

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROC = Path(__file__).with_name("_multi_host_proc.py")
EVENTS = 24
# More conversations than the two survivors have worker slots: a conversation's messages are
# claimed one at a time, so fewer would let one survivor take every claim.
CONVERSATIONS = 8
HOSTS = ("host-a", "host-b", "host-c")
VICTIM = "host-a"
# Short leases: the survivors wait at most this long for the dead Host's claims and sessions.
# Long enough that a live Host's renewal (every third of them) is never late enough for a
# lease to lapse while three Hosts and PostgreSQL share a loaded two-core machine.
SESSION_TTL_S = 4.5
INBOX_LEASE_S = 4.5
# Each model call takes this long: long enough to be killed inside, short enough for 24 turns.
HOLD_S = 0.15
# Bounds for hangs, not expected durations (three Python processes importing hostkit at
# once on a loaded two-core machine take several seconds).
START_TIMEOUT_S = 60.0
WORK_TIMEOUT_S = 30.0
TERMINAL_KINDS = tuple(
    f"turn.{outcome}"
    for outcome in ("completed", "needs_user", "failed", "cancelled", "lost", "indeterminate")
)
Row = dict[str, Any]


def event(n: int) -> dict[str, str]:
    conversation = n % CONVERSATIONS
    return {
        "key": f"evt-{n}",
        "conversation": f"conv-{conversation}",
        "principal": f"user-{conversation}",
        "text": f"message {n} in conv-{conversation}",
    }


def deliveries(index: int) -> list[dict[str, str]]:
    """Host ``index``'s share: every event goes to two Hosts, every fourth to all three,
    each Host in its own order (so accepts of one event race across Hosts)."""
    mine = [event(n) for n in range(EVENTS) if n % len(HOSTS) != index or n % 4 == 0]
    shift = index * len(mine) // len(HOSTS)
    return mine[shift:] + mine[:shift]


@dataclass
class Child:
    name: str
    options: dict[str, Any]
    process: Process
    stderr: Path

    async def exit_code(self, timeout_s: float) -> int:
        with anyio.fail_after(timeout_s):
            return await self.process.wait()

    async def errors(self) -> str:
        return (await anyio.Path(self.stderr).read_text(errors="replace"))[-3000:]

    async def output(self, key: str) -> Any:
        return json.loads(await anyio.Path(self.options[key]).read_text())


@dataclass
class Outcome:
    """What one run left: database rows, the model calls' log, the survivors' reports."""

    inbox: list[Row]
    turns: list[Row]
    terminal: list[Row]
    messages: list[Row]
    held_leases: list[Row]
    calls: list[Row]
    running_at_kill: set[str]
    dead_at: float
    receipts: list[list[str]]
    receipts_again: list[list[str]]
    # turn id -> the lifecycle events a survivor published for it; the survivor's name.
    survivor_turns: dict[str, tuple[str, list[str]]]


@asynccontextmanager
async def host_processes(
    tmp_path: Path, url: str, *, go: Path, again: Path, stop: Path, log: Path, marker: Path
) -> AsyncIterator[dict[str, Child]]:
    """The three Host processes (killed at the end of the block if still alive)."""
    children: dict[str, Child] = {}
    async with AsyncExitStack() as stack:
        for index, name in enumerate(HOSTS):
            root = tmp_path / name
            await anyio.Path(root).mkdir()
            options: dict[str, Any] = {
                "root": str(root),
                "url": url,
                "hostname": name,
                "ttl_s": SESSION_TTL_S,
                "lease_s": INBOX_LEASE_S,
                "hold_s": HOLD_S,
                "log": str(log),
                "events": deliveries(index),
                "ready": str(root / "ready"),
                "go": str(go),
                "receipts": str(root / "receipts.json"),
                "stop": str(stop),
                "turns": str(root / "turns.json"),
            }
            if name == VICTIM:
                options.update(block_from=2, marker=str(marker))
            else:
                options.update(again=str(again), receipts_again=str(root / "receipts-again.json"))
            stderr = root / "stderr.txt"
            sink = await anyio.to_thread.run_sync(stderr.open, "wb")
            stack.callback(sink.close)
            argv = [sys.executable, str(PROC), json.dumps(options)]
            process = await anyio.open_process(argv, stdout=subprocess.DEVNULL, stderr=sink)
            stack.push_async_callback(_end, process)
            children[name] = Child(name, options, process, stderr)
        yield children


async def _end(process: Process) -> None:
    if process.returncode is None:
        process.kill()
    with anyio.move_on_after(10, shield=True):
        await process.wait()
    await process.aclose()


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    what: str,
    timeout_s: float,
    children: dict[str, Child],
) -> None:
    """Poll ``check()`` until true; fail naming ``what`` (or a Host that exited) otherwise."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        for child in children.values():
            if child.process.returncode is not None and child.name != VICTIM:
                errors = await child.errors()
                raise AssertionError(f"{child.name} exited waiting for {what}: {errors}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.05)


async def connect(url: str) -> psycopg.AsyncConnection[Row]:
    import psycopg
    from psycopg.rows import dict_row

    return await psycopg.AsyncConnection.connect(
        url, autocommit=True, connect_timeout=10, row_factory=dict_row
    )


async def select(conn: psycopg.AsyncConnection[Row], sql: str, *params: Any) -> list[Row]:
    with anyio.fail_after(30):
        cursor = await conn.execute(sql, params)
        return await cursor.fetchall()


async def files_exist(*paths: str) -> bool:
    return all([await anyio.Path(path).exists() for path in paths])


async def run_three_hosts(tmp_path: Path, url: str) -> Outcome:
    """Deliver, kill the victim mid-turn, redeliver, wait for every inbound to end."""
    go, again, stop = tmp_path / "go", tmp_path / "again", tmp_path / "stop"
    log, marker = tmp_path / "model-calls.jsonl", tmp_path / "victim-in-turn"
    async with AsyncExitStack() as stack:
        db = await connect(url)
        stack.push_async_callback(db.close)
        children = await stack.enter_async_context(
            host_processes(tmp_path, url, go=go, again=again, stop=stop, log=log, marker=marker)
        )
        victim = children[VICTIM]
        survivors = [child for name, child in children.items() if name != VICTIM]

        async def all_open() -> bool:
            return await files_exist(*(c.options["ready"] for c in children.values()))

        await wait_until(
            all_open, what="the Hosts to open", timeout_s=START_TIMEOUT_S, children=children
        )
        await anyio.Path(go).write_text("go")

        async def victim_in_turn() -> bool:
            return await files_exist(str(marker), victim.options["receipts"])

        await wait_until(
            victim_in_turn,
            what="the victim inside a turn",
            timeout_s=WORK_TIMEOUT_S,
            children=children,
        )
        victim.process.send_signal(signal.SIGKILL)
        assert await victim.exit_code(10) == -signal.SIGKILL
        dead_at = time.time()
        # Its turns still running (their leases outlive it by up to SESSION_TTL_S).
        running = await select(
            db,
            "SELECT turn_id FROM turns WHERE status = 'running' AND lease_owner LIKE %s",
            f"{VICTIM}|%",
        )
        # The platform retries every event, now that one Host stopped answering.
        await anyio.Path(again).write_text("go")

        async def every_inbound_ended() -> bool:
            (row,) = await select(
                db, "SELECT count(*) AS n FROM inbox WHERE state IN ('completed', 'dead_lettered')"
            )
            return bool(row["n"] >= EVENTS)

        await wait_until(
            every_inbound_ended,
            what="every inbound to end",
            timeout_s=WORK_TIMEOUT_S,
            children=children,
        )

        async def redelivered() -> bool:
            return await files_exist(*(c.options["receipts_again"] for c in survivors))

        await wait_until(
            redelivered, what="the redeliveries", timeout_s=WORK_TIMEOUT_S, children=children
        )
        await anyio.Path(stop).write_text("go")
        for child in survivors:
            assert await child.exit_code(WORK_TIMEOUT_S) == 0, await child.errors()

        survivor_turns: dict[str, tuple[str, list[str]]] = {}
        for child in survivors:
            for turn_id, kinds in (await child.output("turns")).items():
                survivor_turns[turn_id] = (child.name, kinds)
        text = await anyio.Path(log).read_text()
        return Outcome(
            inbox=await select(
                db,
                "SELECT inbound_id, platform_event_key, state, result_kind, turn_id, attempt "
                "FROM inbox ORDER BY id",
            ),
            turns=await select(
                db,
                "SELECT turn_id, request_id, session_id, status, started_at, ended_at "
                "FROM turns ORDER BY id",
            ),
            terminal=await select(
                db,
                "SELECT turn_id, kind, detail FROM turn_events WHERE kind = ANY(%s) ORDER BY id",
                list(TERMINAL_KINDS),
            ),
            messages=await select(db, "SELECT turn_id, role FROM messages ORDER BY id"),
            held_leases=await select(
                db, "SELECT session_id FROM session_leases WHERE owner IS NOT NULL"
            ),
            calls=[json.loads(line) for line in text.splitlines()],
            running_at_kill={row["turn_id"] for row in running},
            dead_at=dead_at,
            receipts=[r for c in children.values() for r in await c.output("receipts")],
            receipts_again=[r for c in survivors for r in await c.output("receipts_again")],
            survivor_turns=survivor_turns,
        )


@pytest.fixture
def cluster(postgres_cluster: PostgresCluster) -> Iterator[PostgresCluster]:
    """The throwaway cluster; the databases this test made are dropped after it."""
    try:
        yield postgres_cluster
    finally:
        postgres_cluster.drop_created()


# -- the checks ----------------------------------------------------------------------------

KEYS = Counter(event(n)["key"] for n in range(EVENTS))
TEXT_OF = {event(n)["key"]: event(n)["text"] for n in range(EVENTS)}


def check_each_event_is_one_completed_inbound(outcome: Outcome) -> dict[str, Row]:
    """Nothing lost, nothing accepted twice; the inbox row of each event key."""
    assert Counter(row["platform_event_key"] for row in outcome.inbox) == KEYS
    ended = {(row["state"], row["result_kind"]) for row in outcome.inbox}
    assert ended == {("completed", "turn")}, "every inbound completed by a turn, none dead"
    by_key = {row["platform_event_key"]: row for row in outcome.inbox}
    # Duplicate deliveries across Hosts: one accepted receipt per event, every other one
    # a duplicate naming the same inbound, before the kill and after it.
    accepted = Counter(key for key, _, disposition in outcome.receipts if disposition == "accepted")
    assert accepted == KEYS
    assert len(outcome.receipts) > EVENTS, "events were delivered to several Hosts"
    assert {disposition for _, _, disposition in outcome.receipts_again} == {"duplicate"}
    assert {key for key, _, _ in outcome.receipts_again} == set(KEYS)
    for key, inbound_id, _ in outcome.receipts + outcome.receipts_again:
        assert inbound_id == by_key[key]["inbound_id"], key
    return by_key


def check_one_turn_and_one_terminal_record_per_inbound(
    outcome: Outcome, by_key: dict[str, Row]
) -> dict[str, Row]:
    """The turn row of each event key."""
    by_request = {row["request_id"]: row for row in outcome.turns}
    assert len(outcome.turns) == len(by_request) == EVENTS, "one turn per request id"
    turn_of = {key: by_request[f"inbound:{row['inbound_id']}"] for key, row in by_key.items()}
    for key, row in by_key.items():
        assert row["turn_id"] == turn_of[key]["turn_id"], "the inbound ended with its turn"
    ends: dict[str, list[str]] = defaultdict(list)
    for record in outcome.terminal:
        ends[record["turn_id"]].append(record["kind"])
    for turn in outcome.turns:
        assert ends[turn["turn_id"]] == [f"turn.{turn['status']}"], turn
    assert sum(len(kinds) for kinds in ends.values()) == EVENTS
    return turn_of


def lost_keys(turn_of: dict[str, Row]) -> set[str]:
    return {key for key, turn in turn_of.items() if turn["status"] != "completed"}


def check_only_the_dead_host_lost_turns(
    outcome: Outcome, by_key: dict[str, Row], turn_of: dict[str, Row]
) -> None:
    lost = lost_keys(turn_of)
    assert {turn_of[key]["status"] for key in lost} == {"lost"}
    # Each turn a survivor started, it completed itself (a turn of the victim that a
    # survivor recovered is published there as lost, never as started).
    started = {
        turn_id: (host, kinds)
        for turn_id, (host, kinds) in outcome.survivor_turns.items()
        if "turn.started" in kinds
    }
    for turn_id, (host, kinds) in started.items():
        assert kinds == ["turn.started", "turn.completed"], (
            f"{host}, alive throughout, had its turn {turn_id} ended {kinds[1:]}: its session "
            "lease lapsed while the turn ran or recorded its end, and another Host took over"
        )
    assert {host for host, _ in started.values()} == {"host-b", "host-c"}
    assert not {turn_of[key]["turn_id"] for key in lost} & set(started)
    # The turns the victim left running when it was killed are among the lost ones.
    assert outcome.running_at_kill <= {turn_of[key]["turn_id"] for key in lost}
    # They ended by lease expiry (the victim was "another machine"), and its claims were
    # taken over: a later attempt completed each of those inbounds.
    terminal = {record["turn_id"]: record for record in outcome.terminal}
    for key in lost:
        record = terminal[turn_of[key]["turn_id"]]
        assert json.loads(record["detail"])["reason"] == "lease_expired"
        assert by_key[key]["attempt"] >= 2, by_key[key]


def check_no_model_call_was_made_twice(outcome: Outcome, turn_of: dict[str, Row]) -> None:
    starts = Counter(call["payload"] for call in outcome.calls if call["edge"] == "start")
    assert max(starts.values()) == 1, "a model call was made twice"
    answered = {call["payload"] for call in outcome.calls if call["edge"] == "end"}
    lost = lost_keys(turn_of)
    for key in set(turn_of) - lost:
        assert starts[TEXT_OF[key]] == 1, key
        assert TEXT_OF[key] in answered, key
    # A call cut off by the kill was the victim's, and its turn is lost (never run again).
    cut = {call["payload"] for call in outcome.calls} - answered
    assert cut, "the victim was killed inside a model call"
    assert cut <= {TEXT_OF[key] for key in lost}
    lost_texts = {TEXT_OF[key] for key in lost}
    assert {call["host"] for call in outcome.calls if call["payload"] in lost_texts} == {VICTIM}


def check_each_input_is_in_the_transcript_once(outcome: Outcome) -> None:
    roles: dict[str, list[str]] = defaultdict(list)
    for message in outcome.messages:
        roles[message["turn_id"]].append(message["role"])
    for turn in outcome.turns:
        # The input once; an answer only where the turn completed.
        expected = ["user", "assistant"] if turn["status"] == "completed" else ["user"]
        assert roles[turn["turn_id"]] == expected, turn


def check_turns_of_one_session_never_overlap(outcome: Outcome) -> None:
    # By the database clock (turn rows: admitted .. ended) ...
    by_session: dict[str, list[Row]] = defaultdict(list)
    for turn in outcome.turns:
        by_session[turn["session_id"]].append(turn)
    assert len(by_session) == CONVERSATIONS
    for turns in by_session.values():
        turns.sort(key=lambda turn: turn["started_at"])
        for before, after in itertools.pairwise(turns):
            assert before["ended_at"] <= after["started_at"], (before, after)
    # ... and by the model calls themselves (a call cut off lasted until the victim died).
    spans: dict[str, dict[str, float]] = defaultdict(dict)
    for call in outcome.calls:
        spans[call["payload"]][call["edge"]] = call["at"]
    by_conversation: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for payload, span in spans.items():
        conversation = payload.rsplit(" in ", 1)[1]
        by_conversation[conversation].append((span["start"], span.get("end", outcome.dead_at)))
    for intervals in by_conversation.values():
        intervals.sort()
        for (_, ended), (started, _) in itertools.pairwise(intervals):
            assert ended <= started, intervals
    # Nothing is left held: no running turn, no session lease.
    assert outcome.held_leases == []
    assert "running" not in {turn["status"] for turn in outcome.turns}


async def test_three_hosts_on_one_database_lose_nothing_and_run_nothing_twice(
    tmp_path: Path, cluster: PostgresCluster
) -> None:
    # An empty database: the three Hosts migrate it together as they open.
    url = await cluster.create_database()
    outcome = await run_three_hosts(tmp_path, url)
    by_key = check_each_event_is_one_completed_inbound(outcome)
    turn_of = check_one_turn_and_one_terminal_record_per_inbound(outcome, by_key)
    check_only_the_dead_host_lost_turns(outcome, by_key, turn_of)
    check_no_model_call_was_made_twice(outcome, turn_of)
    check_each_input_is_in_the_transcript_once(outcome)
    check_turns_of_one_session_never_overlap(outcome)
