"""Clause: a worker killed between claim and complete loses nothing and runs nothing twice.

Real worker processes (``_inbox_worker_proc.py``) on one SQLite file, stopped
with SIGKILL at a chosen point; a second worker process takes the inbound
over once the dead one's lease (one second) has run out.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.host import Host
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import (
    ConversationFacts,
    InboundEnvelope,
    InboundRecord,
    InboundResult,
    TurnRequest,
)
from tests.hosts import config
from tests.support import sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROC = Path(__file__).with_name("_inbox_worker_proc.py")
LEASE = RetryPolicy(max_attempts=5, base_delay_s=0.1, max_delay_s=0.5, lease_s=1.0)


def command(**options: Any) -> list[str]:
    return [sys.executable, str(PROC), json.dumps(options)]


async def accept(root: Path, text: str) -> str:
    """The inbound, durably accepted before any worker runs."""
    async with Host.open(config(root), capabilities=capabilities(ScriptedModel([]))) as host:
        receipt = await host.inbox.accept(
            InboundEnvelope(
                channel_instance_id="telegram.support",
                platform_event_key="update-1",
                conversation_key="chat-1",
                principal_key="alice",
                authenticated_by="bot_token",
                received_at=time.time(),
                payload=text,
            )
        )
    return receipt.inbound_id


def query(database: Path, sql: str, params: tuple[Any, ...]) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def turns_and_messages(root: Path, inbound_id: str) -> tuple[list[Any], list[Any]]:
    database = root / "hostkit.db"
    turns = await anyio.to_thread.run_sync(
        query,
        database,
        "SELECT turn_id, status FROM turns WHERE request_id = ? ORDER BY id",
        (f"inbound:{inbound_id}",),
    )
    messages = await anyio.to_thread.run_sync(
        query,
        database,
        "SELECT m.role, m.content FROM messages m JOIN turns t ON t.turn_id = m.turn_id "
        "WHERE t.request_id = ? ORDER BY m.seq",
        (f"inbound:{inbound_id}",),
    )
    return [tuple(row) for row in turns], [tuple(row) for row in messages]


async def inbound(root: Path, inbound_id: str) -> InboundRecord:
    async with Host.open(config(root), capabilities=capabilities(ScriptedModel([]))) as host:
        record = await host.inbox.record(inbound_id)
    assert record is not None
    return record


async def run_to_end(argv: list[str]) -> None:
    with anyio.fail_after(90):
        done = await anyio.run_process(argv, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


async def test_sigkill_before_the_turn_started_is_redelivered_and_runs_one_turn(
    tmp_path: Path,
) -> None:
    inbound_id = await accept(tmp_path, "hello after a crash")
    marker = anyio.Path(tmp_path / "stalled")
    await sigkill_when(
        command(root=str(tmp_path), mode="stall", marker=str(marker)),
        marker.exists,
        what="the claim was taken and its turn id reserved",
    )
    assert await marker.read_text() == f"inbound:{inbound_id}"
    assert (await inbound(tmp_path, inbound_id)).state == "claimed"
    assert await turns_and_messages(tmp_path, inbound_id) == ([], [])

    results = tmp_path / "results.json"
    await run_to_end(
        command(root=str(tmp_path), mode="serve", until=inbound_id, results=str(results))
    )
    record = await inbound(tmp_path, inbound_id)
    turns, messages = await turns_and_messages(tmp_path, inbound_id)
    assert (record.state, record.result_kind, record.attempt) == ("completed", "turn", 2)
    assert turns == [(record.turn_id, "completed")]
    assert [role for role, _ in messages] == ["user", "assistant"]
    assert json.loads(results.read_text()) == {"calls": 1}


async def killed_mid_turn_then_served(
    root: Path, inbound_id: str, *, lease_s: float = 1.0, **first: Any
) -> tuple[float, dict[str, Any]]:
    """A first worker process (``first`` options) is SIGKILLed as its turn reaches the
    model; a second one, open before the kill (so its Host's open-time recovery cannot
    end the first one's turn), serves the inbound to its end after it. Both claim for
    ``lease_s`` seconds. When the first was killed (monotonic seconds), and the
    second's results."""
    marker = anyio.Path(root / "in_provider")
    ready, go = root / "second_ready", root / "second_go"
    results = root / "results.json"
    second = command(
        root=str(root),
        mode="serve",
        until=inbound_id,
        results=str(results),
        ready=str(ready),
        go=str(go),
        lease_s=lease_s,
    )
    argv = command(
        root=str(root),
        mode="serve",
        until=inbound_id,
        block=True,
        marker=str(marker),
        lease_s=lease_s,
        **first,
    )
    async with anyio.create_task_group() as group:
        group.start_soon(run_to_end, second)

        async def first_in_turn_second_open() -> bool:
            return await marker.exists() and await anyio.Path(ready).exists()

        await sigkill_when(argv, first_in_turn_second_open, what="its turn reached the model")
        killed_at = time.monotonic()
        await anyio.Path(go).write_text("go")
    return killed_at, json.loads(results.read_text())


async def test_sigkill_mid_turn_reconciles_with_that_turn_and_runs_no_second(
    tmp_path: Path,
) -> None:
    inbound_id = await accept(tmp_path, "hello mid turn")
    _, results = await killed_mid_turn_then_served(tmp_path, inbound_id)
    record = await inbound(tmp_path, inbound_id)
    turns, messages = await turns_and_messages(tmp_path, inbound_id)
    assert (record.state, record.result_kind, record.attempt) == ("completed", "turn", 2)
    assert turns == [(record.turn_id, "lost")], "one turn: the dead worker's, ended lost"
    assert [role for role, _ in messages] == ["user"], "the transcript holds the input once"
    assert results == {"calls": 0}, "the message was not run again"


async def test_a_turn_whose_holder_may_still_live_is_waited_for_not_dead_lettered(
    tmp_path: Path,
) -> None:
    """The first worker runs on another machine (so its death cannot be proven: only its
    session lease's expiry frees the turn) and is killed mid-turn. Its inbox claim
    (two seconds) runs out long before that lease (six): the second worker's attempts
    meet the turn still running (``TurnInProgress``) and defer the message without
    spending attempts (five would run out in under two seconds), and the first
    attempt after the lease expired ends the turn ``lost`` and completes the message
    with that record. Nothing is run twice, nothing dead-lettered.

    The claims last two seconds, not one: each deferral and renewal of the second
    worker's claim must land before the claim runs out, or the next claim counts a
    new attempt, and on a loaded machine (a full run on two cores) one second
    was once not enough."""
    inbound_id = await accept(tmp_path, "hello from afar")
    killed_at, results = await killed_mid_turn_then_served(
        tmp_path, inbound_id, lease_s=2.0, hostname="another-machine", session_lease_ttl_s=6.0
    )
    record = await inbound(tmp_path, inbound_id)
    turns, messages = await turns_and_messages(tmp_path, inbound_id)
    assert (record.state, record.result_kind, record.attempt) == ("completed", "turn", 2)
    assert turns == [(record.turn_id, "lost")], "one turn: the dead worker's, ended lost"
    assert [role for role, _ in messages] == ["user"]
    assert results == {"calls": 0}, "the message was not run again"
    # Renewed every third of its six seconds, the lease outlived the kill by four at least.
    assert time.monotonic() - killed_at >= 3.5, "ended by the lease's expiry, not before it"


async def test_stale_complete_after_a_reclaim_is_refused(tmp_path: Path) -> None:
    inbound_id = await accept(tmp_path, "who wins")
    marker = anyio.Path(tmp_path / "held")
    steps = [tmp_path / "step1", tmp_path / "step2"]
    results = tmp_path / "answers.json"
    argv = command(
        root=str(tmp_path),
        mode="hold",
        marker=str(marker),
        steps=[str(step) for step in steps],
        results=str(results),
    )
    async with anyio.create_task_group() as group:
        group.start_soon(run_to_end, argv)
        await _wait_file(Path(marker))
        model = ScriptedModel([Reply("B answered")])
        async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
            inbox = ChannelInbox.on_store(host.store, policy=LEASE)
            with anyio.fail_after(10):
                reclaimed = await inbox.claim()
                while reclaimed is None:  # A's lease runs out after a second
                    await anyio.sleep(0.05)
                    reclaimed = await inbox.claim()
            assert reclaimed.claim_token != await marker.read_text()
            assert reclaimed.attempt == 2
            # A's claim was taken over and B has not ended it yet: A is stale.
            await anyio.Path(steps[0]).write_text("go")
            await _wait_answers(results, 1)
            while_claimed = await inbox.record(inbound_id)
            # B ends it with a real turn; A, after that: already terminal, row unchanged.
            envelope = reclaimed.envelope
            result = await host.turns.run(
                TurnRequest(
                    input=envelope.payload,
                    principal=ConversationFacts(
                        envelope.channel_instance_id,
                        envelope.conversation_key,
                        envelope.principal_key,
                    ),
                    request_id=reclaimed.turn_request_id,
                )
            )
            ended = await inbox.complete(
                reclaimed, InboundResult("turn", result.turn_id, result.outcome)
            )
            assert ended.disposition == "completed"
            before = await inbox.record(inbound_id)
            await anyio.Path(steps[1]).write_text("go")
            await _wait_answers(results, 2)
            after = await inbox.record(inbound_id)
    answers = json.loads(results.read_text())
    assert answers[0] == ["stale_claim", "stale_claim", "stale_claim"]
    assert answers[1] == ["already_terminal", "already_terminal", "stale_claim"]
    assert while_claimed is not None
    assert (while_claimed.state, while_claimed.attempt) == ("claimed", 2)
    assert before is not None
    assert after == before
    assert (after.state, after.result_kind, after.turn_id) == ("completed", "turn", result.turn_id)


async def _wait_file(path: Path) -> None:
    with anyio.fail_after(60):
        while not await anyio.Path(path).exists():  # noqa: ASYNC110 (another process writes it)
            await anyio.sleep(0.01)


async def _wait_answers(results: Path, count: int) -> None:
    with anyio.fail_after(30):
        while True:
            if await anyio.Path(results).exists():
                text = await anyio.Path(results).read_text()
                if text and len(json.loads(text)) >= count:
                    return
            await anyio.sleep(0.02)
