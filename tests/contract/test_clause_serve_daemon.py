"""Serve clause: a Host's daemon serves signed webhooks into turns, and drains on shutdown.

``host.serve()`` reads its secrets from the environment it is given before
anything starts (a missing variable is a ``ConfigError`` naming it), binds
its listener (an address it cannot bind is a ``ConfigError``), and runs the
webhook server and the inbox worker under one supervisor on the caller's
loop, with delivery of the answers. ``/healthz`` answers while the process
serves; ``/readyz`` is 200 only while every daemon runs. A shutdown first
refuses new webhooks (503 with ``Retry-After``) and turns readiness 503,
then lets the turn in flight finish (its inbound is completed, not
released), and delivery sends that turn's answer before the daemon ends.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hostkit.channels import MIN_SIGNING_SECRET, ingress_app, sign_webhook
from hostkit.cli import _serve as cli_serve
from hostkit.errors import ConfigError, ProviderError
from hostkit.host import Host, HostDaemon, parse_config
from hostkit.inbox import _admission as admission_module
from hostkit.inbox._admission import RECHECK_S
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import InboundEnvelope, InboundFailure, InboundResult, ModelRequest
from tests.contract._daemons import Changes
from tests.contract._delivery_hosts import configured_channels
from tests.loop_imports import run_fresh
from tests.platforms import WebhookReceiver
from tests.support import SteppedMonotonic

pytestmark = pytest.mark.anyio

SECRET = "hook-secret-Vb7-3c2d"
ENV = {"HOOK_SECRET": SECRET}


def _config(
    tmp_path: Path, deliver_url: str, *, serve: dict[str, Any] | None = None, **hooks: Any
) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "policy": {"allow": ["*"]}}},
            "channels": {
                "hooks": {
                    "kind": "webhook",
                    "secret_env": "HOOK_SECRET",
                    "deliver_url": deliver_url,
                    **hooks,
                }
            },
            "serve": {"port": 0, "drain_timeout_s": 10, **(serve or {})},
        },
        base_dir=tmp_path,
    )


class SlowModel:
    """Answers "echo: <text>"; a message "slow" waits until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        text = next(m.content for m in reversed(request.messages) if m.role == "user")
        if text == "slow":
            self.entered.set()
            await self.opened.wait()
        return Reply(f"echo: {text}")


@asynccontextmanager
async def serving(
    tmp_path: Path,
    model: SlowModel | OutageModel,
    changes: Changes | None = None,
    serve: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Host, HostDaemon, WebhookReceiver]]:
    async with WebhookReceiver.running(secret=SECRET) as receiver:
        config = _config(tmp_path, receiver.deliver_url, serve=serve)
        caps = dataclasses.replace(
            capabilities(ScriptedModel([model], repeat_last=True)),
            channels=await configured_channels(config, ENV),
        )
        async with (
            Host.open(config, capabilities=caps) as host,
            host.serve(env=ENV, on_change=changes) as daemon,
        ):
            yield host, daemon, receiver


def _signed(event_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": event_id, "sender": "u1", "conversation": "room", "text": text}
    ).encode()
    headers = sign_webhook(SECRET, body, timestamp=int(time.time()))
    return body, {**headers, "content-type": "application/json"}


async def _state(host: Host, inbound_id: str, want: str) -> None:
    with anyio.fail_after(10):
        while True:
            record = await host.inbox.record(inbound_id)
            assert record is not None
            if record.state == want:
                return
            await anyio.sleep(0.02)


async def _delivered(host: Host, count: int) -> None:
    with anyio.fail_after(10):
        for _ in range(1_000):
            if (await host.store.delivery.counts()).delivered >= count:
                return
            await anyio.sleep(0.02)


