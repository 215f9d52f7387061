"""The generic webhook signature (same scheme as hostkit.channels' inbound webhooks).

Temporary: replaced by ``hostkit.channels.sign_webhook`` once that lands.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["sign_webhook"]


def sign_webhook(secret: str, body: bytes, *, timestamp: int) -> dict[str, str]:
    """``X-Hostkit-Timestamp`` and ``X-Hostkit-Signature`` (sha256= hex HMAC of ``ts.body``)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {
        "X-Hostkit-Timestamp": str(timestamp),
        "X-Hostkit-Signature": f"sha256={mac.hexdigest()}",
    }
