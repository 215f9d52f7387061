"""``[channels.<id>]`` and ``[serve]``: the platforms a Host talks on, and its daemon.

A channel table is one *channel instance*: its id is the inbox's
``channel_instance_id`` and the conversation channel of every principal it
authenticates (``slack-acme:U123``). ``kind`` picks the platform format:

- ``webhook``: generic JSON, HMAC-SHA256 over ``"<timestamp>.<body>"`` with the
  secret in ``secret_env``; outbound answers are POSTed, signed the same way, to
  ``deliver_url``.
- ``slack``: the Events API (v0 signing secret in ``secret_env``) in, and
  ``chat.postMessage`` with the bot token in ``token_env`` out.
- ``telegram``: bot webhooks (secret token header, ``secret_env``) or
  ``getUpdates`` polling (``inbound = "polling"``) in, ``sendMessage`` out, the
  bot token in ``token_env``.

Secrets are never in the file: a table names environment variables, and the
Host reads them when the channel starts (a missing one is a ``ConfigError``
naming the variable). ``api_base`` overrides the platform's API origin
(a loopback test server, an API proxy).
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal
from urllib.parse import urlsplit

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from hostkit._frozen_fields import FrozenList
from hostkit.effects import ENV_NAME_PATTERN
from hostkit.providers import MAX_URL_CHARS, http_url_problem

__all__ = [
    "DEFAULT_API_BASE",
    "MAX_CHANNELS",
    "MIN_RELOAD_INTERVAL_S",
    "ChannelConfig",
    "ChannelKind",
    "ServeSection",
]

MAX_CHANNELS = 64
MAX_ALLOW = 10_000
ChannelKind = Literal["webhook", "slack", "telegram"]
DEFAULT_API_BASE: dict[str, str] = {
    "slack": "https://slack.com/api",
    "telegram": "https://api.telegram.org",
}
_ENV_NAME = f"^{ENV_NAME_PATTERN}$"
_SENDER = re.compile(r"^[A-Za-z0-9_.:@+-]{1,128}$")


def _http_url(value: str | None, key: str, *, origin: bool = False) -> str | None:
    """``value`` checked; an ``origin`` (``api_base``, joined with "/method") loses its
    trailing '/', a ``deliver_url`` is kept exactly: "/in/" and "/in" are different
    resources to the receiver."""
    if value is None:
        return None
    # The shared check: a bad port or host is refused here, not retried as a transient
    # channel error until the delivery is dead-lettered.
    if (problem := http_url_problem(value)) is not None:
        raise ValueError(f"{key} {problem}")
    parsed = urlsplit(value)
    if parsed.username or parsed.password:
        raise ValueError(f"{key} must not carry credentials (use token_env / secret_env)")
    return value.rstrip("/") if origin else value


class _Strict(BaseModel):
    # No NaN or infinity: NaN passes every bound, and an infinite wait is no bound.
    # Frozen all the way down, as hostkit.toml's other tables (FrozenList for a list).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # freeze() keeps a configuration as it is (hostkit.freeze.DEEPLY_FROZEN).
    __hostkit_deeply_frozen__: ClassVar[bool] = True


class ChannelConfig(_Strict):
    """One channel instance: how its inbound is authenticated and where answers go."""

    kind: ChannelKind
    # The agent (core id) that answers this channel's conversations.
    agent: str = "assistant"
    # How inbound events arrive: a webhook route (/channels/<id>), getUpdates polling
    # (telegram only), or not at all (an outbound-only channel).
    inbound: Literal["webhook", "polling", "none"] = "webhook"
    # The environment variable holding the webhook signing secret / secret token.
    secret_env: str | None = Field(default=None, pattern=_ENV_NAME)
    # The environment variable holding the bot token (slack, telegram).
    token_env: str | None = Field(default=None, pattern=_ENV_NAME)
    # Platform user ids allowed to talk to the agent; "*" lets every authenticated sender.
    # Required for slack and telegram (see _senders); the webhook's default is "*".
    allow: FrozenList[str] = Field(default=None, max_length=MAX_ALLOW, validate_default=True)
    # Request bodies over this are refused with 413 before they are read in full.
    max_body_bytes: int = Field(default=1_048_576, ge=1_024, le=8 * 1_048_576)
    # Signed requests older (or newer) than this are refused as replays.
    replay_window_s: float = Field(default=300.0, gt=0, le=3_600)
    api_base: str | None = Field(default=None, max_length=MAX_URL_CHARS)
    deliver_url: str | None = Field(default=None, max_length=MAX_URL_CHARS)
    # getUpdates long-poll timeout and the pause after a failed poll.
    poll_timeout_s: float = Field(default=25.0, ge=0, le=60)
    poll_backoff_s: float = Field(default=5.0, gt=0, le=600)

    @pydantic.field_validator("allow", mode="before")
    @classmethod
    def _allow_given(cls, value: object, info: pydantic.ValidationInfo) -> object:
        if value is not None:
            return value
        kind = info.data.get("kind")
        if kind in ("slack", "telegram"):
            # Anyone can message a Telegram bot, and every member of a Slack
            # workspace can message its app: opening it to all is a choice to write down.
            raise ValueError(
                f"a {kind} channel needs allow: the platform user ids that may talk "
                'to the agent (write allow = ["*"] to allow everyone explicitly)'
            )
        # The generic webhook's sender is asserted by whoever holds the signing secret.
        return ("*",)

    @pydantic.field_validator("allow")
    @classmethod
    def _senders(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for sender in value:
            if sender != "*" and not _SENDER.fullmatch(sender):
                raise ValueError(f"allow entry {sender[:40]!r} is not a platform user id or '*'")
        return value

    @pydantic.field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str | None) -> str | None:
        return _http_url(value, "api_base", origin=True)

    @pydantic.field_validator("deliver_url")
    @classmethod
    def _deliver_url(cls, value: str | None) -> str | None:
        return _http_url(value, "deliver_url")

    @pydantic.model_validator(mode="after")
    def _complete(self) -> ChannelConfig:
        if self.inbound == "polling" and self.kind != "telegram":
            raise ValueError("inbound = 'polling' is the telegram getUpdates transport only")
        if self.inbound == "webhook" and self.secret_env is None:
            raise ValueError("a webhook channel needs secret_env (its signing secret)")
        if self.kind in ("slack", "telegram") and self.token_env is None:
            raise ValueError(f"a {self.kind} channel needs token_env (its bot token)")
        if self.kind == "webhook" and self.deliver_url is None and self.inbound == "none":
            raise ValueError("a webhook channel needs deliver_url, inbound, or both")
        if self.kind != "webhook" and self.deliver_url is not None:
            raise ValueError("deliver_url is for kind = 'webhook' (slack/telegram use api_base)")
        return self

    @property
    def delivers(self) -> bool:
        """Whether answers go out on this channel: Slack and Telegram always, the generic
        webhook only to its ``deliver_url`` (without one it only receives)."""
        return self.kind != "webhook" or self.deliver_url is not None

    @property
    def api_origin(self) -> str | None:
        """Where this channel's platform API lives (None for the generic webhook)."""
        return self.api_base or DEFAULT_API_BASE.get(self.kind)


