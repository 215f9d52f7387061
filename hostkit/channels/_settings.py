"""What a transport reads of a channel's configuration.

``hostkit.host.ChannelConfig`` (a ``[channels.<id>]`` table) satisfies this
protocol; transports name the protocol rather than the class because
``hostkit.channels`` sits below ``hostkit.host`` in the layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["MIN_SIGNING_SECRET", "ChannelSettings", "sender_allowed", "short_secret"]

# The shortest signing secret (webhook HMAC key, Telegram secret_token) a channel takes:
# one signed request lets anyone try guesses offline; 16 random characters is 96+ bits.
MIN_SIGNING_SECRET = 16


class ChannelSettings(Protocol):
    """The read-only fields of one channel instance that inbound transports use."""

    @property
    def kind(self) -> str: ...
    @property
    def inbound(self) -> str: ...
    @property
    def allow(self) -> Sequence[str]: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def replay_window_s(self) -> float: ...
    @property
    def poll_timeout_s(self) -> float: ...
    @property
    def poll_backoff_s(self) -> float: ...
    @property
    def api_origin(self) -> str | None: ...


def sender_allowed(config: ChannelSettings, principal_key: str) -> bool:
    """True when the allowlist lets this authenticated sender in ("*" lets everyone)."""
    return "*" in config.allow or principal_key in config.allow


def short_secret(secret: str) -> str | None:
    """Why ``secret`` may not sign a channel's requests (too short), or None."""
    if len(secret) >= MIN_SIGNING_SECRET:
        return None
    return (
        f"holds {len(secret)} characters: a signing secret needs at least "
        f"{MIN_SIGNING_SECRET} (a random one: openssl rand -hex 32)"
    )