async def test_a_signed_webhook_becomes_a_turn_and_health_answers(tmp_path: Path) -> None:
    async with serving(tmp_path, SlowModel()) as (host, daemon, receiver):
        assert daemon.url is not None
        assert daemon.url.startswith("http://127.0.0.1:")
        assert not daemon.url.endswith(":0")
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["checks"] == {
                "delivery": "running",
                "inbox": "running",
                "retention": "running",
                "webhooks": "running",
            }
            body, headers = _signed("evt-1", "hello")
            accepted = await client.post("/channels/hooks", content=body, headers=headers)
            assert accepted.status_code == 200
            assert accepted.json()["status"] == "accepted"
            inbound_id = accepted.json()["inbound_id"]
            await _state(host, inbound_id, "completed")
            await _delivered(host, 1)
            assert [body["text"] for body in receiver.bodies()] == ["echo: hello"]
            status = await daemon.status()
            assert (status.queued, status.running, status.dead_letters, status.troubled) == (
                0,
                0,
                0,
                0,
            )
            assert status.delivered == 1
            assert status.listening == daemon.url
            assert status.ready
        exit_ = await daemon.shutdown(reason="test")
    assert (exit_.code, exit_.cut) == (0, ())
    assert [d.state for d in daemon.statuses()] == ["stopped"] * 4


