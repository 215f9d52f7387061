"""The Slack channel: ``chat.postMessage`` (``chat.postEphemeral``) with the bot token.

JSON ``{"channel", "text", "thread_ts"?, "metadata"}`` where the metadata
event (``hostkit_delivery``) carries the intent id, so a reader of the
channel history can tell a retried post. An approval prompt adds Block Kit
blocks: the text as a section and two buttons (``hostkit_approve`` /
``hostkit_deny``) whose values are the commands ``approve CODE`` / ``deny
CODE`` the Slack transport turns back into an inbound command. The answer
to a press of one of them is ``chat.postEphemeral`` to the user who pressed
(``{"channel", "user", "text", "thread_ts"?}``): only they see it.

Slack answers errors with HTTP 200 and ``{"ok": false, "error": ...}``:
``ratelimited`` and Slack-side failures are transient, everything else
(``channel_not_found``, ``not_in_channel``, ``invalid_auth``, ...) is
permanent. HTTP 429 (``Retry-After``) and 5xx are transient.

Every text is posted as mrkdwn, so model text could otherwise write Slack
control sequences (``<!channel>``, ``<https://evil|Approve>``): ``&``, ``<``
and ``>`` are escaped the way Slack asks, in the message text and the prompt
section alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from hostkit.delivery._channel import payload_text, permanent, reply_target, transient
from hostkit.delivery._http import SharedClient, check_channel, post, retry_after
from hostkit.types import PRESS_ANSWER

__all__ = ["SlackChannel"]

# Slack truncates longer texts; a section block holds at most 3000 characters.
MAX_TEXT = 40_000
MAX_SECTION = 3_000
# chat.postMessage answers "rate_limited" for too many messages to one channel, besides
# the Web API's own "ratelimited".
_TRANSIENT_ERRORS = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
    }
)
_ERROR_CODE = re.compile(r"^[a-z0-9_]{1,60}$")
# A refusal's reason in the opening of an answer that broke off (Slack writes it next).
_OPENING_ERROR = re.compile(rb'"error"\s*:\s*"([a-z0-9_]{1,60})"')


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: no mention, link or command can be spelled in ``text``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def approval_blocks(text: str, approval: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A section with the prompt and an actions block with Approve / Deny buttons."""
    code = str(approval.get("code", ""))
    return [
        # verbatim: mrkdwn text objects otherwise parse a plain @channel or @here in the
        # call's arguments into a mention that notifies the whole channel.
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": _cut(text, MAX_SECTION), "verbatim": True},
        },
        {
            "type": "actions",
            "block_id": "hostkit_approval",
            "elements": [
                {
                    "type": "button",
                    "action_id": "hostkit_approve",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "style": "primary",
                    "value": f"approve {code}",
                },
                {
                    "type": "button",
                    "action_id": "hostkit_deny",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "style": "danger",
                    "value": f"deny {code}",
                },
            ],
        },
    ]


class SlackChannel:
    """Posts to ``<api_origin>/chat.postMessage``; the token is sent only as a Bearer header."""

    def __init__(
        self,
        api_origin: str,
        token: str,
        client: httpx.AsyncClient | SharedClient,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        timeout_s = check_channel(api_origin, token, timeout_s)
        self.api_origin = api_origin.rstrip("/")
        self._token = token
        self._client = client
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"SlackChannel({self.api_origin!r})"

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        reply = reply_target(route)
        channel, thread = reply.get("channel"), reply.get("thread_ts")
        if not isinstance(channel, str) or not channel:
            raise permanent("bad_route", "the slack reply target has no channel")
        if thread is not None and (not isinstance(thread, str) or not thread):
            raise permanent("bad_route", "the slack thread_ts is not a timestamp string")
        text = _cut(escape(payload_text(payload)), MAX_TEXT)
        body: dict[str, Any] = {"channel": channel, "text": text}
        if thread:
            body["thread_ts"] = thread
        if isinstance(payload.get(PRESS_ANSWER), Mapping):
            # To the presser alone; no route to them is a dead letter, never a channel post.
            user = reply.get("user")
            if not isinstance(user, str) or not user:
                raise permanent("bad_route", "the answer to a press names no slack user")
            await self._call("chat.postEphemeral", {**body, "user": user})
            return
        body["metadata"] = {
            "event_type": "hostkit_delivery",
            "event_payload": {"intent_id": idempotency_key},
        }
        approval = payload.get("approval")
        if isinstance(approval, Mapping):
            body["blocks"] = approval_blocks(text, approval)
        await self._call("chat.postMessage", body)

    async def _call(self, method: str, body: Mapping[str, Any]) -> None:
        """One Web API call; returns when Slack accepted it, else ``DeliveryRefused``."""
        answer = await post(
            self._client,
            f"{self.api_origin}/{method}",
            content=json.dumps(body, separators=(",", ":")).encode(),
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "Authorization": f"Bearer {self._token}",
            },
            timeout_s=self._timeout_s,
        )
        if answer.status == 429:
            raise transient(
                "ratelimited",
                "slack answered HTTP 429",
                retry_after_s=retry_after(answer.headers.get("retry-after")),
            )
        if answer.status >= 500 or answer.status == 408:
            raise transient(f"http_{answer.status}", f"slack answered HTTP {answer.status}")
        if answer.status != 200:
            raise permanent(f"http_{answer.status}", f"slack answered HTTP {answer.status}")
        accepted = answer.ok()
        if accepted is None:
            raise transient("bad_response", "slack's answer is not a Web API response")
        if accepted:
            return
        data = answer.json()
        error = data.get("error") if isinstance(data, dict) else None
        if answer.cut and data is None:
            found = _OPENING_ERROR.search(answer.body)
            if found is None:
                # Refused, but the reason broke off with the answer: it may be a "for now"
                # (ratelimited), so it is not dead-lettered on a guess.
                raise transient("slack_error", "slack refused the post; its reason was cut off")
            error = found.group(1).decode()
        code = error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else "slack_error"
        if code in _TRANSIENT_ERRORS:
            raise transient(
                code,
                "slack refused the post for now",
                retry_after_s=retry_after(answer.headers.get("retry-after")),
            )
        raise permanent(code, "slack refused the post")
