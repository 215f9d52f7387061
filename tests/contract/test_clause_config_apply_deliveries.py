"""Clause: a channel send is a user of its generation, as a turn is.

A reload (here one that only changes an agent's instructions) makes a new
generation with its own channel adapters and HTTP client while a send is on
the wire. The send holds the generation it started on: the platform gets the
message once, the delivery succeeds on its first attempt, and the replaced
generation's adapters close after the platform answered, not under the POST.
Closed under it, the sender saw a transport error although the platform had
the message, and the retry posted it a second time (Telegram has no
idempotency key: two messages in the chat).

A real Host opened from a hostkit.toml on disk with the default capability
sources (each generation builds its own ``ConfiguredChannels``), a real
``DeliveryRuntime``, and a loopback Telegram that answers slowly.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from hostkit.delivery import DeliveryPolicy
from hostkit.host import ConfiguredChannels, Host
from hostkit.types import ConversationFacts, TurnRequest, new_id
from tests.contract._config_apply import write_config
from tests.platforms import FakeTelegram

pytestmark = pytest.mark.anyio

TOKEN = "987654:AAsecret-telegram-token-value"
# The platform takes this long to answer a sendMessage: the reload lands meanwhile.
SLOW_S = 1.5


def telegram_table(api_base: str) -> str:
    return f"""
[channels.tg]
kind = "telegram"
inbound = "none"
token_env = "TG_TOKEN"
api_base = {json.dumps(api_base)}
allow = ["*"]
"""


def routed(text: str) -> TurnRequest:
    """A turn whose route the Telegram transport would have captured (chat 42)."""
    return TurnRequest(
        input=text,
        principal=ConversationFacts(channel="tg", conversation_key="42", principal_key="7"),
        request_id=new_id("req"),
        core_id="assistant",
        route={"channel": "tg", "conversation": "42", "reply": {"chat_id": 42}},
    )


async def test_a_reload_mid_send_lets_the_send_finish_and_the_platform_gets_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TG_TOKEN", TOKEN)
    # Each ConfiguredChannels close, with how many messages the platform had accepted then.
    closes: list[int] = []
    close = ConfiguredChannels.aclose

    async with FakeTelegram.running(token=TOKEN) as telegram:

        async def observed_close(self: ConfiguredChannels) -> None:
            closes.append(len(telegram.messages))
            await close(self)

        monkeypatch.setattr(ConfiguredChannels, "aclose", observed_close)
        extra = telegram_table(telegram.api_base)
        path = write_config(tmp_path, reply="the answer", times=2, extra=extra)
        async with Host.open(path) as host:
            result = await host.turns.run(routed("hello"))
            (intent_id,) = result.deliveries
            telegram.slow_next(1, delay_s=SLOW_S)
            runtime = host.delivery_runtime(policy=DeliveryPolicy(backoff_s=0.1, jitter=0.0))
            settled: list[int] = []

            async def drain() -> None:
                settled.append(await runtime.drain())

            async with anyio.create_task_group() as group:
                group.start_soon(drain)
                await telegram.wait_for_requests(1)  # the POST is on the wire
                write_config(
                    tmp_path, reply="the answer", times=2, extra=extra, instructions="Second."
                )
                outcome = await host.reload()
                assert outcome.applied, outcome
                assert outcome.changes == ("agents.assistant",)
                # The send holds generation 1: nothing of it is closed yet.
                assert closes == []
            assert settled == [1]
            # Past the backoff a failed attempt would wait: nothing is due, nothing re-sent.
            await anyio.sleep(0.3)
            assert await runtime.drain() == 0
            row = await host.store.delivery.intent(intent_id)
            # Generation 1 was released once its last send ended: closed, not leaked.
            assert closes == [1]
        assert closes == [1, 1]  # the Host closed generation 2's adapters
    assert row is not None
    assert (row.status, row.attempts) == ("delivered", 1)
    sends = [seen for seen in telegram.requests if seen.path.endswith("/sendMessage")]
    assert len(sends) == 1
    assert telegram.texts() == ["the answer"]