async def test_a_full_inbox_answers_503_with_retry_after_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back-pressure: past [serve] inbox_max_queued a new webhook is not acknowledged, so
    the platform resends it later; a resent one already stored is still answered 200.
    Readiness is 503 while the inbox refuses (a load balancer sends the next ones to
    another Host), liveness is not (a restart cannot make room), and readiness comes back
    once the workers drained the backlog."""
    clock = SteppedMonotonic()
    monkeypatch.setattr(admission_module, "time", clock)
    model = SlowModel()
    async with serving(tmp_path, model, serve={"inbox_max_queued": 1}) as (host, daemon, _):
        assert daemon.url is not None
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            body, headers = _signed("evt-1", "slow")
            first = await client.post("/channels/hooks", content=body, headers=headers)
            assert first.json()["status"] == "accepted"
            with anyio.fail_after(10):
                await model.entered.wait()  # claimed: still queued
            for event in ("evt-2", "evt-3"):
                body2, headers2 = _signed(event, "later")
                full = await client.post("/channels/hooks", content=body2, headers=headers2)
                assert full.status_code == 503
                assert full.headers["retry-after"] == "5"
                assert "full" in full.json()["error"]
            again = await client.post("/channels/hooks", content=body, headers=headers)
            assert (again.status_code, again.json()["status"]) == (200, "duplicate")
            not_ready = await client.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json()["status"] == "not ready"
            assert not_ready.json()["checks"]["admission"] == "inbox full: 1 queued (max 1)"
            assert not_ready.json()["checks"]["inbox"] == "running"
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            model.opened.set()
            await _state(host, first.json()["inbound_id"], "completed")
            clock.advance(RECHECK_S)
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()["status"]) == (200, "ready")
            assert "admission" not in ready.json()["checks"]
            resent = await client.post("/channels/hooks", content=body2, headers=headers2)
            assert resent.json()["status"] == "accepted"
        keys = sorted(r.platform_event_key for r in await host.inbox.records())
        assert keys == ["evt-1", "evt-3"]
    refused = [r for r in caplog.records if "accepting inbound events failed" in r.getMessage()]
    assert len(refused) == 1
    assert "inbox_max_queued" in refused[0].getMessage()


async def test_a_reload_of_a_channels_allow_list_and_secret_counts_at_the_next_webhook(
    tmp_path: Path,
) -> None:
    """A revoked sender, or a rotated secret, must not keep working until a restart: the
    webhook route reads the applied generation's settings (the routes stay the start's)."""
    rotated = "hook-secret-rotated-9Qz-7"
    env = {**ENV, "HOOK_SECRET_2": rotated}
    async with WebhookReceiver.running(secret=SECRET) as receiver:
        config = _config(tmp_path, receiver.deliver_url)
        caps = dataclasses.replace(
            capabilities(ScriptedModel([SlowModel()], repeat_last=True)),
            channels=await configured_channels(config, env),
        )
        async with Host.open(config, capabilities=caps) as host, host.serve(env=env) as daemon:
            assert daemon.url is not None
            async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:

                async def post(event: str, sender: str, secret: str) -> int:
                    body = json.dumps(
                        {"event_id": event, "sender": sender, "conversation": "r", "text": "hi"}
                    ).encode()
                    headers = sign_webhook(secret, body, timestamp=int(time.time()))
                    answer = await client.post(
                        "/channels/hooks",
                        content=body,
                        headers={**headers, "content-type": "application/json"},
                    )
                    return answer.status_code

                assert await post("e1", "mallory", SECRET) == 200
                changed = _config(
                    tmp_path, receiver.deliver_url, secret_env="HOOK_SECRET_2", allow=["alice"]
                )
                await host.apply_config(changed)
                assert await post("e2", "alice", SECRET) == 401  # the old secret is gone
                assert await post("e3", "mallory", rotated) == 403  # mallory is revoked
                assert await post("e4", "alice", rotated) == 200
                # A channel that takes no more webhooks closes its route: nothing is stored.
                await host.apply_config(
                    _config(tmp_path, receiver.deliver_url, inbound="none", allow=["*"])
                )
                assert await post("e5", "alice", rotated) == 404
                assert await post("e6", "mallory", SECRET) == 404
            await daemon.shutdown(reason="test")


async def test_shutdown_refuses_new_webhooks_and_drains_the_turn_in_flight(
    tmp_path: Path,
) -> None:
    model = SlowModel()
    changes = Changes()
    async with serving(tmp_path, model, changes) as (host, daemon, receiver):
        assert daemon.url is not None
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            body, headers = _signed("evt-slow", "slow")
            accepted = await client.post("/channels/hooks", content=body, headers=headers)
            inbound_id = accepted.json()["inbound_id"]
            with anyio.fail_after(10):
                await model.entered.wait()
            daemon.request_shutdown(reason="SIGTERM")
            await changes.wait_for("webhooks", "stopping")
            # Draining: the listener still answers, readiness is 503, webhooks are refused.
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 503
            body, headers = _signed("evt-late", "late")
            refused = await client.post("/channels/hooks", content=body, headers=headers)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            model.opened.set()
            assert daemon.supervisor is not None
            exit_ = await daemon.supervisor.shutdown(10)
        assert exit_.code == 0
        assert exit_.cut == ()
        # The turn in flight finished and recorded its result; nothing was accepted late.
        record = await host.inbox.record(inbound_id)
        assert record is not None
        assert record.state == "completed"
        counts = await host.inbox.counts()
        assert sum(c.ready + c.claimed for c in counts) == 0
        # Delivery stopped last and sent the drained turn's answer first.
        assert [body["text"] for body in receiver.bodies()] == ["echo: slow"]
        assert (await host.store.delivery.counts()).delivered == 1


async def test_a_missing_secret_is_a_config_error_naming_the_variable(tmp_path: Path) -> None:
    provider = ScriptedModel([Reply("hi")], repeat_last=True)
    config = _config(tmp_path, "http://127.0.0.1:9/deliver")
    async with Host.open(config, capabilities=capabilities(provider)) as host:
        with pytest.raises(ConfigError, match="HOOK_SECRET") as caught:
            host.serve(env={})
        assert caught.value.key == "channels.hooks.secret_env"
        # An empty variable is as good as none.
        with pytest.raises(ConfigError, match="HOOK_SECRET"):
            host.serve(env={"HOOK_SECRET": ""})


# One character short of MIN_SIGNING_SECRET, and one long enough; neither may be shown.
SHORT_SECRET = "Zq9-fifteen-chr"
LONG_ENOUGH = "Zq9-sixteen-chrs"


@pytest.mark.parametrize("short", ["Zq9", SHORT_SECRET])
async def test_a_signing_secret_too_short_to_resist_guessing_is_refused(
    tmp_path: Path, short: str
) -> None:
    """One signed request lets anyone try guesses at the secret offline: serving, signing
    outbound, and the ingress app all refuse one shorter than ``MIN_SIGNING_SECRET``,
    naming the variable and never showing its value."""
    assert len(SHORT_SECRET) == MIN_SIGNING_SECRET - 1 == len(LONG_ENOUGH) - 1
    provider = ScriptedModel([Reply("hi")], repeat_last=True)
    config = _config(tmp_path, "http://127.0.0.1:9/deliver")
    async with Host.open(config, capabilities=capabilities(provider)) as host:
        with pytest.raises(ConfigError) as served:
            host.serve(env={"HOOK_SECRET": short})
        host.serve(env={"HOOK_SECRET": LONG_ENOUGH})
    with pytest.raises(ConfigError) as sent:
        await configured_channels(config, {"HOOK_SECRET": short}, require=True)
    with pytest.raises(ConfigError) as app:
        ingress_app(config.channels, host.inbox, secrets={"hooks": short})
    for caught in (served, sent, app):
        said = str(caught.value)
        assert caught.value.key == "channels.hooks.secret_env"
        assert f"holds {len(short)} characters" in said
        assert f"at least {MIN_SIGNING_SECRET}" in said
        assert short not in said
        assert len(said) <= 300
    assert "HOOK_SECRET" in str(served.value)
    assert "HOOK_SECRET" in str(sent.value)


async def test_an_address_it_cannot_bind_is_a_config_error(tmp_path: Path) -> None:
    provider = ScriptedModel([Reply("hi")], repeat_last=True)
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        config = _config(tmp_path, "http://127.0.0.1:9/deliver")
        async with Host.open(config, capabilities=capabilities(provider)) as host:
            daemon = host.serve(env=ENV, port=port)
            with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
                await daemon.run()
            assert daemon.supervisor is None
    finally:
        taken.close()


# Run in a fresh interpreter (tests/loop_imports.py): what serving imported on the loop,
# and which of the stack was loaded once the daemon was made and once it served.
FRESH_SERVE = """
import json, sys
import anyio
from blockbuster import blockbuster_ctx
from hostkit.host import Host, parse_config
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests.loop_imports import imports_on_the_loop

