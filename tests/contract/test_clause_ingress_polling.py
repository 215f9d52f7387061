"""Clause: getUpdates polling keeps a durable cursor that moves only with its batch.

Against a loopback Telegram (tests.platforms.FakeTelegram, which forgets
updates below the offset it is asked for, as Telegram does): the cursor is
committed with the batch; a failed poll or a failed accept keeps it, so the
same updates come back; a restarted poller resumes from the stored cursor;
updates whose accept committed but whose answer was lost are deduplicated; a
refused bot token stops the poller with a clear error that never shows it.
"""

from __future__ import annotations

import gzip
import logging
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hostkit.channels import TelegramPoller
from hostkit.channels._polling import _read_checkpoint
from hostkit.errors import InboxFull, PollError, StoreError
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from hostkit.inbox._memory import MemoryInboxStore
from hostkit.store import InboxLimits, RuntimeStore
from hostkit.types import InboundEnvelope, InboundFailure, InboxReceipt, SourceCheckpoint
from tests.platforms import FakeTelegram, telegram_callback, telegram_message
from tests.support import claim_all

pytestmark = pytest.mark.anyio

TOKEN = "123456:poll-token-SECRET"
SOURCE = "telegram-poll:tg-poll"


def _config(api_base: str, **extra: Any) -> ChannelConfig:
    return ChannelConfig(
        kind="telegram",
        inbound="polling",
        token_env="TG_TOKEN",
        api_base=api_base,
        poll_timeout_s=0,
        poll_backoff_s=0.05,
        **{"allow": ["*"], **extra},
    )


def _poller(telegram: FakeTelegram, inbox: ChannelInbox, **extra: Any) -> TelegramPoller:
    return TelegramPoller(
        "tg-poll", _config(telegram.api_base, **extra), inbox, token=TOKEN, clock=lambda: 1e9
    )


async def test_the_cursor_is_committed_with_its_batch_and_confirms_the_updates(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "one"))
        telegram.push_update(telegram_callback(10, 7, "approve k7qx2m"))
        poller = _poller(telegram, inbox)
        assert await poller.poll_once() == 2
        assert await inbox.checkpoint(SOURCE) == "3"
        assert await poller.poll_once() == 0
        # The second call asked for offset 3: Telegram has forgotten updates 1 and 2.
        assert telegram.polls[-1].body["offset"] == 3
        assert telegram.pending_updates == []
        assert telegram.polls[0].body["allowed_updates"] == ["message", "callback_query"]
    seen = {}
    for claimed in await claim_all(inbox):
        seen[claimed.envelope.platform_event_key] = claimed.envelope
    assert {key: (e.kind, e.payload) for key, e in seen.items()} == {
        "1": ("message", "one"),
        "2": ("command", "approve K7QX2M"),
    }
    assert seen["1"].authenticated_by == "telegram-bot-token"
    assert seen["1"].conversation_key == "10:7"
    assert dict(seen["1"].metadata["reply"]) == {"chat_id": 10}


async def test_a_failed_poll_keeps_the_cursor_and_the_next_reads_the_same_updates(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "one"))
        poller = _poller(telegram, inbox)
        telegram.fail_next(1, status=502)
        with pytest.raises(PollError) as failed:
            await poller.poll_once()
        assert failed.value.retryable
        assert failed.value.status == 502
        telegram.fail_next(1, status=400, description="Bad Request: nope")
        with pytest.raises(PollError):
            await poller.poll_once()
        assert await inbox.checkpoint(SOURCE) is None
        assert poller.cursor is None
        assert await poller.poll_once() == 1
    assert await inbox.checkpoint(SOURCE) == "2"


