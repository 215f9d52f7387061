"""The inbound webhook app: one POST route per configured channel, health and readiness.

Every refusal (413, 401, 403, 400) happens before ``ChannelInbox.accept``, so
a refused request writes no row. What the headers alone can refuse (a
missing or wrong Telegram token, a Slack or webhook request without a fresh
timestamp or a signature) is refused before the body is read, and the bodies
read at once are held to a shared budget (then 503): a sender without the
secret cannot make the server hold memory. A 200 is sent only after the accept's
transaction committed (``accepted``) or found the event already stored
(``duplicate``): the platform may forget the event once it has our 200. A
store failure or a slow store answers 503, so the platform retries and dedup
absorbs any accept that did commit after all. An authenticated Slack or
Telegram event from a sender outside ``allow`` is answered 200 ``ignored``
and not stored: those platforms retry anything else (the generic webhook,
whose caller reads the status, gets 403).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hostkit._store_health import StoreHealth
from hostkit._streaks import FailureStreak
from hostkit.channels._body import BODY_BUDGET_BYTES, BodyBudget, BodyShare, read_body
from hostkit.channels._parsed import Challenge, HeaderCheck, Ignored, Parsed
from hostkit.channels._settings import ChannelSettings, sender_allowed, short_secret
from hostkit.channels._slack import check_slack_headers, parse_slack
from hostkit.channels._telegram import check_telegram_headers, parse_telegram
from hostkit.channels._webhook import check_webhook_headers, parse_webhook
from hostkit.errors import (
    ChannelRefused,
    ConfigError,
    HostkitError,
    InboxFull,
    InvalidValue,
    bounded,
)
from hostkit.inbox import ChannelInbox
from hostkit.types import InboundEnvelope, is_count, is_seconds

__all__ = ["ingress_app"]

_log = logging.getLogger("hostkit.channels")
_MAX_ERROR = 200


class _Parse(Protocol):
    def __call__(
        self,
        body: bytes,
        headers: Mapping[str, str],
        *,
        channel_id: str,
        config: ChannelSettings,
        secret: str,
        now: float,
    ) -> Parsed: ...


@dataclass(frozen=True, slots=True)
class _Format:
    """A webhook format: what its headers alone refuse (before the body is read), then
    the verify+parse of the whole request."""

    check_headers: HeaderCheck
    parse: _Parse


_FORMATS: dict[str, _Format] = {
    "webhook": _Format(check_webhook_headers, parse_webhook),
    "slack": _Format(check_slack_headers, parse_slack),
    "telegram": _Format(check_telegram_headers, parse_telegram),
}

Readiness = Callable[[], tuple[bool, Mapping[str, Any]]]


# What a 503 asks the sender to wait before it retries (``Retry-After``, seconds): a
# platform or client that honours it spaces its retries instead of hammering a Host
# whose store is failing or that is shutting down.
RETRY_AFTER_S = 5


def _error(status: int, text: str, *, retry_after: float = RETRY_AFTER_S) -> JSONResponse:
    headers = {"Retry-After": str(math.ceil(retry_after))} if status == 503 else None
    return JSONResponse({"error": bounded(text, _MAX_ERROR)}, status_code=status, headers=headers)


# After the inbox failed to store an event, readiness answers 503 this long: a load
# balancer sends the next ones elsewhere while every accept here would be a 503 too, and
# after it readiness is tried again (the next accept decides). Only for an ingress given no
# ``store_health``: a serve's own is failing until a store call works (its claims poll).
STORE_FAILURE_COOLDOWN_S = 10.0


# A webhook channel's settings and secret as they stand now, or None: no such route.
WebhookLookup = Callable[[str], tuple[ChannelSettings, str] | None]


@dataclass(frozen=True, slots=True)
class _Ingress:
    lookup: WebhookLookup
    inbox: ChannelInbox
    clock: Callable[[], float]
    on_accept: Callable[[], None] | None
    readiness: Readiness | None
    accept_timeout_s: float
    body_timeout_s: float
    store: StoreHealth
    bodies: BodyBudget
    # A full inbox refuses every event of a flood the same way: one line per streak.
    full: FailureStreak

    async def receive(self, request: Request) -> Response:
        channel_id = request.path_params["channel_id"]
        found = self.lookup(channel_id)
        if found is None or found[0].inbound != "webhook":
            return _error(404, "no webhook channel by that id")
        config, secret = found
        share = self.bodies.share()
        try:
            return await self._receive(request, channel_id, config, secret, share)
        finally:
            share.release()

    async def _receive(
        self,
        request: Request,
        channel_id: str,
        config: ChannelSettings,
        secret: str,
        share: BodyShare,
    ) -> Response:
        form = _FORMATS[config.kind]
        try:
            form.check_headers(request.headers, config=config, secret=secret, now=self.clock())
            body = await read_body(
                request, limit=config.max_body_bytes, timeout_s=self.body_timeout_s, share=share
            )
            parsed = form.parse(
                body,
                request.headers,
                channel_id=channel_id,
                config=config,
                secret=secret,
                now=self.clock(),
            )
            if isinstance(parsed, InboundEnvelope) and not sender_allowed(
                config, parsed.principal_key
            ):
                if config.kind == "webhook":
                    raise ChannelRefused("the sender is not allowed", status=403, code="sender")
                # A platform retries what it got no 2xx for, and Slack turns off an app
                # whose events keep failing: a member outside `allow` talking where the
                # bot is must not cost the bot its subscription. Acknowledged, not stored.
                _log.warning(
                    "channel %s ignored an event: its sender is not allowed",
                    channel_id,
                    extra={"channel": channel_id, "status": 200, "code": "sender"},
                )
                return JSONResponse({"status": "ignored"})
        except ChannelRefused as refused:
            _log.warning(
                "channel %s refused a request: %d %s",
                channel_id,
                refused.status,
                refused.code,
                extra={"channel": channel_id, "status": refused.status, "code": refused.code},
            )
            return _error(refused.status, refused.message)
        except ClientDisconnect:
            return _error(400, "the client went away")
        if isinstance(parsed, Challenge):
            return JSONResponse({"challenge": parsed.value})
        if isinstance(parsed, Ignored):
            _log.info("channel %s ignored an event: %s", channel_id, parsed.reason)
            return JSONResponse({"status": "ignored"})
        return await self._accept(channel_id, parsed)

    async def _accept(self, channel_id: str, envelope: InboundEnvelope) -> Response:
        try:
            with anyio.fail_after(self.accept_timeout_s):
                receipt = await self.inbox.accept(envelope)
        except InboxFull as exc:
            # Back-pressure, not a store failure: the sender retries once workers made room.
            self.full.failed(exc.message)
            text = "the inbox is full" if exc.reason == "backlog" else "the server's disk is full"
            return _error(503, f"{text}; retry later", retry_after=exc.retry_after)
        except InvalidValue as exc:
            _log.warning("channel %s: the inbox refused an event: %s", channel_id, exc.message)
            return _error(400, "the event is not a valid inbound")
        except (HostkitError, TimeoutError) as exc:
            # Not acknowledged: the platform retries, and dedup absorbs an accept
            # that committed after the deadline.
            what = exc.message if isinstance(exc, HostkitError) else "accept timed out"
            _log.error("channel %s: accept failed, answering 503: %s", channel_id, what)
            self.store.failed(exc)
            return _error(503, "the inbox is unavailable; retry later")
        self.store.worked()
        self.full.succeeded()
        if receipt.disposition == "accepted" and self.on_accept is not None:
            try:
                self.on_accept()
            except Exception as exc:
                _log.warning("channel %s: on_accept failed: %s", channel_id, type(exc).__name__)
        return JSONResponse({"inbound_id": receipt.inbound_id, "status": receipt.disposition})

    async def healthz(self, request: Request) -> Response:
        # A replaced database file ends only with a restart: liveness asks for one.
        if self.store.lasting:
            return JSONResponse({"status": "failing", "store": "replaced"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def _refusing(self) -> str | None:
        """Why the inbox refuses new events (cached by the inbox: no store read per probe
        while it takes them); a look that fails is a store failure, as an accept's."""
        try:
            with anyio.fail_after(self.accept_timeout_s):
                return await self.inbox.refusing()
        except (HostkitError, TimeoutError) as exc:
            self.store.failed(exc)
            return None

    async def readyz(self, request: Request) -> Response:
        ready = True
        details: Mapping[str, Any] = {}
        if self.readiness is not None:
            try:
                ready, details = self.readiness()
            except Exception as exc:
                _log.warning("readiness check failed: %s", type(exc).__name__)
                return JSONResponse({"status": "not ready"}, status_code=503)
        refusing = None if self.store.failing else await self._refusing()
        if (store := self.store.state) is not None:
            ready, details = False, {**details, "store": store}
        elif refusing is not None:
            # Every new event would be a 503 here until the workers make room: a load
            # balancer should send them elsewhere (liveness stays: a restart cannot help).
            ready, details = False, {**details, "admission": refusing}
        if self.readiness is None and ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": dict(details)},
            status_code=200 if ready else 503,
        )


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return _error(
        status, "not found" if status == 404 else "method not allowed" if status == 405 else "error"
    )


