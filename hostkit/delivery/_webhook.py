"""The generic webhook channel: answers POSTed as signed JSON to the channel's ``deliver_url``.

Body: ``{"intent_id", "conversation", "reply", "text", "approval"?}``, and
for a part of a turn's answer ``"turn_id"``, ``"part"`` (from 1), ``"parts"``
and, when the split added a fence or the withheld mark, ``"added"``
(``{"before", "after"}``), so a receiver can put the answer back together;
signed like inbound webhooks (``X-Hostkit-Timestamp`` and
``X-Hostkit-Signature``), with ``Idempotency-Key: <intent id>`` so the
receiver drops a retry of what it already has. 2xx is delivered; 408, 429
and 5xx are transient (``Retry-After`` honoured); any other status is
permanent. A webhook has no buttons, so an answer to a button press (meant
for the presser alone) is refused (``bad_payload``), never posted to the
conversation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from hostkit.channels import sign_webhook
from hostkit.delivery._channel import payload_text, permanent, reply_target, transient
from hostkit.delivery._http import SharedClient, check_channel, post, retry_after
from hostkit.freeze import thaw
from hostkit.types import PRESS_ANSWER

__all__ = ["WebhookChannel"]

# What an answer's part carries for a receiver to rebuild the answer (hostkit.types.ChatPart).
_PART_FIELDS = ("turn_id", "part", "parts", "added")

_TRANSIENT = frozenset({408, 425, 429})


class WebhookChannel:
    """POSTs signed answers to ``deliver_url``; ``secret`` never leaves this object."""

    def __init__(
        self,
        deliver_url: str,
        secret: str,
        client: httpx.AsyncClient | SharedClient,
        *,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        timeout_s = check_channel(deliver_url, secret, timeout_s)
        self.deliver_url = deliver_url
        self._secret = secret
        self._client = client
        self._timeout_s = timeout_s
        self._clock = clock

    def __repr__(self) -> str:
        return f"WebhookChannel({self.deliver_url!r})"

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        if PRESS_ANSWER in payload:
            raise permanent("bad_payload", "a webhook channel cannot answer a button press")
        reply = reply_target(route)
        if not isinstance(reply.get("conversation"), str) or not reply["conversation"]:
            raise permanent("bad_route", "the webhook reply target has no conversation")
        body: dict[str, Any] = {
            "intent_id": idempotency_key,
            "conversation": route.get("conversation"),
            "reply": thaw(reply),
            "text": payload_text(payload),
        }
        body.update({key: thaw(payload[key]) for key in _PART_FIELDS if key in payload})
        approval = payload.get("approval")
        if isinstance(approval, Mapping):
            body["approval"] = thaw(approval)
        content = json.dumps(body, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
            **sign_webhook(self._secret, content, timestamp=int(self._clock())),
        }
        answer = await post(
            self._client,
            self.deliver_url,
            content=content,
            headers=headers,
            timeout_s=self._timeout_s,
        )
        if 200 <= answer.status < 300:
            return
        if answer.status in _TRANSIENT or answer.status >= 500:
            raise transient(
                f"http_{answer.status}",
                f"the receiver answered HTTP {answer.status}",
                retry_after_s=retry_after(answer.headers.get("retry-after")),
            )
        raise permanent(f"http_{answer.status}", f"the receiver answered HTTP {answer.status}")