async def test_a_failed_accept_rereads_and_a_restart_resumes_from_the_stored_cursor(
    db_path: Path,
) -> None:
    async with FakeTelegram.running(token=TOKEN) as telegram:
        async with RuntimeStore.open(db_path) as store:
            telegram.push_update(telegram_message(10, 7, "first"))
            assert await _poller(telegram, ChannelInbox.on_store(store)).poll_once() == 1
        closed = await RuntimeStore.open(db_path)
        poller = _poller(telegram, ChannelInbox.on_store(closed))
        assert await poller.poll_once() == 0  # loads the stored cursor; nothing new yet
        telegram.push_update(telegram_message(10, 7, "second"))
        await closed.aclose()
        with pytest.raises(StoreError):
            await poller.poll_once()
        assert poller.cursor == 2
        # A restart: a new poller over the reopened store asks from the stored cursor
        # and reads the update whose accept failed again.
        async with RuntimeStore.open(db_path) as store:
            inbox = ChannelInbox.on_store(store)
            restarted = _poller(telegram, inbox)
            assert await restarted.poll_once() == 1
            assert [p.body.get("offset") for p in telegram.polls[-2:]] == [2, 2]
            assert await inbox.checkpoint(SOURCE) == "3"
            keys = sorted(r.platform_event_key for r in await inbox.records())
    assert keys == ["1", "2"]


