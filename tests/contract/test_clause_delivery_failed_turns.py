"""Delivery clause: a routed turn that ends ``failed`` tells its conversation, without the error.

The person's message was accepted and its inbound completes with the failed
turn (it is not run again), so silence would leave them waiting for an
answer that never comes. The terminal commit writes ``FAILED_NOTICE`` to the
captured route instead; the error itself (a provider's message, an adapter
bug's text) stays in the turn's record. An unrouted failed turn (CLI,
notebook) writes nothing. Real Host, real SQLite outbox.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hostkit.adapters.scripted import CallTools, Fail, ScriptedModel
from hostkit.errors import ProviderError
from hostkit.freeze import thaw
from hostkit.host import Host, parse_config
from hostkit.store import FAILED_ACTED_NOTICE, FAILED_NOTICE
from hostkit.testing import capabilities
from hostkit.types import ConversationFacts, TurnRequest, new_id
from tests.contract._delivery_hosts import ENV, channel_tables, configured_channels, host_config

pytestmark = pytest.mark.anyio

INTERNAL = "db at 10.0.0.7 password=hunter2"
FAILURES = {
    "provider outage": Fail(ProviderError(f"upstream 502 from {INTERNAL}", provider="test")),
    "adapter bug": Fail(RuntimeError(INTERNAL)),
}


def request(*, routed: bool) -> TurnRequest:
    route = {"channel": "slack-acme", "conversation": "c1", "reply": {"channel": "C1"}}
    return TurnRequest(
        input="hello",
        principal=ConversationFacts(
            channel="slack-acme", conversation_key="c1", principal_key="U1"
        ),
        request_id=new_id("req"),
        core_id="assistant",
        route=route if routed else None,
    )


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
@pytest.mark.parametrize("routed", [True, False], ids=["routed", "unrouted"])
async def test_a_failed_turn_sends_the_notice_and_never_its_error(
    tmp_path: Path, failure: Fail, routed: bool
) -> None:
    config = host_config(tmp_path, channel_tables(slack="http://127.0.0.1:9/api"))
    caps = dataclasses.replace(
        capabilities(ScriptedModel([failure])), channels=await configured_channels(config, ENV)
    )
    async with Host.open(config, capabilities=caps) as host:
        result = await host.turns.run(request(routed=routed))
        intents = await host.store.delivery.intents()
    assert result.outcome == "failed"
    assert result.error  # the reason is kept in the turn's own record
    if not routed:
        assert (intents, result.deliveries) == ((), ())
        return
    (intent,) = intents
    assert result.deliveries == (intent.intent_id,)
    assert thaw(intent.payload) == {"text": FAILED_NOTICE}
    assert thaw(intent.route)["reply"] == {"channel": "C1"}
    # Nowhere in the stored outbox row either (its route, headers, any field).
    assert "10.0.0.7" not in repr(intent)
    assert "hunter2" not in repr(intent)


async def test_a_turn_that_failed_after_a_call_acted_never_says_try_again(
    tmp_path: Path,
) -> None:
    """A call ran (a file written; an approved call a continuation ran), then the model
    failed: "please try again" would make it act twice. The notice says part of it may
    have been done and asks to check first."""
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "builtins": ["files.write"],
                    "policy": {"allow": ["*"]},
                }
            },
            "channels": channel_tables(slack="http://127.0.0.1:9/api"),
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel(
        [
            CallTools(("files.write", {"path": "a.txt", "content": "done"})),
            FAILURES["provider outage"],
        ]
    )
    caps = dataclasses.replace(
        capabilities(model, config=config), channels=await configured_channels(config, ENV)
    )
    async with Host.open(config, capabilities=caps) as host:
        result = await host.turns.run(request(routed=True))
        intents = await host.store.delivery.intents()
    assert result.outcome == "failed"
    assert [effect.status for effect in result.effects] == ["succeeded"], result.effects
    assert (tmp_path / "a.txt").read_text() == "done"
    (intent,) = intents
    assert thaw(intent.payload) == {"text": FAILED_ACTED_NOTICE}
    assert "try again" not in FAILED_ACTED_NOTICE
