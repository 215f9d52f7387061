"""A real Host with configured outbound channels, for the delivery clause tests.

The Host runs real turns (scripted model) on a real SQLite file; its
channels are the Host's own ``ConfiguredChannels`` pointed at loopback fakes
(tests/platforms.py), with secrets from a test environment mapping.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.host import (
    ConfiguredChannels,
    Host,
    HostConfig,
    load_channel_adapters,
    parse_config,
)
from hostkit.testing import capabilities
from hostkit.types import ConversationFacts, TurnRequest, TurnResult, new_id

SLACK_TOKEN = "xoxb-1111-2222-secrettokenvalue"
TELEGRAM_TOKEN = "987654:AAsecret-telegram-token-value"
WEBHOOK_SECRET = "whsec-outbound-signing-secret"
ENV = {
    "SLACK_BOT_TOKEN": SLACK_TOKEN,
    "SLACK_SIGNING": "slack-signing-secret",
    "TG_TOKEN": TELEGRAM_TOKEN,
    "TG_SECRET": "tg-secret-token-5e8c",
    "HOOK_SECRET": WEBHOOK_SECRET,
}


def channel_tables(
    *, slack: str | None = None, telegram: str | None = None, deliver_url: str | None = None
) -> dict[str, dict[str, Any]]:
    """``[channels]`` for the fakes given: ``slack-acme``, ``tg``, ``hook``."""
    tables: dict[str, dict[str, Any]] = {}
    if slack is not None:
        tables["slack-acme"] = {
            "kind": "slack",
            "api_base": slack,
            "token_env": "SLACK_BOT_TOKEN",
            "secret_env": "SLACK_SIGNING",
            "allow": ["*"],
        }
    if telegram is not None:
        tables["tg"] = {
            "kind": "telegram",
            "api_base": telegram,
            "token_env": "TG_TOKEN",
            "secret_env": "TG_SECRET",
            "allow": ["*"],
        }
    if deliver_url is not None:
        tables["hook"] = {
            "kind": "webhook",
            "deliver_url": deliver_url,
            "secret_env": "HOOK_SECRET",
        }
    return tables


def host_config(tmp_path: Path, channels: Mapping[str, Mapping[str, Any]]) -> HostConfig:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "policy": {"allow": ["*"]}}},
            "channels": {name: dict(table) for name, table in channels.items()},
            "serve": {"delivery_backoff_s": 2.0, "delivery_max_attempts": 3},
        },
        base_dir=tmp_path,
    )


async def configured_channels(
    config: HostConfig, env: Mapping[str, str], *, require: bool = True
) -> ConfiguredChannels:
    """The Host's own channels for ``config``, their adapters (and httpx) loaded off the
    event loop first, as the Host loads them before it builds its channels on the loop."""
    await load_channel_adapters(config)
    return ConfiguredChannels(config, env, require=require)


@asynccontextmanager
async def channel_host(
    tmp_path: Path,
    channels: Mapping[str, Mapping[str, Any]],
    *,
    answers: Sequence[str] = ("the answer",),
    env: Mapping[str, str] = ENV,
) -> AsyncIterator[Host]:
    """A Host whose turns answer ``answers`` in order and whose channels are configured."""
    config = host_config(tmp_path, channels)
    model = ScriptedModel([Reply(text) for text in answers], repeat_last=True)
    caps = dataclasses.replace(capabilities(model), channels=await configured_channels(config, env))
    async with Host.open(config, capabilities=caps) as host:
        yield host


async def routed_turn(
    host: Host,
    channel: str,
    reply: Mapping[str, Any],
    *,
    text: str = "hello",
    conversation: str = "c1",
    principal: str = "U1",
    parts: int = 1,
) -> TurnResult:
    """Run one turn whose route a transport would have captured; it must write ``parts``
    intents (one per part of its answer)."""
    result = await host.turns.run(
        TurnRequest(
            input=text,
            principal=ConversationFacts(
                channel=channel, conversation_key=conversation, principal_key=principal
            ),
            request_id=new_id("req"),
            core_id="assistant",
            route={"channel": channel, "conversation": conversation, "reply": dict(reply)},
        )
    )
    assert result.outcome == "completed", result.error
    assert len(result.deliveries) == parts
    return result


class Clock:
    """An injected wall clock the test moves by hand.

    Without ``start`` it starts a second ahead of the real clock when first read, not when
    built: intents the test wrote since (a Host opening on a loaded machine takes seconds)
    are due at once. ``follow`` keeps it that far ahead of the real clock (plus what it was
    advanced by), for a test that writes intents between reads."""

    def __init__(self, start: float | None = None, *, follow: bool = False) -> None:
        self._now = start
        self._follow = follow
        self._advanced = 0.0

    @property
    def now(self) -> float:
        if self._follow:
            return time.time() + 1.0 + self._advanced
        if self._now is None:
            self._now = time.time() + 1.0
        return self._now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if self._follow:
            self._advanced += seconds
        else:
            self._now = self.now + seconds
