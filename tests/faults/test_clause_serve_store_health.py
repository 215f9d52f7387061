"""Serve clause: readiness and liveness follow the store, whoever finds it failing.

Every store user of a serve reports to one store-health record: the inbox
worker's and the delivery runtime's claims (and their dead-claim sweeps),
the Telegram pollers and the webhook accepts. ``/readyz`` answers 503 with
``"store": "failing"`` while they fail, with no webhook needed to notice, and
200 again once a store call works. A database file replaced under a real
``hostkit serve`` is no passing trouble: ``/readyz`` says ``"replaced"`` and
``/healthz`` is 503 too, so liveness restarts the process on the right file.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import anyio
import httpx
import pytest

from hostkit._store_health import StoreHealth
from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.channels import TelegramPoller
from hostkit.errors import StoreError
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.faults._serve_proc import eventually, hook_channel, serving, write_config
from tests.faults.test_clause_drain_claim_failures import KEEPS_FAILING, FailingClaims
from tests.hosts import open_host
from tests.platforms import FakeTelegram, telegram_message

pytestmark = pytest.mark.anyio

TOKEN = "123456:poll-token-SECRET"


async def test_a_replaced_database_fails_readiness_and_liveness_without_any_webhook(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path,
        script=[{"reply": "ok"}],
        channels={"hooks": hook_channel("http://127.0.0.1:9/hook")},
        serve={"drain_timeout_s": 2},
    )
    async with serving(config) as served, httpx.AsyncClient(base_url=served.url) as client:
        assert (await client.get("/readyz")).status_code == 200
        database = tmp_path / "hostkit.db"
        await anyio.to_thread.run_sync(shutil.copyfile, database, tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", database)

        async def not_ready() -> bool:
            return (await client.get("/readyz")).status_code == 503

        await eventually(not_ready, what="/readyz answering 503", timeout_s=15)
        ready = await client.get("/readyz")
        health = await client.get("/healthz")
    assert ready.json()["checks"]["store"] == "replaced"
    assert health.status_code == 503
    assert health.json() == {"status": "failing", "store": "replaced"}


async def test_failing_claims_make_a_serve_unready_until_a_store_call_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    async with (
        open_host(tmp_path, model) as host,
        host.serve(port=0) as daemon,
        httpx.AsyncClient() as client,
    ):
        url = f"{daemon.url}/readyz"
        assert (await client.get(url)).status_code == 200
        inbox_claim, delivery_claim = host.inbox.claim_batch, daemon.delivery.store.claim
        monkeypatch.setattr(
            host.inbox, "claim_batch", FailingClaims(inbox_claim, KEEPS_FAILING, "error")
        )
        monkeypatch.setattr(
            daemon.delivery.store, "claim", FailingClaims(delivery_claim, KEEPS_FAILING, "")
        )
        daemon.worker.wake()
        daemon.delivery.wake()

        async def answers(status: int) -> bool:
            return (await client.get(url)).status_code == status

        await eventually(lambda: answers(503), what="/readyz answering 503", timeout_s=10)
        assert (await client.get(url)).json()["checks"]["store"] == "failing"
        monkeypatch.setattr(host.inbox, "claim_batch", inbox_claim)
        monkeypatch.setattr(daemon.delivery.store, "claim", delivery_claim)
        await eventually(lambda: answers(200), what="/readyz answering 200", timeout_s=10)


async def test_dead_claim_sweeps_that_keep_failing_are_logged_once_per_streak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    caplog.set_level(logging.INFO)

    async def locked(*args: object, **kwargs: object) -> int:
        raise StoreError("database is locked", retryable=True)

    async with open_host(tmp_path, model) as host:
        health = StoreHealth()
        inbox = ChannelInbox.on_store(host.store)
        worker = host.inbox_worker(inbox=inbox, store_health=health)
        runtime = host.delivery_runtime(store_health=health)
        real = inbox.recover_dead_claims
        monkeypatch.setattr(inbox, "recover_dead_claims", locked)
        monkeypatch.setattr("hostkit.delivery._runtime.expire_dead_claims", locked)
        for _ in range(5):
            await worker._recover_dead_claims()
            await runtime._recover_dead_claims()
        assert health.state == "failing"
        monkeypatch.setattr(inbox, "recover_dead_claims", real)
        await worker._recover_dead_claims()
    lines = [r.getMessage() for r in caplog.records if "dead owners" in r.getMessage()]
    assert lines == [
        "recovering dead owners' inbox claims failed: database is locked",
        "recovering dead owners' delivery claims failed: database is locked",
        "recovering dead owners' inbox claims works again",
    ]


async def test_a_poller_whose_accepts_fail_reports_the_store_failing(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A polling-only deployment has no webhook accept to notice a failing store."""
    inbox = ChannelInbox.on_store(store)
    health = StoreHealth()
    real = inbox.accept_batch

    async def full(*args: object, **kwargs: object) -> object:
        raise StoreError("database or disk is full", retryable=True)

    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "one"))
        config = ChannelConfig(
            kind="telegram",
            inbound="polling",
            token_env="TG_TOKEN",
            api_base=telegram.api_base,
            poll_timeout_s=0,
            allow=["*"],
        )
        poller = TelegramPoller("tg-poll", config, inbox, token=TOKEN, store_health=health)
        monkeypatch.setattr(inbox, "accept_batch", full)
        with pytest.raises(StoreError):
            await poller.poll_once()
        assert health.state == "failing"
        monkeypatch.setattr(inbox, "accept_batch", real)
        assert await poller.poll_once() == 1
        assert health.state is None