STACK = ("uvicorn", "starlette", "httpx")

async def main(root):
    config = parse_config({
        "host": {"database": root + "/hostkit.db", "workspace": root},
        "providers": {"test": {"kind": "scripted"}},
        "agents": {"assistant": {"provider": "test"}},
        "channels": {"hooks": {"kind": "webhook", "secret_env": "HOOK_SECRET"}},
        "serve": {"port": 0},
    }, base_dir=root)
    model = ScriptedModel([Reply("hi")], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model)) as host:
        with imports_on_the_loop() as on_loop, blockbuster_ctx("hostkit"):
            daemon = host.serve(env={"HOOK_SECRET": "s" * 32})
            made = [name for name in STACK if name in sys.modules]
            async with daemon:
                listening = daemon.url is not None
            served = [name for name in STACK if name in sys.modules]
    print(json.dumps({"made": made, "served": served, "listening": listening,
                      "on_loop": sorted(set(on_loop))}))

anyio.run(main, sys.argv[1])
"""


async def test_serving_loads_its_stack_off_the_event_loop(tmp_path: Path) -> None:
    """``host.serve()`` on a notebook's loop: uvicorn, Starlette and httpx load when the
    daemon binds, on a worker thread, so no import of theirs blocks the loop."""
    found = await run_fresh(FRESH_SERVE, str(tmp_path))
    assert found["made"] == []
    assert found["listening"] is True
    assert found["served"] == ["uvicorn", "starlette", "httpx"]
    on_loop = {name.partition(".")[0] for name in found["on_loop"]}
    assert not on_loop & {"uvicorn", "starlette", "httpx", "httpcore", "h11"}, on_loop


async def test_a_sender_revoked_by_a_reload_is_not_answered_for_messages_already_taken_in(
    tmp_path: Path,
) -> None:
    """The transport checks the allow list when a message arrives; one taken in before a
    reload revoked its sender (queued behind others, or by a poller that keeps the list
    it started with) is refused when it is handled: dead-lettered, no turn, no answer."""
    model = ScriptedModel([Reply("answered")], repeat_last=True)
    async with WebhookReceiver.running(secret=SECRET) as receiver:
        config = _config(tmp_path, receiver.deliver_url)
        caps = dataclasses.replace(
            capabilities(model), channels=await configured_channels(config, ENV)
        )
        async with Host.open(config, capabilities=caps) as host:

            async def accept(event: str, sender: str, text: str) -> str:
                receipt = await host.inbox.accept(
                    InboundEnvelope(
                        channel_instance_id="hooks",
                        platform_event_key=event,
                        conversation_key=f"room-{sender}",
                        principal_key=sender,
                        authenticated_by="hmac",
                        received_at=time.time(),
                        payload=text,
                    )
                )
                return receipt.inbound_id

            mallory = await accept("e1", "mallory", "hi")
            command = await accept("e2", "mallory", "approve ABCDEF")
            alice = await accept("e3", "alice", "hi")
            await host.apply_config(_config(tmp_path, receiver.deliver_url, allow=["alice"]))
            assert await host.inbox_worker().drain() == 3
            for refused in (mallory, command):
                record = await host.inbox.record(refused)
                assert record is not None
                assert (record.state, record.failure_code) == ("dead_lettered", "principal_refused")
                assert "mallory" in record.failure_message
            record = await host.inbox.record(alice)
            assert record is not None
            assert record.state == "completed"
            assert [m.content for r in model.requests for m in r.messages if m.role == "user"] == [
                "hi"
            ]


async def test_the_status_reads_its_figures_from_indexes_whatever_the_history(
    tmp_path: Path,
) -> None:
    """The status line polls every half second on the Host's one reader: its figures come
    from the partial indexes of ready and dead-lettered rows, never from a scan of the
    completed inbounds and delivered answers that pile up for as long as the Host serves."""
    config = _config(tmp_path, "http://127.0.0.1:9/deliver")
    async with Host.open(config, capabilities=capabilities(ScriptedModel([Reply("hi")]))) as host:
        daemon = host.serve(env=ENV)
        inbox = host.inbox
        await inbox.accept_batch([_envelope(f"evt-{n}") for n in range(6)])
        first, second, third = await inbox.claim_batch(3)
        await inbox.complete(first, InboundResult("ignored"))
        await inbox.complete(second, InboundResult("ignored"))
        await inbox.fail(third, InboundFailure("permanent", "unparseable"))
        await host.store.write(_outbox_rows)
        await host.store.write(lambda conn: conn.execute("ANALYZE"))

        statements: list[str] = []
        await host.store.read(lambda conn: conn.set_trace_callback(statements.append))
        try:
            status = await daemon.status()
        finally:
            await host.store.read(lambda conn: conn.set_trace_callback(None))
        # 3 accepted and never claimed; an inbound and an answer given up on.
        assert (status.queued, status.dead_letters) == (3, 2)
        queries = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
        assert queries, statements

        def plans(conn: Any) -> list[str]:
            return [
                str(row[3])
                for sql in queries
                for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
            ]

        lines = await host.store.read(plans)
    # Each table is read through one of those indexes, or not at all.
    walks = [line for line in lines if line.startswith(("SCAN", "SEARCH"))]
    assert walks, lines
    for line in walks:
        assert line == "SCAN CONSTANT ROW" or _STATUS_INDEX.search(line), lines
    assert not any("TEMP B-TREE" in line for line in lines), lines


_STATUS_INDEX = re.compile(r" USING (COVERING )?INDEX (inbox_due|inbox_dead|outbox_dead)\b")


def _envelope(key: str) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id="webhook.hooks",
        platform_event_key=key,
        conversation_key=f"room-{key}",
        principal_key="u1",
        authenticated_by="hmac",
        received_at=time.time(),
        payload="hello",
    )


def _outbox_rows(conn: Any) -> None:
    """Delivered answers (the history a status must not read) and one dead letter."""
    for n, status in enumerate(["delivered"] * 40 + ["dead_lettered"]):
        conn.execute(
            "INSERT INTO outbox (intent_id, inbound_id, session_id, route, payload, status, "
            "created_at, updated_at) VALUES (?, ?, 'ses_x', '{}', '{}', ?, "
            "'2026-01-01T00:00:00.000Z', 1.0)",
            [f"out_{n}", f"inb_{n}", status],
        )


class OutageModel:
    """Fails every call like a provider in an outage (HTTP 529) while ``down``, else echoes;
    ``retryable``: as one that could not be reached after the adapter's retries."""

    def __init__(self, *, retryable: bool = False) -> None:
        self.down = True
        self.retryable = retryable

    async def __call__(self, request: ModelRequest) -> Reply:
        if self.down:
            raise ProviderError(
                "HTTP 529: overloaded", provider="test", status=529, retryable=self.retryable
            )
        return Reply("echo: back")