# A shorter poll would spend the daemon's time stat-ing a file that rarely changes.
MIN_RELOAD_INTERVAL_S = 0.1


class ServeSection(_Strict):
    """``[serve]``: the daemon ``hostkit serve`` runs (docs/service.md)."""

    listen: str = Field(default="127.0.0.1", min_length=1, max_length=255)
    port: int = Field(default=8787, ge=0, le=65_535)
    # Inbound messages in flight (turns) and outbox intents in flight (sends) at once.
    inbox_concurrency: int = Field(default=4, ge=1, le=64)
    delivery_concurrency: int = Field(default=8, ge=1, le=64)
    # Back-pressure: inbound messages queued (ready or claimed) at most. Past it a new one
    # is refused (a webhook answers 503 with Retry-After; a poller keeps its cursor) until
    # the workers catch up, so a flood waits at its sender instead of filling the disk.
    inbox_max_queued: int = Field(default=10_000, ge=1, le=1_000_000)
    # And free space kept on the SQLite database's disk, so the turn results and delivery
    # records of what was accepted still fit (0: none kept; PostgreSQL: not read).
    inbox_disk_reserve_mb: int = Field(default=32, ge=0, le=1_048_576)
    # Delivery: attempts before the dead letter, and the backoff between them.
    delivery_max_attempts: int = Field(default=8, ge=1, le=100)
    delivery_backoff_s: float = Field(default=2.0, gt=0, le=3_600)
    delivery_backoff_max_s: float = Field(default=600.0, gt=0, le=86_400)
    # SIGTERM: how long turns in flight and deliveries get to finish before they are cut.
    drain_timeout_s: float = Field(default=30.0, ge=0, le=3_600)
    # How often the daemon checks hostkit.toml and each core's live ref for a change that
    # makes a new generation (docs/generations.md); 0: only SIGHUP reloads.
    reload_interval_s: float = Field(default=2.0, ge=0, le=3_600)
    # How often the "retention" daemon prunes the inbox (payloads of completed inbounds
    # after a day, dedup tombstones past the horizon; docs/inbox.md).
    retention_interval_s: float = Field(default=600.0, ge=1, le=86_400)

    @pydantic.field_validator("reload_interval_s")
    @classmethod
    def _not_a_busy_loop(cls, value: float) -> float:
        if 0 < value < MIN_RELOAD_INTERVAL_S:
            raise ValueError(f"reload_interval_s is 0 (off) or at least {MIN_RELOAD_INTERVAL_S}")
        return value
