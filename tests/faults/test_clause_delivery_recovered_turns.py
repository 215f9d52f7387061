"""Delivery clause, real processes: a Host SIGKILLed mid-turn still answers its channels.

A Host process dies (SIGKILL) with three turns running: a routed one inside its provider
call, a routed one waiting for a person to decide an approval, an unrouted one (CLI). The
next Host's open recovers them from the routes their turn rows captured at admission: the
first ends ``lost`` with one notice on its route that the message got no answer, the second
``needs_user`` with its approval prompt (its code) on its route, the third sends nothing.
Recovery run again, and a third Host's open, write no second intent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from hostkit.freeze import thaw
from hostkit.host import Host
from hostkit.store._turn_rows import LOST_NOTICE
from hostkit.testing import ScriptedModel, capabilities
from hostkit.types import DeliveryIntent, approval_code
from tests.faults.routed_turns_worker import ASK_ROUTE, LOST_ROUTE, host_config, stamp
from tests.support import sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("routed_turns_worker.py")
MARKERS = ("waiting-routed", "asked", "waiting-plain")


def open_host(root: Path) -> Host:
    model = ScriptedModel([])
    return Host.open(host_config(root), capabilities=capabilities(model, tools=[stamp]))


async def turns_by_conversation(host: Host) -> dict[str, tuple[str, str]]:
    """(turn id, status) of each turn, keyed by its conversation (request ids name it)."""
    rows = await host.store.read(
        lambda c: c.execute("SELECT turn_id, status, request_id FROM turns").fetchall()
    )
    return {
        request_id.removeprefix("req-"): (turn_id, status) for turn_id, status, request_id in rows
    }


async def test_a_killed_host_s_routed_turns_are_answered_once_after_recovery(
    tmp_path: Path,
) -> None:
    async def all_mid_turn() -> bool:
        return all([await anyio.Path(tmp_path / name).exists() for name in MARKERS])

    argv = [sys.executable, str(WORKER), str(tmp_path)]
    await sigkill_when(argv, all_mid_turn, what="all three turns were mid-turn")
    approval_id = (tmp_path / "asked").read_text()

    intents: tuple[DeliveryIntent, ...]
    async with open_host(tmp_path) as host:  # its open recovers the dead Host's turns
        turns = await turns_by_conversation(host)
        assert {name: status for name, (_, status) in turns.items()} == {
            "c-routed": "lost",
            "c-ask": "needs_user",
            "c-plain": "lost",
        }
        intents = await host.store.delivery.intents()
        assert await host.store.turns.recover() == ()
        assert await host.store.delivery.intents() == intents
    lost_turn, asked_turn = turns["c-routed"][0], turns["c-ask"][0]
    by_turn = {intent.turn_id: intent for intent in intents}
    assert len(intents) == len(by_turn) == 2
    assert set(by_turn) == {lost_turn, asked_turn}

    notice = by_turn[lost_turn]
    assert (notice.route, notice.status, notice.approval) == (LOST_ROUTE, "pending", None)
    assert thaw(notice.payload) == {"text": LOST_NOTICE}

    prompt = by_turn[asked_turn]
    assert (prompt.route, prompt.status) == (ASK_ROUTE, "pending")
    approval = thaw(prompt.approval)
    code = approval_code(approval_id)
    assert (approval["approval_id"], approval["code"], approval["tool"]) == (
        approval_id,
        code,
        "files.stamp",
    )
    assert "invoice 7" in approval["summary"]
    assert f"approve {code}" in prompt.payload["text"]

    async with open_host(tmp_path) as again:  # a later open recovers nothing more
        assert await again.store.delivery.intents() == intents
        assert await again.store.turns.route_of(asked_turn) == ASK_ROUTE