async def test_a_provider_outage_shows_in_the_status_and_readiness_but_keeps_it_ready(
    tmp_path: Path,
) -> None:
    """Every turn failing (its sender told so: delivered) is counted with the last reason,
    in the status line and in /readyz's checks, which stay 200 (an outage fails every Host
    alike); once answers succeed again the "failing" goes, the count stays."""
    model = OutageModel()
    async with serving(tmp_path, model) as (host, daemon, _):
        assert daemon.url is not None
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            for n in range(3):
                body, headers = _signed(f"evt-{n}", "hello")
                accepted = await client.post("/channels/hooks", content=body, headers=headers)
                await _state(host, accepted.json()["inbound_id"], "completed")
            status = await daemon.status()
            assert (status.turns.failed, status.turns.recent_failed, status.turns.recent) == (
                3,
                3,
                3,
            )
            assert status.turns.failing
            assert (
                status.turns.last_failure == "failed: provider failed: test: HTTP 529: overloaded"
            )
            line = cli_serve.status_text(status, width=300)
            assert "· failed 3 (last: failed: provider failed: test: HTTP 529" in line.plain
            styles = {line.plain[s.start : s.end]: str(s.style) for s in line.spans}
            assert any(k.startswith("failed 3") and v == "bold red" for k, v in styles.items())
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()["status"]) == (200, "ready")
            assert ready.json()["checks"]["turns"] == (
                "failing: 3 of the last 3 turns, last: failed: provider failed: test: "
                "HTTP 529: overloaded"
            )
            model.down = False
            body, headers = _signed("evt-back", "hello")
            accepted = await client.post("/channels/hooks", content=body, headers=headers)
            await _state(host, accepted.json()["inbound_id"], "completed")
            status = await daemon.status()
            assert (status.turns.failed, status.turns.failing) == (3, False)
            line = cli_serve.status_text(status, width=300)
            assert "dead letters 0 · failed 3  " in line.plain  # no "(last: ...)"
            styles = {line.plain[s.start : s.end]: str(s.style) for s in line.spans}
            assert styles["failed 3"] == "bold yellow"
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["checks"]["turns"].startswith("answering: 3 of the last 4 turns")


