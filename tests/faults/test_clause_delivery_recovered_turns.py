"""Delivery clause, real processes: a Host SIGKILLed mid-turn still answers its channels.

A Host process dies (SIGKILL) with five turns running: a routed one inside its provider
call, a routed one waiting for a person to decide an approval, an unrouted one (CLI), a
routed one inside a call that already paid, and a routed one whose payment returned before
its next provider call. The next Host's open recovers them from the routes their turn rows
captured at admission: the first ends ``lost`` with one notice on its route that the
message got no answer, the second ``needs_user`` with its approval prompt (its code) on
its route, the third sends nothing. The two that paid tell their conversations that part
of it may have been done and to check before sending it again (never to just send it
again): the one whose call was in flight ends ``indeterminate``, the other ``lost``, and
neither call ran twice. Recovery run again, and a third Host's open, write no second intent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from hostkit.freeze import thaw
from hostkit.host import Host
from hostkit.store._turn_rows import INDETERMINATE_NOTICE, LOST_NOTICE
from hostkit.testing import ScriptedModel, capabilities
from hostkit.types import DeliveryIntent, approval_code
from tests.faults.routed_turns_worker import (
    ASK_ROUTE,
    LOST_ROUTE,
    PAID_ROUTE,
    PAYING_ROUTE,
    host_config,
    pay,
    stamp,
)
from tests.support import sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = Path(__file__).with_name("routed_turns_worker.py")
MARKERS = ("waiting-routed", "asked", "waiting-plain", "paying", "paid-waiting")


def open_host(root: Path) -> Host:
    model = ScriptedModel([])
    return Host.open(host_config(root), capabilities=capabilities(model, tools=[stamp, pay]))


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
    await sigkill_when(argv, all_mid_turn, what="all five turns were mid-turn")
    approval_id = (tmp_path / "asked").read_text()

    intents: tuple[DeliveryIntent, ...]
    async with open_host(tmp_path) as host:  # its open recovers the dead Host's turns
        turns = await turns_by_conversation(host)
        assert {name: status for name, (_, status) in turns.items()} == {
            "c-routed": "lost",
            "c-ask": "needs_user",
            "c-plain": "lost",
            "c-paying": "indeterminate",
            "c-paid": "lost",
        }
        (paying,) = await host.store.read(
            lambda c: c.execute(
                "SELECT result FROM turns WHERE request_id = 'req-c-paying'"
            ).fetchone()
        )
        intents = await host.store.delivery.intents()
        assert await host.store.turns.recover() == ()
        assert await host.store.delivery.intents() == intents
    lost_turn, asked_turn = turns["c-routed"][0], turns["c-ask"][0]
    paying_turn, paid_turn = turns["c-paying"][0], turns["c-paid"][0]
    by_turn = {intent.turn_id: intent for intent in intents}
    assert len(intents) == len(by_turn) == 4
    assert set(by_turn) == {lost_turn, asked_turn, paying_turn, paid_turn}
    for turn, route in ((paying_turn, PAYING_ROUTE), (paid_turn, PAID_ROUTE)):
        told = by_turn[turn]
        assert (told.route, thaw(told.payload)) == (route, {"text": INDETERMINATE_NOTICE})
    # Each payment ran once, and recovery ran neither again.
    assert sorted((await anyio.Path(tmp_path / "ledger").read_text()).split()) == ["hang", "ok"]
    assert "may have run" in json.loads(paying)["error"]

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
