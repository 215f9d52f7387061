"""Clause: every refusal happens before accept, writes no row, and leaks nothing.

Parametrised over the three webhook formats: a missing or wrong signature, a
signature over another body, a stale or replayed timestamp and a wrong secret
token are 401; a sender not allowlisted 403 (the webhook kind; Slack and Telegram
acknowledge and drop it: they retry anything else); an unparsable body or shape
400; a body over the limit 413, also when it streams without a
Content-Length (refused once the limit passes, before the body ends). Error
bodies and log lines are short and never hold the secret or the body.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from hostkit.channels import sign_slack, sign_webhook
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from tests.ingress import NOW, SECRETS, channels, serve_ingress, to_json
from tests.platforms import telegram_message

pytestmark = pytest.mark.anyio

MARKER = "BODY-MARKER-q81"
Request = tuple[str, bytes, dict[str, str]]


def _webhook(sign: Callable[[bytes], dict[str, str]] | None = None, **fields: Any) -> Request:
    body = to_json(
        {"event_id": "e1", "sender": "u-1", "conversation": "c", "text": MARKER, **fields}
    )
    headers = sign(body) if sign else sign_webhook(SECRETS["hooks"], body, timestamp=NOW)
    return "hooks", body, headers


def _slack(secret: str = SECRETS["slack-acme"], *, ts: int = NOW, user: str = "U42") -> Request:
    event = {"type": "message", "channel": "C1", "user": user, "text": MARKER}
    body = to_json({"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": event})
    return "slack-acme", body, {**sign_slack(secret, body, timestamp=ts)}


def _telegram(token: str | None = SECRETS["tg"], update: dict[str, Any] | None = None) -> Request:
    body = to_json(update or {"update_id": 1, **telegram_message(5, 9, MARKER)})
    headers = {} if token is None else {"X-Telegram-Bot-Api-Secret-Token": token}
    return "tg", body, headers


def _other_body(body: bytes) -> dict[str, str]:
    return sign_webhook(SECRETS["hooks"], body.replace(b"u-1", b"u-2"), timestamp=NOW)


REFUSALS: dict[str, tuple[Request, int]] = {
    "webhook-unsigned": (_webhook(lambda body: {}), 401),
    "webhook-no-signature": (_webhook(lambda body: {"X-Hostkit-Timestamp": str(NOW)}), 401),
    "webhook-wrong-secret": (
        _webhook(lambda body: sign_webhook("guessed", body, timestamp=NOW)),
        401,
    ),
    "webhook-signature-over-another-body": (_webhook(_other_body), 401),
    "webhook-stale": (
        _webhook(lambda body: sign_webhook(SECRETS["hooks"], body, timestamp=NOW - 301)),
        401,
    ),
    "webhook-future": (
        _webhook(lambda body: sign_webhook(SECRETS["hooks"], body, timestamp=NOW + 301)),
        401,
    ),
    "webhook-timestamp-not-seconds": (
        _webhook(
            lambda body: {
                **sign_webhook(SECRETS["hooks"], body, timestamp=NOW),
                "X-Hostkit-Timestamp": "1e9",
            }
        ),
        401,
    ),
    "webhook-sender-not-allowed": (_webhook(sender="intruder"), 403),
    "webhook-sender-with-separator": (_webhook(sender="u:1"), 400),
    "webhook-missing-text": (_webhook(text=None), 400),
    "webhook-bad-kind": (_webhook(kind="admin"), 400),
    "webhook-not-json": (
        (
            "hooks",
            b"not json " + MARKER.encode(),
            sign_webhook(SECRETS["hooks"], b"not json " + MARKER.encode(), timestamp=NOW),
        ),
        400,
    ),
    "slack-wrong-secret": (_slack("guessed"), 401),
    "slack-stale": (_slack(ts=NOW - 3600), 401),
    "slack-unsigned": (("slack-acme", _slack()[1], {}), 401),
    "telegram-no-token": (_telegram(None), 401),
    "telegram-wrong-token": (_telegram("tg-secret-Mn5"), 401),
    "telegram-bad-update-id": (_telegram(update={"update_id": "one", "message": {}}), 400),
}

CONFIGS = channels(
    hooks={"allow": ["u-1", "u-2"]},
    slack_acme={"allow": ["U42"]},
    tg={"allow": ["9"]},
)


async def test_refused_requests_write_no_row_and_answer_a_short_secret_free_error(
    store: RuntimeStore, caplog: pytest.LogCaptureFixture
) -> None:
    # One server for every case (a server per case would cost a second each).
    inbox = ChannelInbox.on_store(store)
    caplog.set_level(logging.DEBUG)
    async with (
        serve_ingress(inbox, configs=CONFIGS) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for case, ((channel, body, headers), status) in sorted(REFUSALS.items()):
            caplog.clear()
            answer = await client.post(f"/channels/{channel}", content=body, headers=headers)
            assert answer.status_code == status, case
            assert set(answer.json()) == {"error"}, case
            assert len(answer.content) <= 240, case
            for secret in SECRETS.values():
                assert secret not in answer.text, case
                assert secret not in caplog.text, case
            assert MARKER not in answer.text, case
            assert MARKER not in caplog.text, case
            assert await inbox.records() == (), case
            refusals = [r for r in caplog.records if r.name == "hostkit.channels"]
            assert [getattr(r, "status", None) for r in refusals] == [status], case


PLATFORM_SENDERS_NOT_ALLOWED = {
    "slack-user-not-allowed": _slack(user="U666"),
    "telegram-not-allowed": _telegram(update={"update_id": 1, **telegram_message(5, 666, MARKER)}),
}


async def test_a_platform_sender_not_allowed_is_acknowledged_and_dropped(
    store: RuntimeStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack and Telegram retry anything but a 2xx (and Slack turns off an app whose events
    keep failing): a signed event from someone outside `allow` gets 200 `ignored`, is
    logged, and stores nothing. The webhook kind, whose caller reads the status, gets 403."""
    inbox = ChannelInbox.on_store(store)
    caplog.set_level(logging.DEBUG)
    async with (
        serve_ingress(inbox, configs=CONFIGS) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for case, (channel, body, headers) in sorted(PLATFORM_SENDERS_NOT_ALLOWED.items()):
            caplog.clear()
            answer = await client.post(f"/channels/{channel}", content=body, headers=headers)
            assert (answer.status_code, answer.json()) == (200, {"status": "ignored"}), case
            assert MARKER not in caplog.text, case
            refusals = [r for r in caplog.records if r.name == "hostkit.channels"]
            assert [getattr(r, "code", None) for r in refusals] == ["sender"], case
        channel, body, headers = _webhook(sender="intruder")
        refused = await client.post(f"/channels/{channel}", content=body, headers=headers)
    assert refused.status_code == 403
    assert await inbox.records() == ()


async def test_a_request_replayed_after_its_window_is_refused(store: RuntimeStore) -> None:
    inbox = ChannelInbox.on_store(store)
    clock = {"now": float(NOW)}
    channel, body, headers = _webhook()
    async with (
        serve_ingress(inbox, clock=lambda: clock["now"]) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        first = await client.post(f"/channels/{channel}", content=body, headers=headers)
        clock["now"] += 301
        replayed = await client.post(f"/channels/{channel}", content=body, headers=headers)
    assert first.status_code == 200
    assert replayed.status_code == 401
    assert len(await inbox.records()) == 1


async def test_signatures_and_tokens_are_compared_in_constant_time(
    store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    inbox = ChannelInbox.on_store(store)
    async with (
        serve_ingress(inbox, configs=CONFIGS) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for channel, body, headers in (_webhook(), _slack(), _telegram()):
            answer = await client.post(f"/channels/{channel}", content=body, headers=headers)
            assert answer.status_code == 200
    given = [b for _, b in compared]
    assert (
        sign_webhook(SECRETS["hooks"], _webhook()[1], timestamp=NOW)["X-Hostkit-Signature"].encode()
        in given
    )
    assert _slack()[2]["X-Slack-Signature"].encode() in given
    assert SECRETS["tg"].encode() in given


async def _raw_request(url: str, head: str, chunks: list[bytes]) -> bytes:
    """Send a request head and body chunks over a raw socket; the response bytes so far."""
    host, port = url.removeprefix("http://").split(":")
    async with await anyio.connect_tcp(host, int(port)) as sock:
        await sock.send(head.encode())
        for chunk in chunks:
            await sock.send(chunk)
        received = b""
        with anyio.fail_after(10):
            while b"\r\n\r\n" not in received:
                received += await sock.receive()
        return received


async def test_an_oversize_body_without_length_is_refused_before_it_ends(
    store: RuntimeStore,
) -> None:
    inbox = ChannelInbox.on_store(store)
    configs = channels(hooks={"max_body_bytes": 1024})
    piece = b"x" * 512
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    # Headers a body's signature could still bear out: only the body's size refuses it.
    signed = f"X-Hostkit-Timestamp: {NOW}\r\nX-Hostkit-Signature: sha256=00\r\n"
    head = (
        "POST /channels/hooks HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"{signed}Transfer-Encoding: chunked\r\n\r\n"
    )
    async with serve_ingress(inbox, configs=configs) as url:
        # Three chunks (1,536 bytes) and never the terminating chunk: the body has not ended.
        answer = await _raw_request(url, head, [chunk, chunk, chunk])
        declared = await _raw_request(
            url,
            f"POST /channels/hooks HTTP/1.1\r\nHost: test\r\n{signed}"
            "Content-Length: 1000000000\r\n\r\n",
            [],
        )
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert declared.startswith(b"HTTP/1.1 413 ")
    assert await inbox.records() == ()


# Headers that the body's signature cannot rescue: each is refused before the body is read.
UNSIGNED_HEADS = {
    "telegram-no-token": ("tg", ""),
    "telegram-wrong-token": ("tg", "X-Telegram-Bot-Api-Secret-Token: guessed-token\r\n"),
    "slack-no-signature": ("slack-acme", f"X-Slack-Request-Timestamp: {NOW}\r\n"),
    "slack-stale": (
        "slack-acme",
        f"X-Slack-Request-Timestamp: {NOW - 3600}\r\nX-Slack-Signature: v0=00\r\n",
    ),
    "webhook-no-timestamp": ("hooks", "X-Hostkit-Signature: sha256=00\r\n"),
}


async def test_what_the_headers_refuse_is_answered_before_the_body_arrives(
    store: RuntimeStore,
) -> None:
    """A sender without the secret must not make the server wait for (and hold) its body:
    the answer comes while the declared body has not been sent at all."""
    inbox = ChannelInbox.on_store(store)
    async with serve_ingress(inbox) as url:
        for case, (channel, headers) in sorted(UNSIGNED_HEADS.items()):
            head = (
                f"POST /channels/{channel} HTTP/1.1\r\nHost: test\r\n{headers}"
                "Content-Type: application/json\r\nContent-Length: 500000\r\n\r\n"
            )
            answer = await _raw_request(url, head, [b"{"])
            assert answer.startswith(b"HTTP/1.1 401 "), case
    assert await inbox.records() == ()


async def _post_until(client: httpx.AsyncClient, status: int, request: Request) -> httpx.Response:
    """Post ``request`` until it is answered ``status`` (within 10 s); the last answer."""
    channel, body, headers = request
    with anyio.fail_after(10):
        while True:
            answer = await client.post(f"/channels/{channel}", content=body, headers=headers)
            if answer.status_code == status:
                return answer
            await anyio.sleep(0.02)


def _unsigned_head(framing: str) -> str:
    """A webhook request's head as any sender may write it (no secret), body to follow."""
    return (
        "POST /channels/hooks HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"X-Hostkit-Timestamp: {NOW}\r\nX-Hostkit-Signature: sha256=00\r\n{framing}\r\n\r\n"
    )


async def test_a_body_promised_but_not_sent_holds_none_of_the_budget(
    store: RuntimeStore,
) -> None:
    """Reserving the declared length let unsigned requests that send no byte lock every
    channel out; and a body framed chunked under a small Content-Length was charged only
    that length. Bytes are charged as they arrive, and the two framings are refused."""
    inbox = ChannelInbox.on_store(store)
    configs = channels(hooks={"max_body_bytes": 4096})
    signed = _webhook(text=f"{MARKER} {'p' * 1400}")
    promise = _unsigned_head("Content-Length: 4000")
    async with (
        serve_ingress(inbox, configs=configs, body_budget_bytes=5000) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        host, port = url.removeprefix("http://").split(":")
        async with contextlib.AsyncExitStack() as held:
            for _ in range(8):  # 32,000 bytes promised against a 5,000-byte budget
                stream = await held.enter_async_context(await anyio.connect_tcp(host, int(port)))
                await stream.send(promise.encode())
            accepted = await client.post("/channels/hooks", content=signed[1], headers=signed[2])
            assert accepted.status_code == 200, accepted.text
            async with await anyio.connect_tcp(host, int(port)) as both:
                framed_twice = _unsigned_head("Content-Length: 1\r\nTransfer-Encoding: chunked")
                await both.send(framed_twice.encode() + b"1\r\n{\r\n")
                with anyio.fail_after(10):
                    answer = await both.receive()
                assert answer.startswith(b"HTTP/1.1 400"), answer[:60]
                assert b"Content-Length and Transfer-Encoding together" in answer
    assert len(await inbox.records()) == 1


async def test_a_trickled_body_is_shed_for_one_that_arrives_and_the_budget_holds(
    store: RuntimeStore,
) -> None:
    """Slack and webhook signatures cover the body, so bodies of senders holding no secret
    are read; together they hold at most the app's budget. A sender trickling a body to
    hold that budget loses it to the next body that needs room: the trickled one is
    answered 503 with Retry-After and its share comes back, and the signed request that
    arrived whole is accepted, on this channel as on any other."""
    inbox = ChannelInbox.on_store(store)
    configs = channels(hooks={"max_body_bytes": 4096})
    padding = "p" * 1400
    signed = _webhook(text=f"{MARKER} {padding}")
    slow_head = _unsigned_head("Content-Length: 4000")
    async with (
        serve_ingress(inbox, configs=configs, body_budget_bytes=5000) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        host, port = url.removeprefix("http://").split(":")
        async with await anyio.connect_tcp(host, int(port)) as slow:
            await slow.send(slow_head.encode() + b"{" + b" " * 3800)
            await anyio.sleep(0.2)  # its 3,801 bytes are held: 1,199 are left
            accepted = await client.post("/channels/hooks", content=signed[1], headers=signed[2])
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["status"] == "accepted"
            with anyio.fail_after(10):
                shed = await slow.receive()
            assert shed.startswith(b"HTTP/1.1 503"), shed[:60]
            assert b"retry-after: 5" in shed.lower()
            assert b"arrived too slowly" in shed
        again = await _post_until(client, 200, signed)
    assert again.json()["status"] == "duplicate"
    assert len(await inbox.records()) == 1


def _streamed(chunks: anyio.abc.ObjectReceiveStream[bytes | None]) -> Any:
    """A request whose body arrives as the test sends it (None ends it)."""
    from starlette.requests import Request

    async def receive() -> dict[str, Any]:
        chunk = await chunks.receive()
        return {"type": "http.request", "body": chunk or b"", "more_body": chunk is not None}

    return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)


async def test_the_body_budget_sheds_only_what_frees_room_and_never_twice() -> None:
    """A shed body whose next chunk was already on its way does not take it (and shed
    another body in turn); a body that holds nothing yet is never shed for bytes; and past
    ``max_arriving`` bodies at once the longest-arriving one makes way, so trickled bodies
    cannot hold every connection."""
    from hostkit.channels._body import BodyBudget, read_body
    from hostkit.errors import ChannelRefused

    budget = BodyBudget(100, max_arriving=3)
    results: dict[str, str] = {}

    async def reader(name: str, chunks: anyio.abc.ObjectReceiveStream[bytes | None]) -> None:
        share = budget.share()
        try:
            await read_body(_streamed(chunks), limit=1000, timeout_s=10, share=share)
            results[name] = "read"
        except ChannelRefused as exc:
            results[name] = f"{exc.status}"
        finally:
            share.release()

    streams = {name: anyio.create_memory_object_stream[bytes | None](8) for name in "VWEXY"}
    async with anyio.create_task_group() as tg:
        for name in "VWE":
            tg.start_soon(reader, name, streams[name][1])
            await anyio.sleep(0.01)
        await streams["V"][0].send(b"v" * 60)
        await streams["W"][0].send(b"w" * 30)
        await anyio.sleep(0.01)
        # V's next chunk is on its way when a newcomer needs room: V is shed (E, which
        # holds nothing, is passed over), and V does not take its chunk afterwards.
        await streams["V"][0].send(b"v" * 50)
        newcomer = budget.share()
        newcomer.take(40)
        await anyio.sleep(0.05)
        assert results == {"V": "503"}
        assert budget.held == 70  # W's 30 and the newcomer's 40
        newcomer.release()
        # W, E and X arrive; a fourth at once: the longest-arriving (W) makes way.
        tg.start_soon(reader, "X", streams["X"][1])
        await anyio.sleep(0.01)
        assert results == {"V": "503"}
        tg.start_soon(reader, "Y", streams["Y"][1])
        await anyio.sleep(0.05)
        assert results == {"V": "503", "W": "503"}
        for name in "EXY":
            await streams[name][0].send(None)
    for send, receive in streams.values():
        send.close()
        receive.close()
    assert results == {"V": "503", "W": "503", "E": "read", "X": "read", "Y": "read"}
    assert (budget.held, budget.arriving) == (0, {})