async def test_an_unreachable_provider_defers_the_backlog_and_shows_in_readiness(
    tmp_path: Path,
) -> None:
    """A provider that cannot be reached (a retryable failure after the adapter's retries):
    the message that found it ends with the notice, the one behind it waits unspent while
    /readyz names the agent under ``checks["providers"]`` and stays 200; once the provider
    is back the waiting message is answered and the check goes."""
    model = OutageModel(retryable=True)
    async with serving(tmp_path, model) as (host, daemon, _):
        assert daemon.url is not None
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            body, headers = _signed("evt-first", "hello")
            first = (await client.post("/channels/hooks", content=body, headers=headers)).json()
            await _state(host, first["inbound_id"], "completed")
            body, headers = _signed("evt-waits", "hello")
            waits = (await client.post("/channels/hooks", content=body, headers=headers)).json()
            with anyio.fail_after(10):
                while True:
                    record = await host.inbox.record(waits["inbound_id"])
                    assert record is not None
                    # Deferred: given back (a claim's due time is its lease's end).
                    if record.state == "ready" and (record.due_at or 0.0) > time.time():
                        break
                    await anyio.sleep(0.02)
            assert (record.state, record.attempt) == ("ready", 0)
            ready = await client.get("/readyz")
            assert (ready.status_code, ready.json()["status"]) == (200, "ready")
            check = ready.json()["checks"]["providers"]["assistant"]
            assert check.startswith("model provider unreachable for "), check
            assert check.endswith("provider failed: test: HTTP 529: overloaded"), check
            model.down = False
            await _state(host, waits["inbound_id"], "completed")
            assert "providers" not in (await client.get("/readyz")).json()["checks"]