class _LostAnswer(MemoryInboxStore):
    """An InboxStore test adapter: the first accept commits, then its answer is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.lose = True

    async def accept(
        self,
        envelopes: Sequence[InboundEnvelope],
        checkpoint: SourceCheckpoint | None,
        *,
        now: float,
        limits: InboxLimits | None = None,
    ) -> tuple[InboxReceipt, ...]:
        receipts = await super().accept(envelopes, checkpoint, now=now, limits=limits)
        if self.lose:
            self.lose = False
            raise StoreError("connection lost after commit", retryable=True)
        return receipts


async def test_updates_stored_before_a_lost_answer_are_read_again_as_duplicates() -> None:
    inbox = ChannelInbox(_LostAnswer())
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "once"))
        poller = _poller(telegram, inbox)
        with pytest.raises(StoreError):
            await poller.poll_once()
        assert await poller.poll_once() == 0
        assert telegram.polls[-1].body.get("offset") is None
    assert [r.platform_event_key for r in await inbox.records()] == ["1"]


async def test_ignored_and_unallowed_updates_advance_the_cursor_without_rows(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 666, "not allowed"))
        telegram.push_update(telegram_callback(10, 7, "other-button"))
        poller = _poller(telegram, inbox, allow=["7"])
        assert await poller.poll_once() == 0
        assert poller.cursor == 3
        assert await poller.poll_once() == 0
        assert telegram.polls[-1].body["offset"] == 3
    assert await inbox.records() == ()


async def test_run_backs_off_after_a_failure_then_accepts(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    woken = anyio.Event()
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.fail_next(1, status=500)
        telegram.push_update(telegram_message(10, 7, "after the failure"))
        poller = TelegramPoller(
            "tg-poll", _config(telegram.api_base), inbox, token=TOKEN, on_accept=woken.set
        )
        async with anyio.create_task_group() as tasks:
            await tasks.start(poller.run)
            with anyio.fail_after(10):
                await woken.wait()
            tasks.cancel_scope.cancel()
        assert len(telegram.polls) >= 2
    assert [r.platform_event_key for r in await inbox.records()] == ["1"]


async def _full_inbox(store: RuntimeStore) -> ChannelInbox:
    """An inbox that takes one queued inbound, holding one from another channel."""
    inbox = ChannelInbox.on_store(store, limits=InboxLimits(1))
    await inbox.accept(
        InboundEnvelope(
            channel_instance_id="hooks",
            platform_event_key="e1",
            conversation_key="c",
            principal_key="p",
            authenticated_by="hmac",
            received_at=1e9,
            payload="queued",
        )
    )
    return inbox


async def test_run_backs_off_while_the_inbox_is_full_and_keeps_the_cursor(
    store: RuntimeStore,
) -> None:
    """Back-pressure: a full inbox refuses the batch (``InboxFull``); the poller keeps its
    cursor and polls again after its backoff, and stores the update once there is room."""
    inbox = await _full_inbox(store)
    woken = anyio.Event()
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "while full"))
        poller = TelegramPoller(
            "tg-poll", _config(telegram.api_base), inbox, token=TOKEN, on_accept=woken.set
        )
        async with anyio.create_task_group() as tasks:
            await tasks.start(poller.run)
            for _ in range(500):  # refused at least twice, each after its backoff
                if len(telegram.polls) >= 3:
                    break
                await anyio.sleep(0.02)
            assert len(telegram.polls) >= 3
            assert await inbox.checkpoint(SOURCE) is None
            for claimed in await claim_all(inbox):
                await inbox.fail(claimed, InboundFailure("permanent", "test", "made room"))
            with anyio.fail_after(10):
                await woken.wait()
            tasks.cancel_scope.cancel()
    assert await inbox.checkpoint(SOURCE) == "2"


async def test_an_approval_answer_in_a_refused_batch_is_stored_alone_and_the_cursor_stays(
    store: RuntimeStore,
) -> None:
    """A press must reach a full inbox even when a message shares its getUpdates batch:
    the answer is stored alone, the message is not, and the cursor stays where it was
    (the whole batch comes again; dedup answers the answer then)."""
    inbox = await _full_inbox(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "while full", message_id=1))
        telegram.push_update(telegram_message(10, 7, "approve K7QX2M", message_id=2))
        poller = _poller(telegram, inbox)
        with anyio.fail_after(10), pytest.raises(InboxFull):
            await poller.poll_once()
    assert await inbox.checkpoint(SOURCE) is None
    stored = [record for record in await inbox.records() if record.channel_instance_id != "hooks"]
    assert [record.kind for record in stored] == ["command"]


async def test_a_refused_token_stops_run_with_a_clear_error_that_hides_the_token(
    store: RuntimeStore, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = ChannelInbox.on_store(store)
    caplog.set_level(logging.DEBUG)
    async with FakeTelegram.running(token="999:the-real-token") as telegram:
        telegram.push_update(telegram_message(10, 7, "never read"))
        poller = _poller(telegram, inbox)
        with anyio.fail_after(10), pytest.raises(PollError) as stopped:
            await poller.run()
    assert stopped.value.status == 401
    assert not stopped.value.retryable
    assert "401" in stopped.value.message
    assert "token_env" in stopped.value.message
    assert TOKEN not in stopped.value.message
    # httpx logs every request URL, and this one carries the token in its path.
    assert any("getUpdates" in record.getMessage() for record in caplog.records)
    assert all(TOKEN not in record.getMessage() for record in caplog.records)
    assert TOKEN not in caplog.text
    assert await inbox.records() == ()


async def test_an_oversized_getupdates_answer_is_refused_without_moving_the_cursor(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram, httpx.AsyncClient() as client:
        telegram.push_update(telegram_message(10, 7, "x" * 4000))
        poller = TelegramPoller(
            "tg-poll",
            _config(telegram.api_base),
            inbox,
            token=TOKEN,
            client=client,
            max_response_bytes=1024,
        )
        with pytest.raises(PollError, match="more than 1024 bytes"):
            await poller.poll_once()
    assert poller.cursor is None
    assert await inbox.records() == ()


def _gzip_twice(body: bytes) -> bytes:
    return gzip.compress(gzip.compress(body))


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("gzip, gzip", _gzip_twice)],
)
async def test_a_getupdates_answer_sent_compressed_is_decoded_and_stored(
    store: RuntimeStore, encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    """The answer is asked for uncompressed; one that comes compressed anyway is decoded
    from its raw bytes within the same bound, so its updates are stored and the cursor
    moves (refused, the same updates came back on every poll and none was ever read)."""
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.compress_answers(encoding, encode)
        telegram.push_update(telegram_message(10, 7, "hello"))
        assert await _poller(telegram, inbox).poll_once() == 1
    assert telegram.requests[0].headers["accept-encoding"] == "identity"
    assert await inbox.checkpoint(SOURCE) == "2"
    assert [r.platform_event_key for r in await inbox.records()] == ["1"]


@pytest.mark.parametrize(
    ("encoding", "encode", "reason"),
    [
        ("gzip", lambda body: gzip.compress(bytes(64 << 20)), "more than 1024 bytes"),
        ("gzip", lambda body: gzip.compress(body)[:-12], "ended before its end"),
        ("gzip", lambda body: b"not gzip at all", "corrupt"),
        ("br", lambda body: body, "unsupported content-encoding 'br'"),
    ],
)
async def test_a_getupdates_answer_that_cannot_be_read_within_the_bound_is_refused(
    store: RuntimeStore, encoding: str, encode: Callable[[bytes], bytes], reason: str
) -> None:
    """A gzip bomb is decoded only to the bound, then refused; a cut or corrupt body and a
    coding not decoded (br) are a PollError saying so. The cursor stays either way."""
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram, httpx.AsyncClient() as client:
        telegram.compress_answers(encoding, encode)
        telegram.push_update(telegram_message(10, 7, "hello"))
        poller = TelegramPoller(
            "tg-poll",
            _config(telegram.api_base),
            inbox,
            token=TOKEN,
            client=client,
            max_response_bytes=1024,
        )
        with anyio.fail_after(10), pytest.raises(PollError, match=reason):
            await poller.poll_once()
    assert poller.cursor is None
    assert await inbox.records() == ()


async def test_an_update_renumbered_onto_an_old_id_is_a_new_message(store: RuntimeStore) -> None:
    """Renumbered updates may take ids Telegram gave before, whose dedup keys the inbox
    still holds: each numbering has keys of its own, across restarts of the poller, so
    none of them is dropped as a duplicate of an old message."""
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.restart_ids(100)
        for text in ("old 100", "old 101"):
            telegram.push_update(telegram_message(10, 7, text))
        first = _poller(telegram, inbox)
        assert await first.poll_once() == 2
        assert await inbox.checkpoint(SOURCE) == "102"
        telegram.restart_ids(5_000_000)  # afresh, above the cursor: nothing to tell apart
        telegram.push_update(telegram_message(10, 7, "far 5000000"))
        assert await first.poll_once() == 1
        assert await inbox.checkpoint(SOURCE) == "5000001"
        telegram.restart_ids(100)  # afresh again, onto ids the inbox holds keys for
        telegram.push_update(telegram_message(10, 7, "new 100"))
        assert await first.poll_once() == 1
        assert await inbox.checkpoint(SOURCE) == "1:101"
        telegram.push_update(telegram_message(10, 7, "new 101"))
        restarted = _poller(telegram, inbox)  # reads its numbering from the checkpoint
        assert await restarted.poll_once() == 1
        assert await inbox.checkpoint(SOURCE) == "1:102"
        assert await restarted.poll_once() == 0  # its offset confirms the last one
        assert telegram.pending_updates == []
    texts = []
    for claimed in await claim_all(inbox):
        texts.append(claimed.envelope.payload)
    assert sorted(texts) == ["far 5000000", "new 100", "new 101", "old 100", "old 101"]


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, (0, None)),
        ("102", (0, 102)),
        ("3:102", (3, 102)),
        ("x:102", (0, None)),
        ("3:", (0, None)),
        ("\uff11\uff10\uff12", (0, None)),  # fullwidth digits
        ("-5", (0, None)),
    ],
)
def test_a_checkpoint_reads_as_its_numbering_and_cursor_or_as_none(
    stored: str | None, expected: tuple[int, int | None]
) -> None:
    assert _read_checkpoint(stored) == expected


async def test_updates_renumbered_below_the_cursor_are_read_and_confirmed(
    store: RuntimeStore,
) -> None:
    """After a week without updates Telegram numbers the next ones afresh, possibly below
    the stored cursor: the next offset is the batch's own highest id + 1, so they are
    confirmed once, not returned again forever (and the ones behind them are read)."""
    inbox = ChannelInbox.on_store(store)
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.restart_ids(5_000_000)
        telegram.push_update(telegram_message(10, 7, "before the quiet week"))
        poller = TelegramPoller(
            "tg-poll", _config(telegram.api_base), inbox, token=TOKEN, clock=lambda: 1e9, limit=2
        )
        assert await poller.poll_once() == 1
        assert await inbox.checkpoint(SOURCE) == "5000001"
        telegram.restart_ids(100)
        for text in ("one", "two", "three"):
            telegram.push_update(telegram_message(10, 7, text))
        assert await poller.poll_once() == 2
        assert await inbox.checkpoint(SOURCE) == "1:102"  # the second numbering
        assert await poller.poll_once() == 1
        assert await poller.poll_once() == 0
        assert telegram.pending_updates == []
    texts = []
    for claimed in await claim_all(inbox):
        texts.append(claimed.envelope.payload)
    assert sorted(texts) == sorted(["before the quiet week", "one", "two", "three"])