def ingress_app(
    channels: Mapping[str, ChannelSettings],
    inbox: ChannelInbox,
    *,
    secrets: Mapping[str, str],
    clock: Callable[[], float] = time.time,
    on_accept: Callable[[], None] | None = None,
    readiness: Readiness | None = None,
    accept_timeout_s: float = 5.0,
    body_timeout_s: float = 10.0,
    body_budget_bytes: int = BODY_BUDGET_BYTES,
    current: WebhookLookup | None = None,
    store_health: StoreHealth | None = None,
) -> Starlette:
    """The Starlette app serving ``POST /channels/<id>``, ``GET /healthz`` and ``GET /readyz``.

    ``channels`` are the ``[channels.<id>]`` tables (only ``inbound = "webhook"``
    ones get a route); ``secrets`` maps each such id to its signing secret /
    secret token (the caller read ``secret_env``). A webhook channel without a
    secret is a ``ConfigError`` here, never an open route. ``on_accept`` runs
    after each newly accepted envelope (wake the inbox worker); ``readiness``
    answers ``/readyz``, which is also 503 while ``store_health`` says the store
    fails (each accept reports to it; without one, for ``STORE_FAILURE_COOLDOWN_S``
    after an accept could not store its event) and while the inbox refuses new
    events (``ChannelInbox.refusing``: full), and ``/healthz`` is 503 once the
    database file was replaced (only a restart ends that). ``accept_timeout_s``
    bounds the store write (then 503), ``body_timeout_s`` the body upload (then
    408), ``body_budget_bytes`` the bodies held at once across channels (then
    503). ``current`` looks a channel's settings
    and secret up at each request (a daemon's applied configuration: an ``allow``
    list or a secret changed by a reload counts at once); without it, ``channels``
    and ``secrets`` are what every request reads.
    """
    for key, seconds in (
        ("accept_timeout_s", accept_timeout_s),
        ("body_timeout_s", body_timeout_s),
    ):
        # Checked here, not at the first request: a bad value would fail every request.
        if not is_seconds(seconds, high=86_400):
            raise ConfigError("must be a positive, finite number of seconds", key=key)
    if not is_count(body_budget_bytes, low=1, high=1 << 40):
        raise ConfigError("must be a positive number of bytes", key="body_budget_bytes")
    for channel_id, config in channels.items():
        if config.inbound != "webhook":
            continue
        if config.kind not in _FORMATS:
            raise ConfigError(f"unknown channel kind {config.kind!r}", key=f"channels.{channel_id}")
        if not secrets.get(channel_id) or not isinstance(secrets[channel_id], str):
            raise ConfigError(
                "a webhook channel needs its secret (secret_env is unset or empty)",
                key=f"channels.{channel_id}.secret_env",
            )
        if (problem := short_secret(secrets[channel_id])) is not None:
            raise ConfigError(f"its secret {problem}", key=f"channels.{channel_id}.secret_env")
    fixed = {cid: (config, secrets[cid]) for cid, config in channels.items() if cid in secrets}
    ingress = _Ingress(
        lookup=current if current is not None else fixed.get,
        inbox=inbox,
        clock=clock,
        on_accept=on_accept,
        readiness=readiness,
        accept_timeout_s=accept_timeout_s,
        body_timeout_s=body_timeout_s,
        store=StoreHealth(cooldown_s=STORE_FAILURE_COOLDOWN_S)
        if store_health is None
        else store_health,
        bodies=BodyBudget(body_budget_bytes),
        full=FailureStreak(_log, "accepting inbound events"),
    )
    return Starlette(
        routes=[
            Route("/channels/{channel_id}", ingress.receive, methods=["POST"]),
            Route("/healthz", ingress.healthz, methods=["GET"]),
            Route("/readyz", ingress.readyz, methods=["GET"]),
        ],
        exception_handlers={404: _http_error, 405: _http_error},
    )
