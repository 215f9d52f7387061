"""ChannelInbox clause: what an envelope or a failure may carry is bounded and redacted.

Attempts and payloads are bounded (rule 9) and ``InboundFailure`` is typed and
redacted: a hostile or buggy transport cannot store more than the limits, get
past the reserved channel names with a look-alike, or make an adapter raise
something other than ``InvalidValue``; a secret in a failure's text never
reaches the dead-letter record. Every case runs on both adapters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.errors import InvalidValue
from hostkit.inbox import ChannelInbox, InboxWorker, RetryPolicy
from hostkit.types import MAX_ARTIFACTS, MAX_METADATA_CHARS, ConversationFacts, InboundFailure
from tests.contract._inbox_adapters import ADAPTERS, envelope, open_inbox

pytestmark = pytest.mark.anyio

HUGE = 10**400


def test_bounded_values_times_that_overflow_a_float_are_invalid() -> None:
    with pytest.raises(InvalidValue, match="received_at"):
        envelope("evt", received_at=HUGE)
    with pytest.raises(InvalidValue, match="lease_s"):
        RetryPolicy(lease_s=HUGE)
    with pytest.raises(InvalidValue, match="max_delay_s"):
        RetryPolicy(max_delay_s=HUGE)

    async def never(_: object) -> object:
        raise AssertionError("no turn runs")

    with pytest.raises(InvalidValue, match="idle_poll_s"):
        InboxWorker(ChannelInbox.in_memory(), never, idle_poll_s=HUGE)  # type: ignore[arg-type]
    # An integer time is kept as the float every adapter stores.
    assert isinstance(envelope("evt", received_at=1_700_000_000).received_at, float)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_bounded_values_the_adapter_refuses_overflowing_times(
    adapter: str, tmp_path: Path
) -> None:
    async with open_inbox(adapter, tmp_path) as sut:
        calls = [
            lambda: sut.store.accept([envelope("evt")], None, now=HUGE),
            lambda: sut.store.claim(owner="w", now=1.0, lease_s=HUGE, limit=1, max_attempts=3),
            lambda: sut.store.prune(payload_before=-HUGE, tombstone_before=0.0, limit=10),
        ]
        for call in calls:
            with pytest.raises(InvalidValue):
                await call()
        assert await sut.inbox.records() == ()


def test_bounded_values_artifacts_and_metadata_have_their_shapes() -> None:
    # Artifacts: a list or tuple of bounded references, kept as a tuple.
    assert envelope("evt", artifacts=["att_1", "att_2"]).artifacts == ("att_1", "att_2")
    assert envelope("evt", artifacts=[]).artifacts == ()

    class Unequal:
        def __ne__(self, other: object) -> bool:
            raise RuntimeError("a hostile value's own comparison never runs")

    for bad in ("att_1", {"att_1"}, Unequal(), ["ok", ""], ["ok", 7], ["x" * 257], ["a\x00b"]):
        with pytest.raises(InvalidValue, match="artifact"):
            envelope("evt", artifacts=bad)
    with pytest.raises(InvalidValue, match=str(MAX_ARTIFACTS)):
        envelope("evt", artifacts=[f"att_{i}" for i in range(MAX_ARTIFACTS + 1)])
    # Metadata: a mapping, frozen; an empty one and the default are the same value.
    assert envelope("evt").metadata == {} == envelope("evt", metadata={}).metadata
    assert envelope("evt", metadata={"thread": [1, 2]}).metadata["thread"] == (1, 2)
    for bad in (None, ["thread"], "thread", 7):
        with pytest.raises(InvalidValue, match="metadata must be a mapping"):
            envelope("evt", metadata=bad)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_bounded_values_metadata_is_bounded_in_total(adapter: str, tmp_path: Path) -> None:
    nested = {f"k{i}": {f"j{j}": "x" * 512 for j in range(32)} for i in range(32)}
    with pytest.raises(InvalidValue, match=str(MAX_METADATA_CHARS)):
        envelope("evt", metadata=nested)
    big = envelope("evt-int", metadata={"count": 10**5000, "ok": 7})
    assert big.metadata["count"].startswith("[integer of")
    assert big.metadata["ok"] == 7
    async with open_inbox(adapter, tmp_path) as sut:
        receipt = await sut.inbox.accept(big)
        assert receipt.disposition == "accepted"
        claimed = await sut.inbox.claim()
        assert claimed is not None
        assert claimed.envelope.metadata == big.metadata


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_bounded_values_identifiers_admit_no_trailing_newline(
    adapter: str, tmp_path: Path
) -> None:
    for channel in ("operator\n", "webhook.main\n", "schedule\n"):
        with pytest.raises(InvalidValue, match="channel_instance_id"):
            envelope("evt", channel)
    with pytest.raises(InvalidValue, match="kind"):
        envelope("evt", kind="message\n")
    with pytest.raises(InvalidValue):
        InboundFailure("transient", "code\n")
    with pytest.raises(InvalidValue):
        ConversationFacts(channel="telegram\n", conversation_key="c", principal_key="p")
    async with open_inbox(adapter, tmp_path) as sut:
        await sut.inbox.accept(envelope("evt", "webhook.main"))
        assert [c.channel_instance_id for c in await sut.inbox.counts()] == ["webhook.main"]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_bounded_values_secrets_in_a_failure_never_reach_the_record(
    adapter: str, tmp_path: Path
) -> None:
    secrets = [
        "ya29.A0ARrdaM-secret",
        "GOCSPX-SECRET",
        "hunter2",
        "sk-live-1234567890abcdef",
        "xoxb-1234567890-abcdefghij",
    ]
    message = (
        f"access_token={secrets[0]} client_secret={secrets[1]} db_password={secrets[2]} "
        f'body {{"api_key": "{secrets[3]}"}} posted with {secrets[4]}'
    )
    async with open_inbox(adapter, tmp_path, policy=RetryPolicy(max_attempts=1)) as sut:
        receipt = await sut.inbox.accept(envelope("evt"))
        claimed = await sut.inbox.claim()
        assert claimed is not None
        decision = await sut.inbox.fail(claimed, InboundFailure("transient", "boom", message))
        assert decision.disposition == "dead_lettered"
        record = await sut.inbox.record(receipt.inbound_id)
        assert record is not None
        assert "access_token=" in record.failure_message
        for secret in secrets:
            assert secret not in record.failure_message
