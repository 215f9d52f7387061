"""DeliveryStore clause: the reply to a channel command that ran no turn (``approve CODE``
that matched nothing, a refused answer) is an outbox intent of its inbound, not of a turn:
pending and due at once, delivered like any intent, written once per inbound however often
the command is handled, and bad input writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import MESSAGE_LIMIT, InvalidValue
from hostkit.store import MAX_REPLY_CHARS
from hostkit.types import DeliveryIntent, new_id
from tests.contract._delivery_adapters import ADAPTERS, ROUTE, DeliveryUnderTest, open_delivery

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("adapter", ADAPTERS)]


async def a_session(sut: DeliveryUnderTest) -> str:
    return await sut.store.create_session(owner_kind="system", principal_id="suite")


async def test_a_reply_is_an_inbounds_intent_claimed_and_delivered_like_any(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        session_id, inbound_id = await a_session(sut), new_id("inb")
        reply = await sut.delivery.reply(
            inbound_id=inbound_id, session_id=session_id, route=ROUTE, text="no such code"
        )
        assert (reply.turn_id, reply.inbound_id, reply.session_id) == (
            None,
            inbound_id,
            session_id,
        )
        assert (reply.status, reply.attempts, reply.channel) == ("pending", 0, "slack.main")
        assert dict(reply.payload) == {"text": "no such code"}
        assert reply.route == ROUTE
        assert await sut.delivery.intents() == (reply,)

        (claimed,) = await sut.delivery.claim(
            owner="suite", limit=5, lease_s=30, max_attempts=3, now=sut.later()
        )
        assert claimed.intent.intent_id == reply.intent_id
        assert claimed.intent.inbound_id == inbound_id
        done = await sut.delivery.delivered(claimed, now=sut.later())
        assert (done.status, done.turn_id, done.inbound_id) == ("delivered", None, inbound_id)


async def test_the_same_inbound_gets_one_reply_however_often_it_is_handled(
    adapter: str, tmp_path: Path
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        session_id, inbound_id = await a_session(sut), new_id("inb")
        first = await sut.delivery.reply(
            inbound_id=inbound_id, session_id=session_id, route=ROUTE, text="first"
        )
        again = await sut.delivery.reply(
            inbound_id=inbound_id, session_id=session_id, route=ROUTE, text="second"
        )
        assert again == first  # the intent written the first time, its text unchanged
        other = await sut.delivery.reply(
            inbound_id=new_id("inb"), session_id=session_id, route=ROUTE, text="first"
        )
        assert other.intent_id != first.intent_id
        assert (await sut.delivery.counts()).pending == 2
        # A turn's intents and replies share the outbox.
        (turn_intent,) = await sut.seed(1)
        listed = {i.intent_id: i for i in await sut.delivery.intents()}
        assert listed.keys() == {first.intent_id, other.intent_id, turn_intent}
        assert listed[turn_intent].inbound_id is None
        assert listed[turn_intent].turn_id is not None


async def test_the_answer_to_a_button_press_is_marked_for_the_presser_alone(
    adapter: str, tmp_path: Path
) -> None:
    """The channel reads the mark and tells the presser only (answerCallbackQuery, an
    ephemeral message); whether it is an alert is kept with it."""
    async with open_delivery(adapter, tmp_path) as sut:
        session_id = await a_session(sut)
        route = {**ROUTE, "reply": {"channel": "C1", "user": "U2"}}
        refused = await sut.delivery.reply(
            inbound_id=new_id("inb"),
            session_id=session_id,
            route=route,
            text="no such code",
            press=True,
            alert=True,
        )
        typed = await sut.delivery.reply(
            inbound_id=new_id("inb"), session_id=session_id, route=ROUTE, text="no such code"
        )
        listed = {i.intent_id: i for i in await sut.delivery.intents()}
    assert dict(listed[refused.intent_id].payload) == {
        "text": "no such code",
        "press_answer": {"alert": True},
    }
    assert listed[refused.intent_id].press_answer
    assert listed[refused.intent_id].route == route
    assert not listed[typed.intent_id].press_answer


BAD: dict[str, dict[str, Any]] = {
    "empty text": {"text": ""},
    "blank text": {"text": "  \n"},
    "text too long": {"text": "x" * (MAX_REPLY_CHARS + 1)},
    "text not a string": {"text": 7},
    "route without a channel": {"route": {"conversation": "c"}},
    "route not a mapping": {"route": ["slack.main"]},
    "empty inbound id": {"inbound_id": ""},
    "inbound id too long": {"inbound_id": "i" * 300},
    "empty session id": {"session_id": ""},
    "press answer without a reply target": {"route": {"channel": "slack.main"}, "press": True},
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_bad_input_is_refused_and_writes_nothing(
    adapter: str, tmp_path: Path, case: str
) -> None:
    async with open_delivery(adapter, tmp_path) as sut:
        arguments: dict[str, Any] = {
            "inbound_id": new_id("inb"),
            "session_id": await a_session(sut),
            "route": ROUTE,
            "text": "fine",
        } | BAD[case]
        with pytest.raises(InvalidValue) as caught:
            await sut.delivery.reply(**arguments)
        assert len(caught.value.message) <= MESSAGE_LIMIT
        assert await sut.delivery.intents() == ()


def test_an_intent_names_exactly_one_source(adapter: str) -> None:
    common: dict[str, Any] = {
        "intent_id": "out_1",
        "session_id": "ses_1",
        "route": ROUTE,
        "payload": {"text": "t"},
        "status": "pending",
    }
    DeliveryIntent(turn_id="turn_1", **common)
    DeliveryIntent(turn_id=None, inbound_id="inb_1", **common)
    for turn_id, inbound_id in (("turn_1", "inb_1"), (None, None)):
        with pytest.raises(InvalidValue, match="exactly one id"):
            DeliveryIntent(turn_id=turn_id, inbound_id=inbound_id, **common)
